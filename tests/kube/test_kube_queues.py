"""Volcano Queues on a live cluster, against a fake API: the informer on `queues.scheduling.volcano.sh` gives the
profile its queues as `simulate --manifests` reads them. Two queues that deserve 8 of 16 GPUs each: while team-a
is idle team-b borrows all 16; when team-a's pods come, team-b's borrowed pods (only those) are evicted through
the Eviction API; a queue's `guarantee` is never lent."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the kube extra (lightkube) is not installed")

from kube_objects import gpu_node, gpu_pod
from test_kube_cycle import LATER_S, FakeApi, scheduler

from trimtab.kube.live import KubeScheduler


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": name, "uid": f"q-{name}", "resourceVersion": "1"}, "spec": spec}


def deserving(gpus: int) -> dict[str, Any]:
    return {"nvidia.com/gpu": str(gpus)}


def pods_of(team: str, count: int, start: int = 0, **kw: Any) -> list[dict[str, Any]]:
    return [gpu_pod(f"{team}-{i}", 1, namespace=team, **kw) for i in range(start, start + count)]


def run(queues: list[dict[str, Any]], pending: list[dict[str, Any]], bound: list[dict[str, Any]] = (),
        policy: str = "drf") -> tuple[FakeApi, KubeScheduler]:
    api = FakeApi()
    sched = scheduler(api, [gpu_node("n1", 8), gpu_node("n2", 8)], [*bound, *pending], policy=policy)
    sched.informers["volcanoqueues"].load(queues)
    sched.cycle(LATER_S)
    return api, sched


def test_an_idle_queues_deserved_gpus_are_lent_and_reclaimed_from_the_borrower_only() -> None:
    queues = [queue("team-a", deserved=deserving(8)), queue("team-b", deserved=deserving(8))]
    api, _ = run(queues, pods_of("team-b", 16))
    assert len(api.bound) == 16  # team-a is idle: team-b borrows its 8
    bound = [gpu_pod(f"team-b-{i}", 1, namespace="team-b", node="n1" if i < 8 else "n2") for i in range(16)]
    api, _ = run(queues, pods_of("team-a", 8), bound)
    assert len(api.evicted) == 8 and all(key.startswith("team-b/") for key in api.evicted)


def test_within_its_deserved_gpus_a_queue_is_not_reclaimed_from() -> None:
    """team-b holds 8 (its deserved): team-a's pods beyond the 8 free GPUs wait, nothing is evicted."""
    queues = [queue("team-a", deserved=deserving(8)), queue("team-b", deserved=deserving(8))]
    bound = [gpu_pod(f"team-b-{i}", 1, namespace="team-b", node="n1") for i in range(8)]
    api, _ = run(queues, pods_of("team-a", 10), bound)
    assert api.evicted == [] and len(api.bound) == 8


def test_a_guarantee_is_never_lent() -> None:
    api, _ = run([queue("team-a", guarantee={"resource": deserving(6)}), queue("team-b")], pods_of("team-b", 16))
    assert len(api.bound) == 10 and "quota: queue team-b" in next(iter(api.unschedulable.values()))


def test_a_pod_joins_the_queue_its_annotation_names() -> None:
    """Pods of namespace lab, in queue team-b by annotation, count against team-b's capability."""
    pods = pods_of("lab", 4, annotations={"scheduling.volcano.sh/queue-name": "team-b"})
    api, _ = run([queue("team-b", capability=deserving(2))], pods, policy="quota-fifo")
    assert len(api.bound) == 2


def test_each_queues_status_says_the_gpus_it_holds_written_only_when_it_changes() -> None:
    writes: list[tuple[str, dict[str, str]]] = []
    api = FakeApi()
    api.set_queue_allocated = lambda name, allocated: writes.append((name, allocated))  # type: ignore[attr-defined]
    bound = [gpu_pod(f"team-b-{i}", 1, namespace="team-b", node="n1") for i in range(3)]
    sched = scheduler(api, [gpu_node("n1", 8)], bound, policy="drf")
    queues = [queue("team-a"), queue("team-b")]
    queues[0]["status"] = {"allocated": {"nvidia.com/gpu": "0"}}  # as written already: not written again
    sched.informers["volcanoqueues"].load(queues)
    sched.cycle(LATER_S)
    sched.cycle(LATER_S + 1)
    sched._reports.shutdown(wait=True)
    assert writes == [("team-b", {"nvidia.com/gpu": "3"})]
