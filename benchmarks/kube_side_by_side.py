"""trimtab kube side by side with kube-scheduler on the same KWOK cluster: each scheduler alone in its turn, on a
fresh control plane (tests/kube/kube_env.py, binaries from `make kube-env`), with the same manifests and the same
API client rate limits (`--kube-api-qps 1000 --kube-api-burst 2000` for both).

Scenarios (one JSON line per measurement on stdout, the timeline table on stderr):
  gangs       two PodGroups of 12 one-GPU pods arriving together on 2 nodes x 8 GPUs (--gangs-as jobs: two
              Indexed batch/v1 Jobs of parallelism 12, no PodGroup written), one-GPU pods of 10 s
              streaming in (one every 2 s). A gang runs once all 12 members are bound (this script then ends it
              after --gang-run-s, as its training would); members bound before that hold their GPUs waiting.
              kube-scheduler runs stock: without the coscheduling plugin it has no gangs (the PodGroup label means
              nothing to it).
  throughput  --nodes KWOK nodes x --gpus-per-node GPUs, --pods one-GPU pods created at once (8 client threads):
              pods bound per second (bound / (last bound - first created)) and p99 seconds from creation to bound
              (as this script's watch sees both).
  dra         DRA claims from templates of 8, 2 and 1 devices on --dra-nodes nodes of 8 hand-published devices
              (kube_dra.py): seconds to bind them all, and whether each claim got devices of its pod's node.
  backlog     --pods one-GPU pods created while no scheduler runs, then the scheduler starts: pods bound per second,
              beside the API server's own ceiling for pods/binding writes (kube_backlog.py; `ceiling` is added to
              --schedulers).

Usage (from the project root; about 10 minutes at the defaults on 2 cores):
    .venv/bin/python benchmarks/kube_side_by_side.py [--scenario gangs|throughput|dra|backlog|both]
        [--nodes 250 --pods 2000] [--schedulers trimtab,kube-scheduler] [--policy reserve] [--gangs-as jobs]
The issue's full size: --nodes 1000 --pods 10000 (8,000 GPUs: 8,000 pods bind, the rest wait)."""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import ssl
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kube"))
from kube_env import ROOT, KubeEnv, bin_dir, missing_binaries, run_trimtab_kube, stop_process

import kube_backlog
import kube_dra

QPS, BURST = "1000", "2000"  # kube_env starts kube-scheduler with these; trimtab kube gets the same
GANG_SIZE = 12
SCHEDULER_NAME = {"trimtab": "trimtab", "kube-scheduler": "default-scheduler"}


class PodWatch:
    """A watch on every pod from this script's side: when each was created (the POST returned) and first seen
    bound, and which are gone (deleted or finished)."""

    def __init__(self, env: KubeEnv) -> None:
        self.env = env
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.gone: set[str] = set()
        self.job: dict[str, str] = {}  # pod -> the Job that made it
        self.lock = threading.Lock()
        version = env.request("GET", "/api/v1/pods?limit=1")["metadata"]["resourceVersion"]
        threading.Thread(target=self._run, args=(version,), daemon=True).start()

    def _run(self, version: str) -> None:
        """Watch from `version`; a watch the server ends resumes from the last version seen (said on stderr), one
        it refuses as too old (an ERROR event) lists again."""
        while True:
            req = urllib.request.Request(f"{self.env.server}/api/v1/pods?watch=1&resourceVersion={version}"
                                         "&allowWatchBookmarks=true&timeoutSeconds=3600",
                                         headers={"Authorization": f"Bearer {self.env.token}"})
            try:
                with urllib.request.urlopen(req, context=ssl._create_unverified_context(), timeout=3600) as stream:
                    for line in stream:
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            raise RuntimeError(event["object"].get("message"))
                        version = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self._see(event["type"], event["object"])
            except Exception as exc:  # the control plane stopping ends the script's use of it anyway
                print(f"pod watch: {exc}; listing again", file=sys.stderr)
                try:
                    listed = self.env.request("GET", "/api/v1/pods")
                except Exception:
                    return
                for pod in listed["items"]:
                    self._see("MODIFIED", pod)
                version = listed["metadata"]["resourceVersion"]
                continue
            print("pod watch ended by the server; resuming", file=sys.stderr)

    def _see(self, kind: str, pod: dict[str, Any]) -> None:
        name, now = pod["metadata"]["name"], time.monotonic()
        with self.lock:
            if job := (pod["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name"):
                self.job[name] = job
            if pod["spec"].get("nodeName") and name not in self.bound:
                self.bound[name] = now
            if kind == "DELETED" or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                self.gone.add(name)

    def of_jobs(self, jobs: tuple[str, ...]) -> dict[str, list[str]]:
        """The pods seen of each of `jobs` (by the label the Job controller gives them)."""
        with self.lock:
            return {j: sorted(n for n, owner in self.job.items() if owner == j) for j in jobs}

    def holding(self, names: list[str]) -> int:
        """How many of `names` are bound and not gone now."""
        with self.lock:
            return sum(1 for n in names if n in self.bound and n not in self.gone)

    def create(self, pods: list[dict[str, Any]], threads: int = 8) -> None:
        """Create `pods` from `threads` threads, each on one kept-alive connection (a TLS handshake per pod would
        make the client, not the scheduler, the bottleneck)."""
        def one(pod: dict[str, Any]) -> None:
            post(self.env, "/api/v1/namespaces/default/pods", pod)
            with self.lock:
                self.created[pod["metadata"]["name"]] = time.monotonic()

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, pods))


_connections = threading.local()


def post(env: KubeEnv, path: str, body: dict[str, Any]) -> None:
    """POST `body` as the admin on this thread's connection to `env`'s API server."""
    conns = _connections.__dict__.setdefault("by_server", {})
    if env.server not in conns:
        url = urllib.parse.urlsplit(env.server)
        conns[env.server] = http.client.HTTPSConnection(url.hostname or "127.0.0.1", url.port,
                                                        context=ssl._create_unverified_context(), timeout=60)
    conn = conns[env.server]
    conn.request("POST", path, json.dumps(body), {"Authorization": f"Bearer {env.token}",
                                                 "Content-Type": "application/json"})
    resp = conn.getresponse()
    answer = resp.read()
    if resp.status >= 300:
        raise RuntimeError(f"POST {path}: {resp.status} {answer[:300]!r}")


def delete(env: KubeEnv, name: str) -> None:
    """Delete a pod of the default namespace; one already gone is fine."""
    try:
        env.request("DELETE", f"/api/v1/namespaces/default/pods/{name}")
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise


def pod(name: str, scheduler: str, *, group: str | None = None, duration: str | None = None,
        gpus: int = 1) -> dict[str, Any]:
    """A pod of `gpus` GPUs; `group` names its coscheduling PodGroup, `duration` makes kwok end it after that
    long."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"scheduling.x-k8s.io/pod-group": group} if group else {},
                         "annotations": {"trimtab.io/duration": duration} if duration else {}},
            "spec": {"schedulerName": scheduler, "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}]}}


def start_cluster(workdir: Path, scheduler: str, nodes: int, gpus: int, policy: str,
                  before_probe: Any = None, node_grace_s: int = 20) -> tuple[KubeEnv, Any]:
    """A fresh control plane with `nodes` Ready KWOK nodes and `scheduler` running and warm (it has bound a probe
    pod, of one GPU when nodes have any); `before_probe(env, nodes)` runs first; a node whose heartbeat lags
    `node_grace_s` goes NotReady. The trimtab process or None."""
    env = KubeEnv(workdir, scheduler=scheduler == "kube-scheduler", node_grace_s=node_grace_s).start()
    for crd in yaml.safe_load_all((ROOT / "deploy/kubernetes/podgroup-crds.yaml").read_text()):
        env.apply(crd)
    env.wait_served("/apis/scheduling.x-k8s.io/v1alpha1/podgroups")
    names = [f"gpu-{i}" for i in range(nodes)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: env.add_gpu_nodes(1, gpus, prefix=f"gpu-{i}"), range(nodes)))
    env.wait_nodes_ready([f"{n}-0" for n in names], timeout_s=120 + nodes)
    env.wait_service_account()
    if before_probe is not None:
        before_probe(env, nodes)
    proc = None
    if scheduler == "trimtab":
        proc = run_trimtab_kube(env, "--policy", policy, "--no-leader-elect", "--kube-api-qps", QPS,
                                "--kube-api-burst", BURST)
    env.apply(pod("probe", SCHEDULER_NAME[scheduler], duration="1s", gpus=1 if gpus else 0))
    deadline = time.monotonic() + 120
    while not env.request("GET", "/api/v1/namespaces/default/pods/probe")["spec"].get("nodeName"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{scheduler} bound no probe pod in 120 s; logs in {workdir}")
        time.sleep(0.2)
    return env, proc


def gangs(args: argparse.Namespace, scheduler: str, workdir: Path) -> dict[str, Any]:
    env, proc = start_cluster(workdir, scheduler, 2, 8, args.policy)
    try:
        watch = PodWatch(env)
        name = SCHEDULER_NAME[scheduler]
        started = time.monotonic()
        if args.gangs_as == "jobs":  # the Job controller makes the pods; a Job's are those of its label
            for g in ("gang-a", "gang-b"):
                template = pod(g, name)
                env.apply({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": g, "namespace": "default"},
                           "spec": {"parallelism": GANG_SIZE, "completions": GANG_SIZE, "completionMode": "Indexed",
                                    "template": {"spec": template["spec"]}}})
            return _run_gangs(args, env, watch, lambda: watch.of_jobs(("gang-a", "gang-b")), started, scheduler)
        members = {g: [f"{g}-{i}" for i in range(GANG_SIZE)] for g in ("gang-a", "gang-b")}
        for g in members:
            env.apply({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                       "metadata": {"name": g, "namespace": "default"}, "spec": {"minMember": GANG_SIZE}})
        watch.create([pod(m, name, group=m.rsplit("-", 1)[0])  # the two gangs' members interleaved
                      for pair in zip(*members.values(), strict=True) for m in pair])
        return _run_gangs(args, env, watch, lambda: members, started, scheduler)
    finally:
        if proc is not None:
            stop_process(proc)
        env.stop()


def _end_gang(env: KubeEnv, gang: str, names: list[str], jobs: bool) -> None:
    """Its training is over: its pods go (a Job first, or its controller would make them again)."""
    if jobs:
        env.request("DELETE", f"/apis/batch/v1/namespaces/default/jobs/{gang}?propagationPolicy=Background")
    for n in names:
        delete(env, n)


def _run_gangs(args: argparse.Namespace, env: KubeEnv, watch: PodWatch, gang_pods: Any, started: float,
               scheduler: str) -> dict[str, Any]:
    """Stream small pods, end each gang --gang-run-s after it is whole (`gang_pods()`: gang -> its pods' names
    now), sample who holds GPUs every 2 s."""
    small: list[str] = []
    whole_at: dict[str, float] = {}
    ended: set[str] = set()
    half_max, rows = 0, []
    next_small = next_sample = started
    while (now := time.monotonic()) < started + args.gang_horizon_s:
        if now >= next_small:
            small.append(f"small-{len(small)}")
            watch.create([pod(small[-1], SCHEDULER_NAME[scheduler], duration="10s")], threads=1)
            next_small += 2.0
        members = gang_pods()
        for g, names in members.items():
            if g not in whole_at and len(names) >= GANG_SIZE and all(n in watch.bound for n in names):
                whole_at[g] = now
            if g in whole_at and now - whole_at[g] >= args.gang_run_s and g not in ended:
                ended.add(g)
                _end_gang(env, g, names, args.gangs_as == "jobs")
        if now >= next_sample:
            held = {g: watch.holding(names) for g, names in members.items()}
            half_max = max(half_max, sum(1 for g, k in held.items() if 0 < k < GANG_SIZE and g not in whole_at))
            rows.append((round(now - started), *held.values(), watch.holding(small)))
            next_sample += 2.0
        time.sleep(0.05)
    end = time.monotonic()
    print(f"\n{scheduler}: pods holding GPUs over time (16 GPUs)\n  t_s  gang-a  gang-b  small", file=sys.stderr)
    for row in rows[::2]:
        print(f"{row[0]:>5} {row[1]:>7} {row[2]:>7} {row[3]:>6}", file=sys.stderr)
    waits = [watch.bound.get(n, end) - watch.created[n] for n in small if n in watch.created]
    partly = []  # how long each gang was partly bound: its first member's binding to its last's (or the end)
    for g, names in gang_pods().items():
        times = [watch.bound[n] for n in names if n in watch.bound]
        if times:
            partly.append((max(times) if g in whole_at else end) - min(times))
    return {"bench": "kube_gangs", "gangs_as": args.gangs_as, "scheduler": scheduler,
            "gangs_completed": len(whole_at), "half_bound_gangs_max": half_max,
            "partly_bound_max_s": round(max(partly, default=0.0), 3), "small_pods_max_wait_s": round(max(waits), 1),
            "small_pods_bound": sum(1 for n in small if n in watch.bound), "small_pods": len(small),
            "horizon_s": args.gang_horizon_s}


def throughput(args: argparse.Namespace, scheduler: str, workdir: Path) -> dict[str, Any]:
    env, proc = start_cluster(workdir, scheduler, args.nodes, args.gpus_per_node, args.policy,
                              node_grace_s=args.node_grace_s)
    try:
        watch = PodWatch(env)
        names = [f"p-{i}" for i in range(args.pods)]
        bindable = min(args.pods, args.nodes * args.gpus_per_node)
        first = time.monotonic()
        watch.create([pod(n, SCHEDULER_NAME[scheduler]) for n in names])
        created_s = time.monotonic() - first
        deadline = time.monotonic() + args.timeout_s
        while sum(1 for n in names if n in watch.bound) < bindable and time.monotonic() < deadline:
            time.sleep(0.5)
        with watch.lock:
            lat = np.array([watch.bound[n] - watch.created[n] for n in names if n in watch.bound])
            last = max((watch.bound[n] for n in names if n in watch.bound), default=first)
        if len(lat):  # where the tail is: p99 of each tenth of the bound pods, in creation order
            tenths = " ".join(f"{np.percentile(part, 99):.2f}" for part in np.array_split(lat, 10))
            print(f"{scheduler}: p99 s to bound by tenth of the pods in creation order: {tenths}", file=sys.stderr)
        return {"bench": "kube_throughput", "scheduler": scheduler, "nodes": args.nodes, "pods": args.pods,
                "pods_bound": len(lat), "pods_per_s": round(len(lat) / max(last - first, 1e-9), 1),
                "p50_bound_s": round(float(np.percentile(lat, 50)), 2) if len(lat) else None,
                "p99_bound_s": round(float(np.percentile(lat, 99)), 2) if len(lat) else None,
                "created_in_s": round(created_s, 1)}
    finally:
        if proc is not None:
            stop_process(proc)
        if args.logs and (env.dir / "trimtab-kube.log").exists():
            args.logs.mkdir(parents=True, exist_ok=True)
            shutil.copy(env.dir / "trimtab-kube.log", args.logs / f"{workdir.name}.log")
        env.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=("gangs", "throughput", "dra", "backlog", "both"), default="both")
    parser.add_argument("--schedulers", default="trimtab,kube-scheduler")
    parser.add_argument("--policy", default="reserve",
                        help="trimtab kube's --policy (reserve: a blocked gang reserves its GPUs; without a "
                        "reservation, as in fifo-backfill or steady, the stream of one-GPU pods can keep the second "
                        "gang waiting)")
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--timeout-s", type=float, default=600.0, help="throughput: give up binding after this")
    parser.add_argument("--node-grace-s", type=int, default=20,
                        help="throughput: the controller-manager's node monitor grace period (the test world's "
                        "20 s; on a loaded machine KWOK's heartbeats can lag past it, and a node NotReady for a "
                        "while takes pods only once back: a tail of the world's, not the scheduler's)")
    parser.add_argument("--gang-horizon-s", type=float, default=90.0)
    parser.add_argument("--gang-run-s", type=float, default=20.0)
    parser.add_argument("--gangs-as", choices=("podgroups", "jobs"), default="podgroups",
                        help="gangs: two PodGroups of pods, or two Indexed batch/v1 Jobs with no PodGroup")
    parser.add_argument("--dra-nodes", type=int, default=100)
    parser.add_argument("--dra-pods", type=int, default=300)
    parser.add_argument("--logs", type=Path, help="keep each run's trimtab kube log in this folder")
    args = parser.parse_args()
    if missing_binaries():
        sys.exit(f"missing {', '.join(missing_binaries())} in {bin_dir()}: build them with `make kube-env`")
    scenarios = ("gangs", "throughput") if args.scenario == "both" else (args.scenario,)
    if args.scenario == "backlog" and "ceiling" not in args.schedulers.split(","):
        args.schedulers += ",ceiling"  # the API server's own rate, in the same run
    with tempfile.TemporaryDirectory(prefix="kube-side-by-side-") as tmp:
        for scenario in scenarios:
            for scheduler in args.schedulers.split(","):
                workdir = Path(tmp) / f"{scenario}-{scheduler}"
                if scenario == "dra":
                    result = kube_dra.dra(args, scheduler, workdir, sys.modules[__name__])
                elif scenario == "backlog":
                    result = kube_backlog.backlog(args, scheduler, workdir, sys.modules[__name__])
                else:
                    result = (gangs if scenario == "gangs" else throughput)(args, scheduler, workdir)
                print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
