"""Failover against a real control plane (kube-apiserver, kube-controller-manager, KWOK): a node that stops its
heartbeat is tainted by the node lifecycle controller and trimtab restarts the gang it ran, which binds again whole
on the nodes left; and the leader of two `trimtab kube` replicas SIGKILLed during a burst of 500 pods in 50 gangs,
the standby taking over within the lease duration, every pod bound once and no gang left half-bound. Each test has
its scheduler name and a tainted pool of nodes of its own."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kube_env import KWOK_NODE, KubeEnv, needs_crds, run_trimtab_kube, stop_process
from kube_objects import gpu_pod, pod_group
from test_kube_live import create_pod, wait_for

pytestmark = pytest.mark.kube

LEASE_S = 15.0  # trimtab kube's lease duration (kube/leader.py)
RETRY_S = 2.0  # how often a standby looks at the Lease


def pool(name: str) -> tuple[dict[str, str], dict[str, Any]]:
    """A NoSchedule taint for a pool of nodes, and the spec fields of a pod that runs only there."""
    taint = {"key": "pool", "value": name, "effect": "NoSchedule"}
    return taint, {"nodeSelector": {"pool": name}, "tolerations": [{**taint, "operator": "Equal"}]}


def node_condition(env: KubeEnv, name: str) -> str:
    node = env.request("GET", f"/api/v1/nodes/{name}")
    return next((c["status"] for c in node["status"].get("conditions") or [] if c["type"] == "Ready"), "")


def events(env: KubeEnv, reason: str) -> list[dict[str, Any]]:
    return env.request("GET", f"/api/v1/namespaces/default/events?fieldSelector=reason={reason}")["items"]


def test_a_node_that_goes_not_ready_fails_its_gang_over(kube_env: KubeEnv) -> None:
    """An Indexed Job of 4 x 4 GPUs, one gang (a PodGroup with the CRDs, the Job itself on a stock cluster), on three
    8-GPU nodes, its pods tolerating not-ready/unreachable
    for 5 s. The node of one member stops its heartbeat (kwok stops managing it); the node lifecycle controller
    marks it NotReady after its grace period (20 s here) and taints it NoExecute; 5 s later the member is lost and
    trimtab evicts the whole gang with GangRestarted Events. The Job controller recreates the members (each index
    after its own back-off, 10 s for a first failure) and trimtab binds the new gang whole on the two nodes left,
    beside the old member that lingers, terminating, on the dead node."""
    taint, spec = pool("nf")
    names = kube_env.add_gpu_nodes(3, prefix="nf", labels={"pool": "nf"}, taints=[taint])
    kube_env.wait_nodes_ready(names)
    spec["tolerations"] += [{"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 5} for key in ("not-ready", "unreachable")]
    template = gpu_pod("member", 4, scheduler="trimtab-nf", group="nf-train" if kube_env.crds else None, **spec)
    if kube_env.crds:
        kube_env.apply(pod_group("nf-train", 4))
    kube_env.apply({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "nf-train"},
                    "spec": {"completionMode": "Indexed", "completions": 4, "parallelism": 4,
                             "backoffLimitPerIndex": 3, "podReplacementPolicy": "TerminatingOrFailed",
                             "template": {"metadata": {"labels": template["metadata"]["labels"]},
                                          "spec": {k: v for k, v in template["spec"].items() if k != "priority"}}}})
    proc = run_trimtab_kube(kube_env, "--scheduler-name", "trimtab-nf", "--policy", "fifo", log_name="trimtab-nf")
    try:
        first = wait_for("the gang bound", lambda: (b := bound_members(kube_env)) and len(b) == 4 and b,
                         timeout_s=90)
        dead = next(iter(first.values()))
        stopped_at = time.monotonic()
        kube_env.request("PATCH", f"/api/v1/nodes/{dead}",
                         {"metadata": {"annotations": {key: None for key in KWOK_NODE}}},
                         content_type="application/merge-patch+json")  # kwok stops renewing its Lease
        wait_for(f"{dead} NotReady", lambda: node_condition(kube_env, dead) != "True", timeout_s=120)
        not_ready_s = time.monotonic() - stopped_at
        node_taints = kube_env.request("GET", f"/api/v1/nodes/{dead}")["spec"].get("taints") or []
        live_members = {pod for pod, node in first.items() if node != dead}
        restarted = wait_for("GangRestarted Events for the members on live nodes", lambda: (
            r := [e for e in events(kube_env, "GangRestarted") if e["involvedObject"]["name"] in first])
            and {e["involvedObject"]["name"] for e in r} >= live_members and r, timeout_s=90)
        restarted_s = time.monotonic() - stopped_at
        again = wait_for("the recreated gang bound whole", lambda: (b := bound_members(kube_env)) and len(b) == 4
                         and not set(b) & set(first) and b, timeout_s=120)
        rebound_s = time.monotonic() - stopped_at
        print(f"heartbeat stopped on {dead}: NotReady after {not_ready_s:.0f} s, taints "
              f"{sorted(t['key'] for t in node_taints)}; gang restarted after {restarted_s:.0f} s "
              f"({len(restarted)} GangRestarted Events); recreated by the Job and bound again after {rebound_s:.0f} s")
        print(f"first run {sorted(first.items())}\nsecond run {sorted(again.items())}")
        assert dead not in again.values()
        assert sorted(again.values()) == sorted(n for n in names if n != dead for _ in range(2))
        assert all("lost a member with its node" in e["message"] for e in restarted)
    finally:
        stop_process(proc)


def bound_members(env: KubeEnv) -> dict[str, str]:
    """The Job's pods bound and not terminating: name -> node."""
    pods = env.request("GET", "/api/v1/namespaces/default/pods?labelSelector=batch.kubernetes.io/job-name=nf-train")
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods["items"]
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")}


GANGS, MEMBERS = 50, 10
HELD_BACK = 10  # gangs created after the leader is killed


def leading(env: KubeEnv, logs: list[str]) -> str | None:
    """The first of the replicas (by log name) that has logged taking the Lease."""
    return next((log for log in logs if "leading as" in (env.dir / f"{log}.log").read_text()), None)


@pytest.mark.slow
def test_the_standby_takes_over_during_a_burst_of_500_pods(kube_env: KubeEnv) -> None:
    """Two replicas (scheduler name trimtab-burst) on eight 64-GPU nodes; 50 gangs of 10 one-GPU pods created one
    after another. The replicas' requests are paced (20 a second, bursts of 10) so that a gang's binding takes a
    while: the leader is SIGKILLed once 100 pods are bound and a gang is seen half-bound (or once 200 are bound),
    while the gangs are still being created (the last 10 are created only after the kill, so a fast creator cannot
    finish the burst first). The standby takes the Lease within the lease duration (plus its retry
    period) and binds the rest: every pod bound once (its node never changes, at most one Scheduled Event each,
    the same pod throughout), every gang whole."""
    needs_crds(kube_env)  # the failover story above runs on both; this burst, once, is enough
    taint, spec = pool("burst")
    nodes = kube_env.add_gpu_nodes(8, gpus=64, prefix="burst", labels={"pool": "burst"}, taints=[taint])
    kube_env.wait_nodes_ready(nodes)
    args = ("--scheduler-name", "trimtab-burst", "--lease-namespace", "default", "--kube-api-qps", "20",
            "--kube-api-burst", "10")
    logs = [f"trimtab-burst-{i}" for i in range(2)]
    replicas = [run_trimtab_kube(kube_env, *args, log_name=log) for log in logs]
    created: list[str] = []
    creator_done = threading.Event()
    killed = threading.Event()  # the last gangs are created only after the kill: it always falls inside the burst

    def create_gangs() -> None:
        with ThreadPoolExecutor(8) as pool_:
            for g in range(GANGS):
                if g == GANGS - HELD_BACK:
                    killed.wait(300)
                kube_env.apply(pod_group(f"burst-{g}", MEMBERS))
                names = [f"burst-{g}-{i}" for i in range(MEMBERS)]
                list(pool_.map(lambda n, g=g: create_pod(kube_env, gpu_pod(n, 1, scheduler="trimtab-burst",
                                                                           group=f"burst-{g}", **spec)), names))
                created.extend(names)
        creator_done.set()

    first_node: dict[str, tuple[str, str]] = {}  # pod -> (uid, node) when first seen bound

    def observe() -> int:
        pods = kube_env.request("GET", "/api/v1/namespaces/default/pods")["items"]
        for pod in pods:
            name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
            if name.startswith("burst-") and node:
                seen = first_node.setdefault(name, (pod["metadata"]["uid"], node))
                assert seen == (pod["metadata"]["uid"], node), f"{name} moved: {seen} -> {node}"
        return len(first_node)

    def bound_per_gang() -> dict[str, int]:
        return {f"burst-{g}": sum(1 for i in range(MEMBERS) if f"burst-{g}-{i}" in first_node) for g in range(GANGS)}

    try:
        leader = int(wait_for("a leader", lambda: leading(kube_env, logs))[-1])
        creator = threading.Thread(target=create_gangs, daemon=True)
        creator.start()
        wait_for("100 pods bound by the leader and a gang half-bound", lambda: (bound := observe()) >= 200 or (
            bound >= 100 and any(0 < n < MEMBERS for n in bound_per_gang().values())), timeout_s=180)
        replicas[leader].kill()  # SIGKILL: the Lease is left to expire
        killed_at, created_at_kill, bound_at_kill = time.monotonic(), len(created), len(first_node)
        killed.set()
        half_bound_at_kill = sum(0 < n < MEMBERS for n in bound_per_gang().values())
        standby = logs[1 - leader]
        wait_for("the standby leading", lambda: leading(kube_env, [standby]),
                 timeout_s=LEASE_S + RETRY_S + 30)
        takeover_s = time.monotonic() - killed_at
        wait_for("every pod created", creator_done.is_set, timeout_s=180)
        created_s = time.monotonic() - killed_at
        wait_for("every pod bound", lambda: observe() == GANGS * MEMBERS, timeout_s=240)
        all_bound_s = time.monotonic() - killed_at
        scheduled: dict[str, int] = {}
        for event in events(kube_env, "Scheduled"):
            name = event["involvedObject"]["name"]
            if name.startswith("burst-"):
                scheduled[name] = scheduled.get(name, 0) + 1
        print(f"leader burst-{leader} SIGKILLed with {created_at_kill}/{GANGS * MEMBERS} pods created and "
              f"{bound_at_kill} bound ({half_bound_at_kill} gangs half-bound); the standby led "
              f"{takeover_s:.1f} s later (lease {LEASE_S:.0f} s, retry {RETRY_S:.0f} s); the last pod created "
              f"{created_s:.1f} s and all {GANGS * MEMBERS} bound {all_bound_s:.1f} s after the kill; "
              f"{GANGS * MEMBERS - len(scheduled)} bound without a Scheduled Event (the kill came between "
              "their binding and its Event)")
        assert created_at_kill < GANGS * MEMBERS, "the leader was killed after the burst, not during it"
        assert takeover_s < LEASE_S + RETRY_S + 5  # and a few seconds for a loaded machine's log and polls
        assert max(scheduled.values()) == 1, {p: n for p, n in scheduled.items() if n > 1}
        assert set(bound_per_gang().values()) == {MEMBERS}
    finally:
        for proc in replicas:
            stop_process(proc)
