"""The packing experiment of the FGD paper (Weng et al., ATC'23): pods arrive, never leave, or are skipped.

Owns workload inflation, the allocation curve, the packing policies (Profiles), the run over seeds and policies, and
the pod lists derived from openb's default list that steady-pack is measured on."""

from __future__ import annotations

import csv
import math
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trimtab.cluster import GPU_MILLI, ClusterState
from trimtab.cycle import Framework
from trimtab.model import Job, Node
from trimtab.plugins import default_registry
from trimtab.plugins.fragmentation import TargetWorkload
from trimtab.policy import CycleContext
from trimtab.profile import Profile
from trimtab.sim.parallel import parallel_map

# Policies as the experiment runs them: one scorer, the GPU-model filter, the highest score wins (ties at random);
# fgd and steady-pack also choose the GPU of a share.
_PLACE_OWN = {"fgd", "steady-pack"}
PACKING_POLICIES = ("random", "dot-product", "gpu-clustering", "gpu-packing", "best-fit", "fgd", "steady-pack",
                    "least-load", "least-connections", "round-robin", "weighted-round-robin")


def packing_profile(name: str) -> Profile:
    """The Profile of a packing policy: a built-in score plugin by name, or a profile YAML path."""
    if name.endswith((".yaml", ".yml")) or os.path.sep in name:
        return Profile.load(name)
    if name not in default_registry().names():
        raise ValueError(f"unknown packing policy {name!r}; built in: {', '.join(PACKING_POLICIES)}")
    return Profile(name=name, filter=["gpu-model"], score={name: 1.0},
                   place=name if name in _PLACE_OWN else "best-node")


def arrival_order(pods: Sequence[Job], capacity_milli: int, inflate: float, seed: int) -> list[Job]:
    """The arriving pods: all of `pods` in a seeded random order, then pods drawn from them at random (with
    repetition) while the arrived GPU request stays within `inflate` x `capacity_milli` (REFERENCE.md: "inflated
    until the arrived GPU request reaches 130% of the cluster's GPU capacity"). Pods are first sorted by id, so the
    order depends on the seed only. With inflate < the pods' own demand, the list is cut where it would exceed it."""
    rng = np.random.default_rng(seed)
    base = sorted(pods, key=lambda j: j.id)
    order = [base[i] for i in rng.permutation(len(base))]
    limit = inflate * capacity_milli
    total = 0
    out: list[Job] = []
    for job in order:
        milli = job.tasks * job.task.gpu_milli_total
        if total + milli > limit:
            return out
        out.append(job)
        total += milli
    while base:
        job = base[int(rng.integers(len(base)))]
        milli = job.tasks * job.task.gpu_milli_total
        if total + milli > limit:
            break
        out.append(job)
        total += milli
    return out


def _curve(arrived: np.ndarray, used: np.ndarray, capacity_milli: int, top_pct: int) -> list[float | None]:
    """Allocation ratio (%) at each whole percent 0..top_pct of arrived demand: the mean over the pods whose arrival
    rounds to that percent, else over the pods within +-1 (the authors' analysis); None where there are none."""
    pct = np.round(arrived / capacity_milli * 100.0)
    ratio = used / capacity_milli * 100.0
    out: list[float | None] = []
    for x in range(top_pct + 1):
        sel = ratio[pct == x]
        if sel.size == 0:
            sel = ratio[(pct >= x - 1) & (pct <= x + 1)]
        out.append(round(float(sel.mean()), 2) if sel.size else None)
    return out


def run_packing(nodes: Sequence[Node], pods: Sequence[Job], policy: str | Profile, *, inflate: float = 1.3,
                seed: int = 42, target: TargetWorkload | None = None) -> dict[str, Any]:
    """One run: pods arrive in `arrival_order`, each placed by the policy or skipped. Returns the curve
    (`alloc_pct[x]` at x% arrived, x = 0..round(100 inflate)), `failed` pods, `arrived`, and `wall_s`.
    `target` is the workload fgd and steady-pack measure fragmentation against (default: `pods`, 95% most popular)."""
    t0 = time.perf_counter()
    profile = policy if isinstance(policy, Profile) else packing_profile(policy)
    if target is None and (set(profile.score) & _PLACE_OWN):
        target = TargetWorkload.from_jobs(pods)
    if target is not None:
        args = {name: {**profile.args.get(name, {}), "target": target} for name in profile.score if name in _PLACE_OWN}
        profile = profile.model_copy(update={"args": {**profile.args, **args}})
    cluster = ClusterState(nodes)
    capacity = cluster.total_gpus * GPU_MILLI
    if capacity == 0:
        raise ValueError("the cluster has no GPUs")
    framework = Framework(profile, default_registry())
    rng = np.random.default_rng(seed)
    ctx = CycleContext(0.0, cluster, (), {}, {}, {}, rng)
    for plugin in framework.plugins:
        plugin.open(ctx)
    arrivals = arrival_order(pods, capacity, inflate, seed)
    arrived = np.zeros(len(arrivals), dtype=np.int64)
    used = np.zeros(len(arrivals), dtype=np.int64)
    total_arrived = total_used = failed = 0
    for i, job in enumerate(arrivals):
        total_arrived += job.tasks * job.task.gpu_milli_total
        alloc = framework.try_place(job, ctx)
        if alloc is None:
            failed += 1
        else:
            cluster.allocate(alloc)
            total_used += alloc.gpu_milli
        arrived[i], used[i] = total_arrived, total_used
    return {"policy": profile.name, "seed": seed, "pods": len(arrivals), "failed": failed,
            "alloc_pct": _curve(arrived, used, capacity, round(inflate * 100)),
            "wall_s": round(time.perf_counter() - t0, 3)}


def _run_task(nodes: Sequence[Node], pods: Sequence[Job], inflate: float, target: TargetWorkload,
              task: tuple[str, int]) -> dict[str, Any]:
    return run_packing(nodes, pods, task[0], inflate=inflate, seed=task[1], target=target)


def packing_experiment(nodes: Sequence[Node], pods: Sequence[Job], policies: Sequence[str], seeds: Sequence[int],
                       *, inflate: float = 1.3, workers: int | None = None) -> dict[str, Any]:
    """Every policy on every seed (forked processes, up to `workers`, default the local cores). Returns
    {"inflate", "seeds", "capacity_gpus", "policies": {name: {"mean": {"0": %, ..}, "per_seed": {seed: {...}},
    "failed_mean", "wall_s_mean"}}}; mean[x] is the mean over seeds of the allocation ratio at x% arrived demand."""
    target = TargetWorkload.from_jobs(pods)
    tasks = [(p, s) for p in policies for s in seeds]
    for p in policies:
        packing_profile(p)  # fail early on an unknown name
    runs = parallel_map(_run_task, tasks, (nodes, pods, inflate, target), workers)
    out: dict[str, Any] = {"inflate": inflate, "seeds": list(seeds),
                           "capacity_gpus": sum(n.capacity.gpus for n in nodes), "policies": {}}
    for p in policies:
        mine = [runs[i] for i, t in enumerate(tasks) if t[0] == p]
        top = len(mine[0]["alloc_pct"])
        mean: dict[str, float | None] = {}
        for x in range(top):
            vals = [r["alloc_pct"][x] for r in mine if r["alloc_pct"][x] is not None]
            mean[str(x)] = round(float(np.mean(vals)), 2) if vals else None
        out["policies"][p] = {
            "mean": mean,
            "per_seed": {str(r["seed"]): {"alloc_pct": {str(x): v for x, v in enumerate(r["alloc_pct"])},
                                          "failed": r["failed"], "pods": r["pods"], "wall_s": r["wall_s"]}
                         for r in mine},
            "failed_mean": round(float(np.mean([r["failed"] for r in mine])), 1),
            "wall_s_mean": round(float(np.mean([r["wall_s"] for r in mine])), 3),
        }
    return out


OPENB_VARIANTS = ("cpu250", "gpushare80", "multigpu", "gpuspec33", "gpuspec33u")


def write_openb_variants(pods_csv: Path, nodes_csv: Path, out_dir: Path) -> list[Path]:
    """Write `out_dir/<variant>.csv` for OPENB_VARIANTS, sampled from the default pod list the way Alibaba derived its
    lists (one RNG seeded 1, the variants drawn in this order, pods renamed openb-pod-00000..):

    - cpu250: the default pods plus 1.5x as many CPU-only pods again, drawn from its CPU-only pods;
    - gpushare80: each whole 1-GPU pod replaced, with probability 0.6, by one of its GPU-share pods;
    - multigpu: each whole 1-GPU pod replaced, with probability 0.1, by one of its multi-GPU pods;
    - gpuspec33: each GPU pod, with probability 0.33, constrained to a GPU model drawn in proportion to the GPUs
      of each model (70%) or to two such models (30%);
    - gpuspec33u: as gpuspec33 but each model drawn uniformly over the node list's GPU models, so the small models
      get more constrained demand than they have GPUs (a stress test of protecting scarce models; not one of
      Alibaba's lists)."""
    with pods_csv.open(newline="") as f:
        rows = list(csv.DictReader(f))
    with nodes_csv.open(newline="") as f:
        nodes = list(csv.DictReader(f))
    header = list(rows[0])
    rng = random.Random(1)
    cpu_only = [r for r in rows if r["num_gpu"] == "0"]
    shares = [r for r in rows if r["num_gpu"] == "1" and r["gpu_milli"] != "1000"]
    multi = [r for r in rows if int(r["num_gpu"]) > 1]

    def whole_one(r: dict[str, str]) -> bool:
        return r["num_gpu"] == "1" and r["gpu_milli"] == "1000"

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def write(name: str, pods: list[dict[str, str]]) -> None:
        path = out_dir / f"{name}.csv"
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, header)
            writer.writeheader()
            for i, r in enumerate(pods):
                writer.writerow({**r, "name": f"openb-pod-{i:05d}"})
        written.append(path)

    # the draws must stay in this order: the lists share one RNG
    write("cpu250", rows + [rng.choice(cpu_only) for _ in range(int(1.5 * len(cpu_only)))])
    write("gpushare80", [rng.choice(shares) if whole_one(r) and rng.random() < 0.6 else r for r in rows])
    write("multigpu", [rng.choice(multi) if whole_one(r) and rng.random() < 0.1 else r for r in rows])
    models = [n["model"] for n in nodes for _ in range(int(n["gpu"])) if n["model"]]

    def constrain(r: dict[str, str], models: list[str]) -> dict[str, str]:
        r = dict(r)
        if r["num_gpu"] != "0" and rng.random() < 0.33:
            model = rng.choice(models)
            r["gpu_spec"] = model if rng.random() < 0.7 else f"{model}|{rng.choice(models)}"
        return r

    write("gpuspec33", [constrain(r, models) for r in rows])
    distinct = sorted(set(models))
    write("gpuspec33u", [constrain(r, distinct) for r in rows])
    return written


def parse_seeds(text: str) -> list[int]:
    """"42-51" -> 42..51; "1,5,7" -> [1, 5, 7]; "42" -> [42]."""
    seeds: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, sep, hi = part.partition("-")
        if sep:
            if int(hi) < int(lo):
                raise ValueError(f"bad seed range {part!r}")
            seeds.extend(range(int(lo), int(hi) + 1))
        else:
            seeds.append(int(part))
    if not seeds:
        raise ValueError("no seeds")
    return seeds


def plot_packing(result: dict[str, Any], path: str | Path, title: str = "") -> None:
    """A PNG of the mean curves: allocation ratio against arrived GPU demand, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, data in result["policies"].items():
        xs = [int(k) for k, v in data["mean"].items() if v is not None]
        ys = [v for v in data["mean"].values() if v is not None]
        ax.plot(xs, ys, label=f"{name} ({data['mean'].get(str(xs[-1]), math.nan)})", linewidth=1.4)
    ax.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("arrived GPU demand (% of capacity)")
    ax.set_ylabel("GPU allocation ratio (%)")
    lo = 80 if result["inflate"] >= 1.0 else 0
    ax.set_xlim(lo, round(result["inflate"] * 100))
    ax.set_ylim(lo, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
