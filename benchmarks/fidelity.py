"""What was simulated is what runs: replay a workload of manifests live and in the simulator, and compare job by job.

The live world is `kube` (benchmarks/fidelity_kube.py: a KWOK cluster of the project's control plane, `trimtab
kube --policy P`, pods completed by KWOK after their duration) or `serve` (benchmarks/fidelity_serve.py: `trimtab
serve --policy P` on virtual GPUs shaped as the manifests' nodes, tasks that sleep for their duration). Each
workload object goes in at its `trimtab.io/submit-time`. The simulation is `simulate` of the same manifests under
the assumptions of the live world: preempted work restarts from zero, a restart costs nothing, each job's run
lasts as long as its last live run did (from the start of its last attempt to its end) and each job arrives when
it arrived live, so the world's own latencies (KWOK completing a pod later than its duration, a process starting,
the order in which two jobs of one submit time reach the scheduler) are not counted as trimtab's. What comes back
after an eviction follows the world's rules: on kube, the Job controller recreates a Job's pods after its pod
failure backoff (as `simulate --manifests` has it), plus the controller's own latency as measured live, and a
preemptor's GPUs come free as long after the eviction as they did live (the median from a victim's pod seen
terminating to another job's pod seen bound on its node: `SimConfig.evict_s`); serve queues a preempted job again
at once. The world's latency is measured on its own and printed as the `world` line.

Output (stdout, one JSON line per job, then `world`, then `summary`):
    {"job", "sim_start_s", "live_start_s", "sim_end_s", "live_end_s", "sim_preemptions", "live_preemptions"}
    {"world": {"name", "completion_lag_s": {"p50", "max"}, "jobs_unfinished", "recreate_lag_s", "evict_lag_s"}}
    {"summary": {"jobs", "within_2s", "order_agreement", "preemptions_sim", "preemptions_live"}}
Times are seconds from the workload's start; a job's start is its first start (simulated: when its first run
began to make progress, which for a preemptor is once its victims' GPUs were free). `order_agreement` is Kendall's
tau of the start orders.

Usage (from the project root):
    .venv/bin/python benchmarks/fidelity.py --manifests benchmarks/fidelity/mixed-1.yaml --policy fifo-backfill \
        --world kube
The workloads' rules: preemptible work is a batch/v1 Job or a PodGroup's pods (on Kubernetes an evicted bare Pod is
gone, which the simulator does not model), and every pod has a duration."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity_kube import missing_binaries, run_kube
from fidelity_serve import run_serve
from trimtab.formats.k8s import load_manifests
from trimtab.model import Job
from trimtab.profile import Profile, profile_for_manifests
from trimtab.sim.run import SimConfig, simulate


def run_sim(world: str, jobs: list[Job], path: Path, policy: str, live: dict[str, dict[str, Any]],
            evict_s: float = 0.0) -> dict[str, dict[str, Any]]:
    """`simulate --manifests` of the same workload, each job's duration its last live run and its submit time the
    live one, under the world's rule for evicted jobs (see the module)."""
    manifests = load_manifests(path)
    profile, _ = profile_for_manifests(Profile.load(policy), manifests)
    replayed = []
    lag_s = controller_lag_s(jobs, live)
    for job in jobs:
        rec = live.get(job.id)
        if rec and rec["end"] is not None and rec["last_start"] is not None:
            job = dataclasses.replace(job, duration_s=rec["end"] - rec["last_start"])
        if rec and rec.get("submit") is not None:
            job = dataclasses.replace(job, submit_s=rec["submit"])
        if world == "serve":  # no Job controller: a preempted job is queued again at once
            job = dataclasses.replace(job, pod_backoff=None)
        elif job.pod_backoff is not None and lag_s is not None:
            job = dataclasses.replace(job, pod_backoff=dataclasses.replace(job.pod_backoff, lag_s=lag_s))
        replayed.append(job)
    config = SimConfig(checkpoint_s=1e15, restart_s=0.0, evict_s=evict_s, timing=False)
    record = simulate(manifests.nodes, replayed, profile, config)
    return {j["id"]: {"start": j["runs"][0]["progress_from"] if j["runs"] else None, "end": j["end"],
                      "preemptions": j["preemptions"]} for j in record["jobs"]}


def controller_lag_s(jobs: list[Job], live: dict[str, dict[str, Any]]) -> float | None:
    """The median time a Job controller took, past its pod failure backoff, to bring evicted pods back (None: no
    pods came back): the world's latency, replayed by the simulation."""
    lags = []
    for job in jobs:
        rec, backoff = live.get(job.id), job.pod_backoff
        if rec is None or backoff is None:
            continue
        for k, (evicted, returned) in enumerate(zip(rec.get("evicted", []), rec.get("returned", []), strict=True)):
            if returned is not None:
                lags.append(returned - evicted - backoff.delay_s((k + 1) * (1 if backoff.per_index else job.tasks)))
    return float(np.median(lags)) if lags else None


def kendall_tau(a: list[float], b: list[float]) -> float:
    """Kendall's tau-b of two rankings (ties in either count as neither concordant nor discordant)."""
    x, y = np.asarray(a), np.asarray(b)
    dx, dy = np.sign(x[:, None] - x[None, :]), np.sign(y[:, None] - y[None, :])
    num = float((dx * dy).sum())
    den = float(np.sqrt((dx != 0).sum() * (dy != 0).sum()))
    return num / den if den else 1.0


def compare(sim: dict[str, dict[str, Any]], live: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for job_id in sorted(sim, key=lambda j: (sim[j]["start"] is None, sim[j]["start"] or 0.0)):
        rec = live.get(job_id, {"first_start": None, "end": None, "preemptions": 0})
        rows.append({"job": job_id, "sim_start_s": _r(sim[job_id]["start"]), "live_start_s": _r(rec["first_start"]),
                     "sim_end_s": _r(sim[job_id]["end"]), "live_end_s": _r(rec["end"]),
                     "sim_preemptions": sim[job_id]["preemptions"], "live_preemptions": rec["preemptions"]})
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    both = [r for r in rows if r["sim_start_s"] is not None and r["live_start_s"] is not None]
    within = sum(1 for r in both if abs(r["sim_start_s"] - r["live_start_s"]) <= 2.0)
    return {"jobs": len(rows), "within_2s": round(within / max(len(rows), 1), 3),
            "order_agreement": round(kendall_tau([r["sim_start_s"] for r in both],
                                                 [r["live_start_s"] for r in both]), 3),
            "preemptions_sim": sum(r["sim_preemptions"] for r in rows),
            "preemptions_live": sum(r["live_preemptions"] for r in rows)}


def evict_lag_s(lags: list[float]) -> float:
    """The median of the live eviction lags (0 without any): what the simulation replays as `evict_s`."""
    return float(np.median(lags)) if lags else 0.0


def world_latency(world: str, jobs: list[Job], live: dict[str, dict[str, Any]], evict_s: float) -> dict[str, Any]:
    """The world's completion lag: each finished job's last run (start of its last attempt to its end) past its
    duration (KWOK completing a pod; a process starting, sleeping and its exit being seen); the Job controller's
    lag; the eviction lag replayed."""
    durations = {job.id: job.duration_s for job in jobs if job.duration_s is not None}
    lags = [rec["end"] - rec["last_start"] - durations[job_id] for job_id, rec in live.items()
            if rec["end"] is not None and rec["last_start"] is not None and job_id in durations]
    return {"name": world, "completion_lag_s": {"p50": _r(float(np.median(lags))) if lags else None,
                                                "max": _r(max(lags)) if lags else None},
            "jobs_unfinished": sum(1 for rec in live.values() if rec["end"] is None),
            "recreate_lag_s": _r(controller_lag_s(jobs, live)), "evict_lag_s": _r(evict_s)}


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 2)


def _documents(path: Path) -> list[dict[str, Any]]:
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [doc for f in files for doc in yaml.safe_load_all(f.read_text()) if doc]


def run_live(world: str, path: Path, policy: str, workdir: Path | None) -> dict[str, Any]:
    """The live run: `jobs` (per job, as the world's script records it) and `evict_lags_s` (kube's; serve: none)."""
    docs = _documents(path)
    if world == "kube" and missing_binaries():
        sys.exit(f"the control-plane binaries are missing ({', '.join(missing_binaries())}): run `make kube-env`")
    with tempfile.TemporaryDirectory(prefix="trimtab-fidelity-") as tmp:
        where = workdir or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        if world == "kube":
            return run_kube(docs, policy, where)
        return {"jobs": run_serve(docs, path, policy, where), "evict_lags_s": []}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifests", type=Path, required=True, help="a YAML file, or a folder of them")
    parser.add_argument("--policy", default="fifo-backfill", help="a built-in policy or a profile YAML")
    parser.add_argument("--world", choices=["kube", "serve"], default="kube")
    parser.add_argument("--live", type=Path, help="a JSON file: the live run is saved there, or read from it "
                        "when it exists (to compare again without running live)")
    parser.add_argument("--workdir", type=Path, help="keep the live world's files and logs there")
    args = parser.parse_args()
    if args.live is not None and args.live.exists():
        live = json.loads(args.live.read_text())
    else:
        live = run_live(args.world, args.manifests, args.policy, args.workdir)
        if args.live is not None:
            args.live.write_text(json.dumps(live))
    jobs, by_job, evict_s = load_manifests(args.manifests).jobs, live["jobs"], evict_lag_s(live["evict_lags_s"])
    rows = compare(run_sim(args.world, jobs, args.manifests, args.policy, by_job, evict_s), by_job)
    for row in rows:
        print(json.dumps(row))
    print(json.dumps({"world": world_latency(args.world, jobs, by_job, evict_s)}))
    print(json.dumps({"summary": summary(rows)}))


if __name__ == "__main__":
    main()
