"""Prometheus exposition of the serve daemon: `trimtab_`-prefixed DESIGN.md metrics, queue length per tenant,
GPUs allocated per node, and the scheduling-cycle latency histogram, in a registry of its own (no global state)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trimtab.serve.daemon import Daemon
from trimtab.serve.http.views import summary

CYCLE_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
SUMMARY_CACHE_S = 2.0


class ServeMetrics(Collector):
    """Collects at scrape time: live gauges from the daemon's snapshot, store aggregates (cached for
    SUMMARY_CACHE_S, so a scrape storm does not become a query storm), and the cycle histogram it observes."""

    def __init__(self, daemon: Daemon, window_s: float = 3600.0) -> None:
        self.daemon = daemon
        self.window_s = window_s
        self.registry = CollectorRegistry(auto_describe=False)
        self.cycle_seconds = Histogram("trimtab_sched_cycle_seconds", "Wall-clock time of a scheduling cycle",
                                       buckets=CYCLE_BUCKETS_S, registry=self.registry)
        self._recent_ms: deque[float] = deque(maxlen=2000)
        self._summary: dict[str, float | int | None] = {}
        self._summary_at = -1e9
        daemon.cycle_observers.append(self._observe)
        self.registry.register(self)

    def _observe(self, seconds: float) -> None:
        self.cycle_seconds.observe(seconds)
        self._recent_ms.append(seconds * 1000.0)

    def collect(self) -> Iterator[Metric]:
        now = time.monotonic()
        if now - self._summary_at > SUMMARY_CACHE_S:
            with self.daemon.store.reader() as s:
                self._summary = summary(s, time.time(), self.window_s)
            self._summary_at = now
        for key, value in self._summary.items():
            if value is not None:
                yield GaugeMetricFamily(f"trimtab_{key}", _HELP.get(key, key.replace("_", " ")), value=value)
        recent = np.array(self._recent_ms)
        if recent.size:
            yield GaugeMetricFamily("trimtab_sched_cycle_p50_ms", "Median scheduling cycle, recent cycles",
                                    value=float(np.percentile(recent, 50)))
            yield GaugeMetricFamily("trimtab_sched_cycle_p99_ms", "p99 scheduling cycle, recent cycles",
                                    value=float(np.percentile(recent, 99)))
        snap = self.daemon.snapshot()
        queue = GaugeMetricFamily("trimtab_queue_length", "Pending jobs per tenant", labels=["tenant"])
        running = GaugeMetricFamily("trimtab_running_jobs", "Running jobs per tenant", labels=["tenant"])
        held = GaugeMetricFamily("trimtab_tenant_gpus_allocated", "GPUs held per tenant", labels=["tenant"])
        for q in snap["queues"]:
            queue.add_metric([q["tenant"]], q["pending"])
            running.add_metric([q["tenant"]], q["running"])
            held.add_metric([q["tenant"]], q["gpus_held"])
        alloc = GaugeMetricFamily("trimtab_gpus_allocated", "GPUs allocated per node", labels=["node"])
        cap = GaugeMetricFamily("trimtab_gpus_total", "GPUs per node", labels=["node"])
        for node in snap["nodes"]:
            alloc.add_metric([node["name"]], node["gpus_allocated"])
            cap.add_metric([node["name"]], node["gpus"])
        yield from (queue, running, held, alloc, cap)
        yield from _job_gauges(self.daemon.telemetry())
        total = snap["gpus_total"]
        yield GaugeMetricFamily("trimtab_gpu_alloc_ratio", "GPUs allocated / GPUs, now",
                                value=snap["gpus_allocated"] / total if total else 0.0)


def _job_gauges(telemetry: list[dict[str, Any]]) -> Iterator[Metric]:
    """Per running job: the GPUs it holds now and, once known, its GPU utilisation, throughput and batch size."""
    gauges = {
        "gpu_util": GaugeMetricFamily("trimtab_job_gpu_util", "GPU utilisation of a job's GPUs (0..1; NVML, else "
                                      "what it reports)", labels=["job", "tenant"]),
        "samples_per_s": GaugeMetricFamily("trimtab_job_samples_per_second", "Throughput a job reports",
                                           labels=["job", "tenant"]),
        "batch_size": GaugeMetricFamily("trimtab_job_batch_size", "Batch size a job reports", labels=["job", "tenant"]),
        "gpus": GaugeMetricFamily("trimtab_job_gpus", "GPUs a running job holds now", labels=["job", "tenant"]),
    }
    for seen in telemetry:
        for key, gauge in gauges.items():
            if seen[key] is not None and (key != "batch_size" or seen[key]):
                gauge.add_metric([seen["job"], seen["tenant"]], seen[key])
    yield from gauges.values()


_HELP = {
    "jobs_submitted": "Jobs accepted", "jobs_completed": "Jobs completed", "jobs_failed": "Jobs failed",
    "jobs_cancelled": "Jobs cancelled", "jobs_lost": "Jobs in no known state (must be 0)",
    "avg_jct_s": "Mean job completion time (end - submit), completed jobs",
    "avg_wait_s": "Mean wait (first start - submit)", "gpu_util": "Allocated / capacity, time-averaged",
    "failure_rate": "Failed attempts / attempts", "preemptions": "Attempts ended by preemption",
}
