"""Benchmark: the scheduler at 5,000 nodes x 8 GPUs. Prints one JSON line per measurement: `bulk` (40,000 pending jobs
placed from an empty cluster), `incremental` (cycle latency under single arrivals and completions at ~90% allocation
with 10,000 jobs waiting) and `consolidation` (a burst of 20,000 one-GPU jobs)."""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from trimtab.cluster import ClusterState
from trimtab.model import Job, JobState, Node, Resources, Taint
from trimtab.profile import Profile
from trimtab.scheduler import Scheduler

MODELS = ("a100", "v100", "h100", "t4")
# Philly-derived GPU-count mix (jobs per size), capped at 64 GPUs
SIZES = np.array([1, 2, 4, 8, 16, 32, 64])
SIZE_JOBS = np.array([76627, 1818, 1870, 1643, 199 + 7 + 7, 67, 6], dtype=float)


def make_cluster(nodes: int, rng: np.random.Generator) -> list[Node]:
    out = []
    for i in range(nodes):
        labels = {"zone": f"z{i % 4}"}
        if rng.random() < 0.1:
            labels["pool"] = "premium"
        taints = (Taint("dedicated", "infra"),) if rng.random() < 0.02 else ()
        out.append(Node(f"n{i:05d}", Resources(8, 64_000, 512 * 1024), gpu_model=MODELS[i % len(MODELS)],
                        rack=f"r{i // 32}", labels=labels, taints=taints))
    return out


def make_jobs(count: int, rng: np.random.Generator, prefix: str = "j", start: int = 0) -> list[Job]:
    sizes = rng.choice(SIZES, size=count, p=SIZE_JOBS / SIZE_JOBS.sum())
    jobs = []
    for k, g in enumerate(sizes):
        selector = {"pool": "premium"} if rng.random() < 0.05 else {}
        models = (MODELS[int(rng.integers(len(MODELS)))],) if rng.random() < 0.1 else ()
        jobs.append(Job(f"{prefix}{start + k}", 0.0, int(g), Resources(gpus=1, cpu_milli=4000, mem_mib=16_384),
                        duration_s=float(rng.lognormal(7, 1.5)), tenant=f"t{k % 15}", gpu_models=models,
                        node_selector=selector))
    return jobs


def rss_mib() -> int:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def bulk(nodes: int, jobs: int, policy: str, seed: int) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    sched = Scheduler(ClusterState(make_cluster(nodes, rng)), policy, seed=seed)
    for job in make_jobs(jobs, rng):
        sched.submit(job, 0.0)
    t0 = time.perf_counter()
    placed = 0
    while True:  # cycles until nothing more starts (one usually does it)
        decision = sched.cycle(0.0)
        if not decision.starts:
            break
        placed += len(decision.starts)
        sched._dirty = True
    total = time.perf_counter() - t0
    return {"bench": "bulk", "policy": policy, "nodes": nodes, "jobs": jobs, "placed": placed,
            "gpu_alloc": round(sched.cluster.allocated_gpus / sched.cluster.total_gpus, 4),
            "placements_per_s": round(placed / total, 1), "total_s": round(total, 2), "peak_rss_mib": rss_mib()}


def incremental(nodes: int, waiting: int, events: int, policy: str, seed: int) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    sched = Scheduler(ClusterState(make_cluster(nodes, rng)), policy, seed=seed)
    target = int(0.9 * sched.cluster.total_gpus)
    k = 0
    # fill to ~90% with running jobs, then queue `waiting` more that cannot all start
    while sched.cluster.allocated_gpus < target - 64:
        asked = sched.cluster.allocated_gpus
        for job in make_jobs(2000, rng, start=k):
            if asked + job.gpus <= target:
                sched.submit(job, 0.0)
                asked += job.gpus
        k += 2000
        sched.cycle(0.0)
    for job in make_jobs(waiting, rng, prefix="w", start=0):
        sched.submit(Job(job.id, 0.0, max(job.tasks, 8), job.task, job.duration_s, job.tenant,
                         gpu_models=job.gpu_models, node_selector=job.node_selector), 0.0)
    sched.cycle(0.0)
    latencies = []
    now = 1.0
    arrivals = make_jobs(events, rng, prefix="a")
    for i in range(events):
        if i % 2 == 0:
            sched.submit(Job(arrivals[i].id, now, arrivals[i].tasks, arrivals[i].task, arrivals[i].duration_s),
                         now)
        else:
            victim = next(iter(sched.running))
            sched.stopped(victim, now, JobState.COMPLETED)
        t0 = time.perf_counter()
        sched.cycle(now)
        latencies.append((time.perf_counter() - t0) * 1000)
        now += 1.0
    lat = np.array(latencies)
    return {"bench": "incremental", "policy": policy, "nodes": nodes, "waiting": waiting, "events": events,
            "gpu_alloc": round(sched.cluster.allocated_gpus / sched.cluster.total_gpus, 4),
            "cycle_p50_ms": round(float(np.percentile(lat, 50)), 3),
            "cycle_p99_ms": round(float(np.percentile(lat, 99)), 3),
            "cycle_max_ms": round(float(lat.max()), 3), "peak_rss_mib": rss_mib()}


def consolidation(nodes: int, jobs: int, policy: str, seed: int, window_s: float = 10.0) -> dict[str, object]:
    """A burst of one-GPU jobs of one tenant (1,000 a second), a cycle a second, placed one by one and then with
    task consolidation: placement calls, cycle time, and whether every job started at the same moment."""
    rng = np.random.default_rng(seed)
    cluster = make_cluster(nodes, rng)
    burst = [Job(f"b{k}", k // 1000, 1, Resources(gpus=1, cpu_milli=4000, mem_mib=16_384), duration_s=3600.0,
                 tenant="t0") for k in range(jobs)]
    out: dict[str, object] = {"bench": "consolidation", "policy": policy, "nodes": nodes, "jobs": jobs,
                              "window_s": window_s}
    starts = {}
    for label, window in (("plain", 0.0), ("units", window_s)):
        profile = Profile.load(policy).model_copy(update={"consolidate_window_s": window})
        sched = Scheduler(ClusterState(cluster), profile, seed=seed)
        spent = 0.0
        started: dict[str, float] = {}
        for second in range(jobs // 1000 + 1):
            for job in burst[second * 1000:(second + 1) * 1000]:
                sched.submit(job, float(second))
            t0 = time.perf_counter()
            decision = sched.cycle(float(second))
            spent += time.perf_counter() - t0
            started.update((job.id, float(second)) for job, _ in decision.starts)
        starts[label] = started
        out[f"{label}_placements"] = sched.framework.placements_tried
        out[f"{label}_cycle_s"] = round(spent, 3)
    out["started"] = len(starts["units"])
    out["same_starts"] = starts["plain"] == starts["units"]
    out["speedup"] = round(float(out["plain_cycle_s"]) / max(float(out["units_cycle_s"]), 1e-9), 1)
    out["peak_rss_mib"] = rss_mib()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("which", nargs="*", default=["bulk", "incremental"])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=40_000)
    parser.add_argument("--waiting", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--burst", type=int, default=20_000, help="one-GPU jobs in the consolidation burst")
    parser.add_argument("--policy", default="las")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for which in args.which:
        if which == "bulk":
            print(json.dumps(bulk(args.nodes, args.jobs, args.policy, args.seed)), flush=True)
        elif which == "incremental":
            print(json.dumps(incremental(args.nodes, args.waiting, args.events, args.policy, args.seed)), flush=True)
        elif which == "consolidation":
            print(json.dumps(consolidation(args.nodes, args.burst, args.policy, args.seed)), flush=True)
        else:
            raise SystemExit(f"unknown measurement {which!r}: bulk, incremental or consolidation")


if __name__ == "__main__":
    main()
