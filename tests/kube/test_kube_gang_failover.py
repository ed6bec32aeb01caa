"""A gang that loses a member with its node, against a fake API: what the cycle evicts when the taint eviction
controller got to the lost member first, and how the gang's next run is told apart from the old run's pods that
linger, terminating, on the dead node. The same against a real control plane: test_kube_node_failure.py."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the kube extra (lightkube) is not installed")

from kube_objects import gpu_node, gpu_pod, pod_group
from test_kube_cycle import LATER_S, FakeApi, scheduler

UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-12-01T11:00:00Z"}
FIVE_S = [{"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
          for key in ("not-ready", "unreachable")]


def member(name: str, node: str | None, *, created: str = "2026-12-01T10:00:00Z",
           deleted: str | None = None) -> dict[str, Any]:
    pod = gpu_pod(name, 4, group="train", node=node, created=created, tolerations=FIVE_S)
    if deleted:
        pod["metadata"]["deletionTimestamp"] = deleted
    return pod


def nodes() -> list[dict[str, Any]]:
    return [gpu_node("n1", 8), gpu_node("n2", 8), gpu_node("dead", 8, ready=False, taints=[UNREACHABLE])]


def test_a_lost_member_the_taint_manager_deletes_first_still_restarts_its_gang() -> None:
    """The controller-manager deletes the lost member at the same instant trimtab would evict it: the member
    left terminating on the dead node still breaks the run it belonged to."""
    api = FakeApi()
    pods = [member("w0", "n1"), member("w1", "dead", deleted="2026-12-01T11:00:05Z")]
    scheduler(api, nodes(), pods, [pod_group("train", 2)]).cycle(LATER_S + 6)
    assert api.evicted == ["default/w0"]  # w1 is on its way out already
    assert any(e[:2] == ("w0", "GangRestarted") for e in api.events)


def test_the_next_run_binds_whole_beside_the_old_runs_pod_on_the_dead_node() -> None:
    """After the restart, the recreated members are pending while the old member lingers, terminating, on the
    dead node (no kubelet finishes it). It is not a member any more: the gang needs all its new members placed,
    and it is not restarted again for the old run's loss."""
    api = FakeApi()
    ghost = member("w1", "dead", deleted="2026-12-01T11:00:05Z")
    fresh = [member(f"r{i}", None, created="2026-12-01T11:00:06Z") for i in range(2)]
    sched = scheduler(api, nodes(), [ghost, *fresh], [pod_group("train", 2)])
    sched.cycle(LATER_S + 7)
    assert sorted(api.bound) == ["default/r0", "default/r1"]
    assert set(api.bound.values()) <= {"n1", "n2"}
    bound = [{**pod, "spec": {**pod["spec"], "nodeName": api.bound[f"default/{pod['metadata']['name']}"]}}
             for pod in fresh]
    sched.informers["pods"].load([ghost, *bound])
    sched.cycle(LATER_S + 8)
    assert api.evicted == []


def test_a_terminating_member_does_not_count_toward_min_member() -> None:
    """A gang of 2 with one member terminating on a live node and one pending: the pending one alone is not the
    gang, so it waits (until its controller recreates the other) instead of binding as if its gang had started."""
    api = FakeApi()
    leaving = member("w0", "n1", deleted="2026-12-01T11:00:00Z")
    sched = scheduler(api, nodes(), [leaving, member("w1", None)], [pod_group("train", 2)])
    sched.cycle(LATER_S)
    assert api.bound == {}
    assert "minMember is 2 but only 1 pods name this PodGroup" in api.unschedulable["default/w1"]
