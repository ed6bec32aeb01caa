"""`trimtab kube` against a real kube-apiserver with KWOK nodes of 8 GPUs: a pod that opts in is bound, runs and
completes; a pod it cannot place says why (PodScheduled=False / Unschedulable, a FailedScheduling Event); a gang
binds whole, and one too large for the cluster binds not at all; a higher-priority pod evicts a lower one
through the Eviction API, which a PodDisruptionBudget holds back."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kube_env import KubeEnv, run_trimtab_kube, stop_process
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


def get_pod(env: KubeEnv, name: str) -> dict[str, Any]:
    return env.request("GET", f"/api/v1/namespaces/default/pods/{name}")


def scheduled_condition(env: KubeEnv, name: str) -> dict[str, Any] | None:
    conditions = get_pod(env, name).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodScheduled"), None)


def test_a_pod_naming_trimtab_is_bound_runs_and_completes(kube_env: KubeEnv, trimtab_kube: Any) -> None:
    create_pod(kube_env, gpu_pod("solo", 2, annotations={"trimtab.io/duration": "2s"}))
    node = wait_for("solo bound", lambda: get_pod(kube_env, "solo")["spec"].get("nodeName"))
    assert node in ("gpu-0", "a100-0", "a100-1")
    wait_for("solo Succeeded (kwok's stage after its duration)",
             lambda: get_pod(kube_env, "solo")["status"].get("phase") == "Succeeded")


def test_an_unschedulable_pod_says_why(kube_env: KubeEnv, trimtab_kube: Any) -> None:
    create_pod(kube_env, gpu_pod("picky", 1, nodeSelector={"gpu-type": "h100"}))
    condition = wait_for("picky marked Unschedulable",
                         lambda: (c := scheduled_condition(kube_env, "picky")) and c["status"] == "False" and c)
    assert condition["reason"] == "Unschedulable"
    assert "none matches the pod's node selector" in condition["message"]
    assert "trimtab" in condition["message"]
    events = kube_env.request("GET", "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name=picky")
    assert any(e["reason"] == "FailedScheduling" and "trimtab" in e["message"] for e in events["items"])
    assert not get_pod(kube_env, "picky")["spec"].get("nodeName")


def test_a_gang_binds_whole_and_one_too_large_not_at_all(kube_env: KubeEnv, trimtab_kube: Any) -> None:
    kube_env.apply(pod_group("huge", 4))  # 4 x 8 GPUs on 24: can never start
    for i in range(4):
        create_pod(kube_env, gpu_pod(f"huge-{i}", 8, group="huge"))
    kube_env.apply(pod_group("train", 4))
    for i in range(4):
        create_pod(kube_env, gpu_pod(f"train-{i}", 4, group="train"))
    nodes = wait_for("the gang bound", lambda: all(n := [get_pod(kube_env, f"train-{i}")["spec"].get("nodeName")
                                                          for i in range(4)]) and n)
    assert len(nodes) == 4
    for i in range(4):
        condition = wait_for(f"huge-{i} Unschedulable", lambda i=i: scheduled_condition(kube_env, f"huge-{i}"))
        assert condition["reason"] == "Unschedulable"
        assert "gang default/huge starts only with all 4 pods placed" in condition["message"]
        assert not get_pod(kube_env, f"huge-{i}")["spec"].get("nodeName")


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
            kube_env.apply(pod_group(f"ha-{g}", 4))
            for i in range(4):
                pods.append(f"ha-{g}-{i}")
                create_pod(kube_env, gpu_pod(pods[-1], 1, scheduler="trimtab-ha", group=f"ha-{g}", **pool))
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
