"""The `backlog` scenario of kube_side_by_side.py: --nodes KWOK nodes x --gpus-per-node GPUs and --pods one-GPU
pods created while no scheduler runs; then the scheduler starts, and this script's watch times the bindings. The
API server's own ceiling is measured on a cluster of the same size: a minimal client (CEILING_THREADS threads,
each on a kept-alive connection) writes `pods/binding` for pods no scheduler owns, nodes in turn, no scheduling.

Per measurement: `pods_per_s` (bound / (last bound - first bound), as the watch sees them) and, for the
schedulers, `start_to_all_bound_s` (from the process's start: its start-up and first lists included)."""

from __future__ import annotations

import argparse
import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

CEILING_THREADS = 32
NOBODY = "no-scheduler"  # the ceiling's pods: no scheduler binds them but the client


def _cluster(side: Any, workdir: Path, args: argparse.Namespace) -> Any:
    env = side.KubeEnv(workdir).start()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: env.add_gpu_nodes(1, args.gpus_per_node, prefix=f"gpu-{i}"), range(args.nodes)))
    env.wait_nodes_ready([f"gpu-{i}-0" for i in range(args.nodes)], timeout_s=120 + args.nodes)
    env.wait_service_account()
    return env


def _start(side: Any, env: Any, scheduler: str, args: argparse.Namespace) -> Any:
    """Start `scheduler`; its process (None for kube-scheduler, which the control plane owns)."""
    if scheduler == "kube-scheduler":
        env.start_kube_scheduler()
        return None
    return side.run_trimtab_kube(env, "--policy", args.policy, "--no-leader-elect", "--kube-api-qps", side.QPS,
                                 "--kube-api-burst", side.BURST)


def _ceiling(side: Any, env: Any, names: list[str], nodes: int) -> None:
    """Bind every pod of `names` from CEILING_THREADS threads, the nodes in turn."""
    targets = itertools.cycle([f"gpu-{i}-0" for i in range(nodes)])
    lock = threading.Lock()

    def bind(name: str) -> None:
        with lock:
            node = next(targets)
        side.post(env, f"/api/v1/namespaces/default/pods/{name}/binding",
                  {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}})

    with ThreadPoolExecutor(CEILING_THREADS) as pool:
        list(pool.map(bind, names))


def backlog(args: argparse.Namespace, scheduler: str, workdir: Path, side: Any) -> dict[str, Any]:
    """One measurement: `scheduler` is trimtab, kube-scheduler or ceiling (`side` is the kube_side_by_side
    module: its cluster, watch and client)."""
    env = _cluster(side, workdir, args)
    proc = None
    try:
        watch = side.PodWatch(env)
        name = side.SCHEDULER_NAME.get(scheduler, NOBODY)
        names = [f"b-{i}" for i in range(args.pods)]
        watch.create([side.pod(n, name) for n in names])
        bindable = min(args.pods, args.nodes * args.gpus_per_node)
        started = time.monotonic()
        if scheduler == "ceiling":
            _ceiling(side, env, names, args.nodes)
        else:
            proc = _start(side, env, scheduler, args)
        deadline = started + args.timeout_s
        while sum(1 for n in names if n in watch.bound) < bindable and time.monotonic() < deadline:
            time.sleep(0.2)
        with watch.lock:
            times = sorted(watch.bound[n] for n in names if n in watch.bound)
        rate = len(times) / max(times[-1] - times[0], 1e-9) if len(times) > 1 else 0.0
        out = {"bench": "kube_backlog", "scheduler": scheduler, "nodes": args.nodes, "pods": args.pods,
               "pods_bound": len(times), "pods_per_s": round(rate, 1)}
        if scheduler != "ceiling":
            out["start_to_all_bound_s"] = round(times[-1] - started, 2) if times else None
        return out
    finally:
        if proc is not None:
            side.stop_process(proc)
        env.stop()
