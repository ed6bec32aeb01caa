"""`trimtab kube` against a real kube-apiserver with KWOK nodes of 8 GPUs: a pod that opts in is bound, runs and
completes; a pod it cannot place says why (PodScheduled=False / Unschedulable, a FailedScheduling Event); a gang
binds whole, and one too large for the cluster binds not at all; a higher-priority pod evicts a lower one
through the Eviction API, which a PodDisruptionBudget holds back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from kube_env import ROOT, KubeEnv, needs_crds, run_trimtab_kube, stop_process
from kube_objects import gpu_pod, pod_group

pytestmark = pytest.mark.kube


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def create_pod(env: KubeEnv, pod: dict[str, Any]) -> None:
    """Create a pod from a kube_objects manifest (server-set fields dropped)."""
    meta = {k: v for k, v in pod["metadata"].items() if k in ("name", "namespace", "labels", "annotations")}
    spec = {k: v for k, v in pod["spec"].items() if k not in ("priority",)}
    env.apply({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})


def create_gang(env: KubeEnv, name: str, size: int, pod: dict[str, Any]) -> list[str]:
    """A gang of `size` pods like `pod`, as the cluster allows: with the CRDs, a PodGroup and pods `name-i` naming
    it; on a stock cluster, a batch/v1 Job of that parallelism (its pods are the gang). The members' names, once
    they all exist."""
    if env.crds:
        env.apply(pod_group(name, size))
        for i in range(size):
            create_pod(env, {**pod, "metadata": {**pod["metadata"], "name": f"{name}-{i}",
                                                 "labels": {"scheduling.x-k8s.io/pod-group": name}}})
        return [f"{name}-{i}" for i in range(size)]
    spec = {k: v for k, v in pod["spec"].items() if k != "priority"}
    env.apply({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
               "spec": {"completionMode": "Indexed", "completions": size, "parallelism": size,
                        "template": {"metadata": {"annotations": pod["metadata"].get("annotations") or {}},
                                     "spec": spec}}})
    return wait_for(f"the {size} pods of Job {name}", lambda: len(names := job_pods(env, name)) == size and names)


def job_pods(env: KubeEnv, job: str, namespace: str = "default") -> list[str]:
    """The names of a Job's pods (the label the Job controller sets), not terminating."""
    pods = env.request("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=batch.kubernetes.io/job-name={job}")
    return sorted(p["metadata"]["name"] for p in pods["items"] if not p["metadata"].get("deletionTimestamp"))


def get_pod(env: KubeEnv, name: str, namespace: str = "default") -> dict[str, Any]:
    return env.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")


def scheduled_condition(env: KubeEnv, name: str, namespace: str = "default") -> dict[str, Any] | None:
    conditions = get_pod(env, name, namespace).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodScheduled"), None)


def described_reason(env: KubeEnv, name: str, expected: str, namespace: str = "default") -> None:
    """What `kubectl describe pod` shows, read from the API: PodScheduled=False / Unschedulable with `expected` as
    its message, and a FailedScheduling Event saying the same."""
    condition = wait_for(f"{name} Unschedulable with {expected!r}", lambda: (
        c := scheduled_condition(env, name, namespace)) and c["message"] == expected and c)
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    events = env.request("GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name={name}")
    assert any(e["reason"] == "FailedScheduling" and e["type"] == "Warning" and e["message"] == expected
               for e in events["items"]), events["items"]
    assert not get_pod(env, name, namespace)["spec"].get("nodeName")


def test_a_pod_naming_trimtab_is_bound_runs_and_completes(kube_env: KubeEnv, trimtab_kube: Any) -> None:
    create_pod(kube_env, gpu_pod("solo", 2, annotations={"trimtab.io/duration": "2s"}))
    node = wait_for("solo bound", lambda: get_pod(kube_env, "solo")["spec"].get("nodeName"))
    assert node in ("gpu-0", "a100-0", "a100-1")
    wait_for("solo Succeeded (kwok's stage after its duration)",
             lambda: get_pod(kube_env, "solo")["status"].get("phase") == "Succeeded")


def test_the_kwok_nodes_renew_their_heartbeat_so_they_stay_ready(kube_env: KubeEnv) -> None:
    """The test world's own latency: a node whose heartbeat is not renewed goes NotReady after the 20 s grace
    period; the node lifecycle controller then marks its pods not Ready, and kwok, seeing the pods change, starts
    their completion delay again (a 20 s pod ran 40 s). Over 30 s, no node leaves Ready, and each heartbeat
    moves."""
    def ready(node: dict[str, Any]) -> dict[str, Any]:
        return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")

    before = {n["metadata"]["name"]: ready(n) for n in ready_nodes(kube_env)}
    time.sleep(30)
    after = {n["metadata"]["name"]: ready(n) for n in kube_env.request("GET", "/api/v1/nodes")["items"]}
    for name, was in before.items():
        now = after[name]
        assert (now["status"], now["lastTransitionTime"]) == ("True", was["lastTransitionTime"]), (name, was, now)
        assert now["lastHeartbeatTime"] > was["lastHeartbeatTime"], (name, was, now)


def test_an_unschedulable_pod_says_why(kube_env: KubeEnv, trimtab_kube: Any) -> None:
    create_pod(kube_env, gpu_pod("picky", 1, nodeSelector={"gpu-type": "h100"}))
    n = len(ready_nodes(kube_env))
    described_reason(kube_env, "picky", f"0/{n} nodes are available: {n} do not match the node selector.")


def test_a_taint_blocked_pod_shows_trimtabs_reason(kube_env: KubeEnv, trimtab_kube: Any) -> None:
    """A 12-GPU pod: the one node large enough is tainted, the others have 8 GPUs. The text is kube-scheduler's
    FitError shape, counted by trimtab's filters."""
    kube_env.add_gpu_nodes(1, gpus=16, prefix="tainted", taints=[{"key": "pool", "value": "infra",
                                                                  "effect": "NoSchedule"}])
    kube_env.wait_nodes_ready(["tainted-0"])
    create_pod(kube_env, gpu_pod("wide", 12))
    nodes = ready_nodes(kube_env)
    tainted = sum(1 for node in nodes if any(t["effect"] == "NoSchedule" for t in node["spec"].get("taints") or []))
    counts = sorted([f"{tainted} are tainted", f"{len(nodes) - tainted} have too few free GPUs"])
    described_reason(kube_env, "wide", f"0/{len(nodes)} nodes are available: {', '.join(counts)}.")


def test_a_quota_blocked_pod_shows_trimtabs_reason(kube_env: KubeEnv, trimtab_kube: Any) -> None:
    """The API server refuses a pod beyond its namespace's quota when it is created; a pod created before the quota
    was lowered waits in trimtab with the quota's reason. Two 2-GPU pods on a 2-GPU node of their own: the second
    waits for room, then a quota of 2 GPUs makes it wait for the quota."""
    kube_env.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-q"}})
    kube_env.wait_service_account("team-q")
    taint = {"key": "pool", "value": "quota", "effect": "NoSchedule"}
    kube_env.add_gpu_nodes(1, gpus=2, prefix="quota", labels={"pool": "quota"}, taints=[taint])
    kube_env.wait_nodes_ready(["quota-0"])
    pool = {"nodeSelector": {"pool": "quota"}, "tolerations": [{**taint, "operator": "Equal"}]}
    create_pod(kube_env, gpu_pod("first", 2, namespace="team-q", **pool))
    wait_for("first bound", lambda: get_pod(kube_env, "first", "team-q")["spec"].get("nodeName") == "quota-0")
    create_pod(kube_env, gpu_pod("second", 2, namespace="team-q", **pool))
    wait_for("second waiting for room", lambda: scheduled_condition(kube_env, "second", "team-q"))
    kube_env.apply({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": "team-q"},
                    "spec": {"hard": {"requests.nvidia.com/gpu": "2"}}})
    described_reason(kube_env, "second", "quota: ResourceQuota team-q/gpus: gpus would be 4 > 2", "team-q")


def ready_nodes(env: KubeEnv) -> list[dict[str, Any]]:
    return [node for node in env.request("GET", "/api/v1/nodes")["items"]
            if any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])]


def test_a_gang_binds_whole_and_one_too_large_not_at_all(kube_env: KubeEnv, trimtab_kube: Any) -> None:
    """A PodGroup's pods with the CRDs, a Job's pods on a stock cluster: the same gang either way."""
    huge = create_gang(kube_env, "huge", 4, gpu_pod("huge", 8))  # 4 x 8 GPUs on 24: can never start
    train = create_gang(kube_env, "train", 4, gpu_pod("train", 4))
    nodes = wait_for("the gang bound", lambda: all(n := [get_pod(kube_env, pod)["spec"].get("nodeName")
                                                          for pod in train]) and n)
    assert len(nodes) == 4
    for pod in huge:
        condition = wait_for(f"{pod} Unschedulable", lambda pod=pod: scheduled_condition(kube_env, pod))
        assert condition["reason"] == "Unschedulable"
        assert condition["message"].startswith("waiting for room for the gang's 4 members: room for ")
        assert not get_pod(kube_env, pod)["spec"].get("nodeName")


def test_a_higher_priority_pod_evicts_through_the_eviction_api_and_a_pdb_holds(kube_env: KubeEnv) -> None:
    """A second trimtab (scheduler name trimtab-prio, policy priority) on a tainted 4-GPU node of its own."""
    kube_env.add_gpu_nodes(1, gpus=4, prefix="prio", labels={"pool": "prio"}, taints=[POOL_TAINT])
    kube_env.wait_nodes_ready(["prio-0"])
    kube_env.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "urgent"},
                    "value": 1000})
    proc = run_trimtab_kube(kube_env, "--scheduler-name", "trimtab-prio", "--policy", "priority",
                            log_name="trimtab-prio")
    try:
        pool = {"nodeSelector": {"pool": "prio"}, "tolerations": [{**POOL_TAINT, "operator": "Equal"}]}
        low = gpu_pod("low", 4, scheduler="trimtab-prio", **pool)
        low["metadata"]["labels"]["app"] = "low"
        create_pod(kube_env, low)
        wait_for("low bound", lambda: get_pod(kube_env, "low")["spec"].get("nodeName") == "prio-0")
        kube_env.apply({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-low"},
                        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "low"}}}})
        create_pod(kube_env, gpu_pod("high", 4, scheduler="trimtab-prio", priorityClassName="urgent", **pool))
        wait_for("high nominated", lambda: get_pod(kube_env, "high")["status"].get("nominatedNodeName") == "prio-0")
        time.sleep(3)  # cycles go on: the budget refuses every eviction (429)
        assert get_pod(kube_env, "low")["spec"].get("nodeName") == "prio-0"
        assert not get_pod(kube_env, "low")["metadata"].get("deletionTimestamp")
        assert not get_pod(kube_env, "high")["spec"].get("nodeName")
        kube_env.request("DELETE", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/keep-low")
        wait_for("high bound once low is evicted",
                 lambda: get_pod(kube_env, "high")["spec"].get("nodeName") == "prio-0", timeout_s=60)
    finally:
        stop_process(proc)


def test_the_standby_takes_over_when_the_leader_is_killed(kube_env: KubeEnv) -> None:
    """Two replicas (scheduler name trimtab-ha) on four 8-GPU nodes of their own; SIGKILL the leader between two
    bursts of gangs: the standby takes the Lease within its duration and binds the rest, every pod once, no gang
    left half-bound."""
    taint = {"key": "pool", "value": "ha", "effect": "NoSchedule"}
    names = kube_env.add_gpu_nodes(4, prefix="ha", labels={"pool": "ha"}, taints=[taint])
    kube_env.wait_nodes_ready(names)
    args = ("--scheduler-name", "trimtab-ha", "--lease-namespace", "default")
    replicas = [run_trimtab_kube(kube_env, *args, log_name=f"trimtab-ha-{i}") for i in range(2)]
    pool = {"nodeSelector": {"pool": "ha"}, "tolerations": [{**taint, "operator": "Equal"}]}

    def burst(first: int) -> list[str]:
        pods = []
        for g in range(first, first + 4):
            pods += create_gang(kube_env, f"ha-{g}", 4, gpu_pod("ha", 1, scheduler="trimtab-ha", **pool))
        return pods

    def bound(pods: list[str]) -> bool:
        return all(get_pod(kube_env, p)["spec"].get("nodeName") for p in pods)

    try:
        leader = wait_for("a leader", lambda: next(
            (f"trimtab-ha-{i}" for i in range(2) if "leading as" in (kube_env.dir / f"trimtab-ha-{i}.log").read_text()),
            None))
        first = burst(0)
        wait_for("the first burst bound", lambda: bound(first))
        replicas[int(leader[-1])].kill()  # SIGKILL: the Lease is left to expire
        killed_at = time.monotonic()
        second = burst(4)
        wait_for("the second burst bound by the standby", lambda: bound(second), timeout_s=60)
        assert time.monotonic() - killed_at < 15 + 15  # the lease duration, and a cycle's margin on a busy machine
        events = kube_env.request("GET", "/api/v1/namespaces/default/events?fieldSelector=reason=Scheduled")
        scheduled = [e["involvedObject"]["name"] for e in events["items"] if e["involvedObject"]["name"]
                     .startswith("ha-")]
        assert sorted(scheduled) == sorted(first + second)  # each pod bound once, by one replica
    finally:
        for proc in replicas:
            stop_process(proc)


POOL_TAINT = {"key": "pool", "value": "prio", "effect": "NoSchedule"}


def test_the_twin_replays_the_pending_work_as_trimtab_placed_it_live(kube_env: KubeEnv, tmp_path: Any) -> None:
    """trimtab kube (scheduler name trimtab-twin, policy fifo) on two 8-GPU nodes of their own, both full with
    pods ending in 20 s; four pending jobs behind them. `simulate --from-cluster` snapshots the cluster then and
    replays it under fifo: the pods it starts before any of them could end are the pods trimtab bound live (fifo
    stops at the 8-GPU pod, so the 4-GPU pod after it waits in both)."""
    needs_crds(kube_env)
    taint = {"key": "pool", "value": "twin", "effect": "NoSchedule"}
    kube_env.add_gpu_nodes(2, prefix="twin", labels={"pool": "twin"}, taints=[taint])
    kube_env.wait_nodes_ready(["twin-0", "twin-1"])
    proc = run_trimtab_kube(kube_env, "--scheduler-name", "trimtab-twin", "--policy", "fifo", log_name="trimtab-twin")
    pool = {"scheduler": "trimtab-twin", "nodeSelector": {"pool": "twin"},
            "tolerations": [{**taint, "operator": "Equal"}]}
    try:
        for i in range(2):
            create_pod(kube_env, gpu_pod(f"twin-run-{i}", 8, annotations={"trimtab.io/duration": "20s"}, **pool))
        wait_for("the first wave bound", lambda: all(get_pod(kube_env, f"twin-run-{i}")["spec"].get("nodeName")
                                                     for i in range(2)))
        later = {"trimtab.io/duration": "5m"}
        create_pod(kube_env, gpu_pod("twin-a", 4, annotations=later, **pool))
        kube_env.apply(pod_group("twin-g", 2))
        for i in range(2):
            create_pod(kube_env, gpu_pod(f"twin-g-{i}", 4, group="twin-g", annotations=later, **pool))
        create_pod(kube_env, gpu_pod("twin-wide", 8, annotations=later, **pool))
        time.sleep(1.1)  # creation times have whole seconds: the same second orders pods by name
        create_pod(kube_env, gpu_pod("twin-b", 4, annotations=later, **pool))
        waiting = ["twin-a", "twin-g-0", "twin-g-1", "twin-wide", "twin-b"]
        for name in waiting:
            wait_for(f"{name} seen waiting", lambda name=name: scheduled_condition(kube_env, name))
        for pod in kube_env.request("GET", "/api/v1/pods")["items"]:  # the twin replays every scheduler's pending
            meta = pod["metadata"]                                    # pods: the earlier tests' would come first
            if not pod["spec"].get("nodeName") and meta["name"] not in waiting:
                kube_env.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
        twin = subprocess.run([sys.executable, "-m", "trimtab.cli", "simulate", "--from-cluster", "--kubeconfig",
                               str(kube_env.kubeconfig), "--policy", "fifo", "--no-timing", "--out",
                               str(tmp_path / "twin.json")], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        assert twin.returncode == 0, twin.stderr
        print(twin.stdout)
        starts = {job["id"]: job["runs"][0] for job in json.loads((tmp_path / "twin.json").read_text())["jobs"]
                  if job["runs"]}
        pods_of = {f"default/{job}": [job] for job in ("twin-a", "twin-wide", "twin-b")}
        pods_of["default/twin-g"] = ["twin-g-0", "twin-g-1"]
        twin_placed = {f"default/{pod}" for job, pods in pods_of.items() if job in starts and starts[job]["start"] < 60
                       for pod in pods}  # started before any of the pending work could end (5 minutes)

        def live_placed() -> set[str]:
            return {f"default/{pod}" for pod in waiting if get_pod(kube_env, pod)["spec"].get("nodeName")}

        try:
            wait_for("the pods the twin started bound live", lambda: live_placed() == twin_placed, timeout_s=60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: live {sorted(live_placed())}, twin {sorted(twin_placed)}") from None
        time.sleep(3)  # a cycle or more: nothing else is bound
        print(f"{'pod':<12} {'live node':<10} {'twin node':<10} {'twin start_s':>12}")
        for job, pods in pods_of.items():
            run = starts[job]
            for pod, node in zip(pods, [n for n, k in zip(run["nodes"], run["node_tasks"], strict=True)
                                        for _ in range(k)], strict=True):
                print(f"{pod:<12} {get_pod(kube_env, pod)['spec'].get('nodeName') or '-':<10} {node:<10} "
                      f"{run['start']:>12.0f}")
        assert live_placed() == twin_placed == {"default/twin-a", "default/twin-g-0", "default/twin-g-1"}
    finally:
        stop_process(proc)
