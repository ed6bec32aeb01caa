"""`trimtab kube`'s HTTP endpoints: /healthz, /readyz (every informer has listed, and this replica leads or
stands by) and /metrics in Prometheus text.

Owns KubeMetrics (fed by the scheduler's CycleReports) and serve_endpoints. Metric names: those of `trimtab serve`
where they mean the same (trimtab_sched_cycle_seconds, trimtab_queue_length, trimtab_gpus_allocated,
trimtab_gpus_total, trimtab_gpu_alloc_ratio; trimtab_kube_events_dropped its own), and kube-scheduler's for attempts
(scheduler_schedule_attempts_total{result,profile}, scheduler_scheduling_attempt_duration_seconds{result,profile}):
a cycle decides all its pods at once, so each attempt's duration is its cycle's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trimtab.kube.live import CycleReport, KubeScheduler

CYCLE_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class KubeMetrics(Collector):
    """Observes every cycle of `scheduler`; gauges come from the last report."""

    def __init__(self, scheduler: KubeScheduler) -> None:
        self.profile = scheduler.profile.name
        self.registry = CollectorRegistry(auto_describe=False)
        self.cycle_seconds = Histogram("trimtab_sched_cycle_seconds", "Wall-clock time of a scheduling cycle",
                                       buckets=CYCLE_BUCKETS_S, registry=self.registry)
        self.attempts = Counter("scheduler_schedule_attempts", "Scheduling attempts by result (jobs: a gang is one)",
                                ["result", "profile"], registry=self.registry)
        self.attempt_seconds = Histogram("scheduler_scheduling_attempt_duration_seconds",
                                         "Scheduling attempt latency (the cycle that decided it)",
                                         ["result", "profile"], buckets=CYCLE_BUCKETS_S, registry=self.registry)
        self.rollbacks = Counter("trimtab_gang_rollbacks", "Gangs whose binding failed midway and were evicted",
                                 registry=self.registry)
        self._last = CycleReport()
        self._events = scheduler.events
        scheduler.cycle_observers.append(self.observe)
        self.registry.register(self)

    def observe(self, report: CycleReport) -> None:
        self.cycle_seconds.observe(report.seconds)
        for result, count in (("scheduled", report.scheduled), ("unschedulable", report.unschedulable),
                              ("error", report.errors)):
            if count:
                self.attempts.labels(result, self.profile).inc(count)
                for _ in range(count):
                    self.attempt_seconds.labels(result, self.profile).observe(report.seconds)
        if report.errors:
            self.rollbacks.inc(report.errors)
        self._last = report

    def collect(self) -> Iterator[Metric]:
        last = self._last
        queue = GaugeMetricFamily("trimtab_queue_length", "Pending jobs per tenant (namespace)", labels=["tenant"])
        for tenant, count in sorted(last.pending_by_tenant.items()):
            queue.add_metric([tenant], count)
        alloc = GaugeMetricFamily("trimtab_gpus_allocated", "GPUs allocated per node", labels=["node"])
        cap = GaugeMetricFamily("trimtab_gpus_total", "GPUs per node", labels=["node"])
        for node, total in sorted(last.gpus_total.items()):
            cap.add_metric([node], total)
            alloc.add_metric([node], last.gpus_allocated.get(node, 0))
        yield from (queue, alloc, cap)
        total = sum(last.gpus_total.values())
        held = sum(v for k, v in last.gpus_allocated.items() if k in last.gpus_total)
        yield GaugeMetricFamily("trimtab_gpu_alloc_ratio", "GPUs allocated / GPUs, now",
                                value=held / total if total else 0.0)
        yield CounterMetricFamily("trimtab_kube_events_dropped", "Events dropped because the Event queue was full "
                                  "(best effort, as client-go's broadcaster)", value=self._events.dropped)


def serve_endpoints(metrics: KubeMetrics, scheduler: KubeScheduler, host: str, port: int) -> ThreadingHTTPServer:
    """Serve /healthz, /readyz and /metrics on host:port from a daemon thread; the server (`.server_address`
    says the port when `port` is 0). Read-only: nothing here changes state."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._send(200, generate_latest(metrics.registry), "text/plain; version=0.0.4")
            elif self.path == "/healthz":
                self._send(200, b"ok\n")
            elif self.path == "/readyz":
                ready = scheduler.ready.is_set()
                self._send(200 if ready else 503, b"ok\n" if ready else b"informers not synced\n")
            else:
                self._send(404, b"not found\n")

        def _send(self, code: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # scrapes are not worth a log line
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="kube-endpoints", daemon=True).start()
    return server
