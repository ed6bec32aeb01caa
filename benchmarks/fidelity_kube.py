"""The kube world of benchmarks/fidelity.py: a KWOK cluster of the project's control plane (tests/kube/kube_env.py,
binaries from `make kube-env`) with the manifests' nodes, `trimtab kube --policy P` scheduling it, each workload
object created at its `trimtab.io/submit-time` and each pod completed by KWOK after its `trimtab.io/duration`.

What happened is what this script sees, polling the API server every POLL_S: when each pod was first seen, bound
and Succeeded, and which pods vanished before they Succeeded (evicted; a gang's members evicted within 2 s of
each other are one preemption). A job's submit time is when the last of the pods it first started with was seen
(a Job's pods are the Job controller's to create, a little after the Job), and after each preemption the first
pod seen again is when its controller brought it back."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kube"))
from kube_env import KWOK_NODE, ROOT, KubeEnv, missing_binaries, run_trimtab_kube, stop_process

from trimtab.formats.k8s.workloads import COSCHED_GROUP, SUBMIT
from trimtab.units import parse_duration_s

CLUSTER_KINDS = ("Namespace", "PriorityClass", "ResourceQuota", "Node", "DeviceClass", "ResourceSlice",
                 "ResourceClaimTemplate", "Queue")
WORKLOAD_KINDS = ("PodGroup", "Pod", "Job")
POLL_S = 0.1
GANG_ROUND_S = 2.0

__all__ = ["missing_binaries", "run_kube", "submit_s"]


def submit_s(doc: dict[str, Any]) -> float:
    """A workload document's `trimtab.io/submit-time`, in seconds (0 when it has none)."""
    value = ((doc.get("metadata") or {}).get("annotations") or {}).get(SUBMIT)
    return parse_duration_s(str(value)) if value is not None else 0.0


def job_of(pod: dict[str, Any]) -> str:
    """The job a pod belongs to, named as trimtab names it: its PodGroup, else its Job, else itself."""
    meta = pod["metadata"]
    group = (meta.get("labels") or {}).get(COSCHED_GROUP)
    owner = next((r["name"] for r in meta.get("ownerReferences") or [] if r.get("kind") == "Job"), None)
    return f"{meta['namespace']}/{group or owner or meta['name']}"


class PodLog:
    """What this script sees of every pod, polling the API server every POLL_S: when each was first seen bound
    and Succeeded, and which vanished before they Succeeded (evicted)."""

    def __init__(self, env: KubeEnv) -> None:
        self.env = env
        self.seen: dict[str, float] = {}  # pod uid -> first seen
        self.bound: dict[str, float] = {}  # pod uid -> first seen bound
        self.done: dict[str, float] = {}  # pod uid -> first seen Succeeded
        self.job: dict[str, str] = {}  # pod uid -> job
        self.evicted: dict[str, float] = {}  # pod uid -> seen gone before it Succeeded
        self.terminating: dict[str, float] = {}  # pod uid -> first seen with a deletionTimestamp (evicted)
        self.node: dict[str, str] = {}  # pod uid -> the node it was bound to
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            try:
                pods = self.env.request("GET", "/api/v1/pods")["items"]
            except Exception as exc:  # the control plane stopping ends the script's use of it anyway
                print(f"pod poll: {exc}", file=sys.stderr)
                continue
            seen = set()
            for pod in pods:
                uid = pod["metadata"]["uid"]
                seen.add(uid)
                self.job.setdefault(uid, job_of(pod))
                self.seen.setdefault(uid, now)
                if pod["spec"].get("nodeName"):
                    self.bound.setdefault(uid, now)
                    self.node.setdefault(uid, pod["spec"]["nodeName"])
                if pod["metadata"].get("deletionTimestamp"):
                    self.terminating.setdefault(uid, now)
                if (pod.get("status") or {}).get("phase") == "Succeeded":
                    self.done.setdefault(uid, now)
            for uid in self.bound:
                if uid not in seen and uid not in self.done:
                    self.evicted.setdefault(uid, now)
            self._stop.wait(POLL_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def jobs(self, start: float) -> dict[str, dict[str, Any]]:
        """Per job: submit, first start, the start of its last run (its last bind before its last completion), end
        (its last pod's completion, None if unfinished), preemptions, and each preemption's time and when the job's
        pods were seen again (None: never), in seconds from `start`."""
        pods: dict[str, dict[str, list[float]]] = {}
        for uid, job in self.job.items():
            rec = pods.setdefault(job, {"seen": [], "binds": [], "ends": [], "evictions": []})
            for key, seen in (("seen", self.seen), ("binds", self.bound), ("ends", self.done),
                              ("evictions", self.evicted)):
                if uid in seen:
                    rec[key].append(seen[uid] - start)
        return {job: _record(rec) for job, rec in pods.items()}

    def evict_lags(self) -> list[float]:
        """Per eviction (a pod seen terminating): the time until another job's pod was first seen bound on its
        node (the victim's GPUs freed and given on: what `SimConfig.evict_s` replays)."""
        lags = []
        for uid, evicted in self.terminating.items():
            node, job = self.node.get(uid), self.job[uid]
            after = [t for other, t in self.bound.items()
                     if self.node.get(other) == node and self.job[other] != job and t >= evicted]
            if after:
                lags.append(min(after) - evicted)
        return lags


def _record(rec: dict[str, list[float]]) -> dict[str, Any]:
    end = max(rec["ends"], default=None)
    first_start = min(rec["binds"], default=None)
    evictions = sorted(rec["evictions"])
    rounds = [t for i, t in enumerate(evictions) if i == 0 or t - evictions[i - 1] > GANG_ROUND_S]
    returns = [min((s for s in rec["seen"] if s > t), default=None) for t in rounds]
    return {"submit": max((s for s in rec["seen"] if first_start is None or s <= first_start), default=None),
            "first_start": first_start,
            "last_start": max((b for b in rec["binds"] if end is None or b <= end), default=None),
            "end": end, "preemptions": len(rounds), "evicted": rounds, "returned": returns}


def _pods_of(doc: dict[str, Any]) -> int:
    return int(doc["spec"].get("parallelism", 1)) if doc["kind"] == "Job" else int(doc["kind"] == "Pod")


def _set_up(env: KubeEnv, docs: list[dict[str, Any]], crds: bool) -> None:
    """The PodGroup CRDs (where the workload has PodGroups), the Queue CRD (where it has Queues), then the
    cluster's objects, nodes as KWOK's."""
    if crds:
        for crd in yaml.safe_load_all((ROOT / "deploy/kubernetes/podgroup-crds.yaml").read_text()):
            env.apply(crd)
        env.wait_served("/apis/scheduling.x-k8s.io/v1alpha1/podgroups")
    if any(d["kind"] == "Queue" for d in docs):
        for crd in yaml.safe_load_all((ROOT / "deploy/kubernetes/volcano-queue-crd.yaml").read_text()):
            env.apply(crd)
        env.wait_served("/apis/scheduling.volcano.sh/v1beta1/queues")
    for doc in sorted((d for d in docs if d["kind"] in CLUSTER_KINDS), key=lambda d: CLUSTER_KINDS.index(d["kind"])):
        if doc["kind"] == "Node":
            doc = {**doc, "metadata": {**doc["metadata"], "annotations": {
                **(doc["metadata"].get("annotations") or {}), **KWOK_NODE}}}
        env.apply(doc)
    env.wait_nodes_ready([d["metadata"]["name"] for d in docs if d["kind"] == "Node"])
    for ns in ["default"] + [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"]:
        env.wait_service_account(ns)


def run_kube(docs: list[dict[str, Any]], policy: str, workdir: Path) -> dict[str, dict[str, Any]]:
    """The live run on a KWOK cluster (see the module): `jobs`, per job as `PodLog.jobs` gives it, and
    `evict_lags_s` as `PodLog.evict_lags` does."""
    crds = any(d["kind"] == "PodGroup" for d in docs)
    with KubeEnv(workdir, crds=crds) as env:
        _set_up(env, docs, crds)
        proc = run_trimtab_kube(env, "--policy", policy)
        try:
            time.sleep(5.0)  # its informers list and it takes the Lease
            log = PodLog(env)
            workloads = sorted((d for d in docs if d["kind"] in WORKLOAD_KINDS),
                               key=lambda d: (submit_s(d), WORKLOAD_KINDS.index(d["kind"])))
            start = time.time()
            for doc in workloads:
                time.sleep(max(start + submit_s(doc) - time.time(), 0.0))
                env.apply(doc)
            expected = sum(_pods_of(d) for d in workloads)
            deadline = time.time() + 600.0
            while len(log.done) < expected and time.time() < deadline:
                time.sleep(5.0)
                print(f"{time.time() - start:.0f} s: {len(log.done)} of {expected} pods done, "
                      f"{len(log.evicted)} evicted", file=sys.stderr)
            log.stop()
        finally:
            stop_process(proc)
    return {"jobs": log.jobs(start), "evict_lags_s": log.evict_lags()}
