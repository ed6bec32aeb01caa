"""Gangs from the workloads users submit, against a fake API (no cluster): the pods of a batch/v1 Job bind whole
or not at all, sized as the Job controller keeps them running; a PodGroup the pods name comes first; an
annotation opts a Job out; the upstream PodGroup a pod's `spec.schedulingGroup` names is a gang of its minCount,
ahead of the pod's Job. The same on a real control plane, with and without the PodGroup CRDs:
test_kube_stock.py."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the kube extra (lightkube) is not installed")

from kube_objects import batch_job, gpu_node, gpu_pod, pod_group
from test_kube_cycle import FakeApi

from trimtab.formats.k8s.operators import job_gang_size
from trimtab.kube.live import KubeScheduler
from trimtab.profile import Profile


def cycle(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], jobs: list[dict[str, Any]],
          groups: list[dict[str, Any]] = (), upstream: list[dict[str, Any]] = ()) -> FakeApi:
    api = FakeApi()
    sched = KubeScheduler(api, Profile.load("fifo"))  # type: ignore[arg-type]
    for name, items in (("nodes", nodes), ("pods", pods), ("jobs", jobs), ("podgroups", list(groups)),
                        ("workloadpodgroups", list(upstream))):
        sched.informers[name].load(items)
    sched.cycle(1e9)
    return api


def two_jobs(**job_args: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Two Jobs of 3 pods x 4 GPUs, job-b's pods created first but one second apart (a, b, a, b, ...)."""
    pods = [gpu_pod(f"{job}-{i}", 4, job=job, created=f"2026-12-01T10:00:0{2 * i + (job == 'job-a')}Z")
            for i in range(3) for job in ("job-a", "job-b")]
    return pods, [batch_job("job-a", 3, **job_args), batch_job("job-b", 3, **job_args)]


def test_the_pods_of_a_job_are_one_gang_and_two_jobs_never_deadlock() -> None:
    """Two 3 x 4-GPU Jobs on 2 x 8 GPUs: one Job gets all its pods, the other none (pod by pod, the first of
    each would deadlock both, each holding GPUs the other waits for)."""
    pods, jobs = two_jobs()
    api = cycle([gpu_node("n1"), gpu_node("n2")], pods, jobs)
    assert sorted(api.bound) == ["default/job-b-0", "default/job-b-1", "default/job-b-2"]
    assert api.unschedulable["default/job-a-0"].startswith("waiting for room for the gang's 3 members")


def test_a_job_opted_out_schedules_pod_by_pod() -> None:
    pods, jobs = two_jobs(annotations={"trimtab.io/gang": "false"})
    api = cycle([gpu_node("n1"), gpu_node("n2")], pods, jobs)
    assert len(api.bound) == 4 and {k.rsplit("-", 1)[0] for k in api.bound} == {"default/job-a", "default/job-b"}


def test_a_podgroup_the_pods_name_takes_precedence_over_their_job() -> None:
    pods = [gpu_pod(f"w{i}", 4, job="train", group="pg") for i in range(3)]
    api = cycle([gpu_node("n1")], pods, [batch_job("train", 3)], [pod_group("pg", 2)])
    assert sorted(api.bound) == ["default/w0", "default/w1"]  # minMember 2 of the PodGroup, not the Job's 3


def test_pods_of_a_job_not_read_yet_wait_for_it() -> None:
    api = cycle([gpu_node("n1"), gpu_node("n2")], [gpu_pod(f"w{i}", 4, job="late") for i in range(3)], [])
    assert api.bound == {} and api.unschedulable == {}


def test_a_job_replacing_one_pod_of_a_running_gang_binds_it_alone() -> None:
    pods = [gpu_pod("w0", 4, job="train", node="n1"), gpu_pod("w1", 4, job="train", node="n1"),
            gpu_pod("w2", 4, job="train")]
    assert cycle([gpu_node("n1"), gpu_node("n2")], pods, [batch_job("train", 3)]).bound == {"default/w2": "n2"}


@pytest.mark.parametrize(("parallelism", "completions", "succeeded", "size"), [
    (3, None, 0, 3), (3, 10, 0, 3), (3, 4, 2, 2), (3, 4, 4, 0), (None, None, 0, 1)])
def test_the_gang_is_what_the_job_controller_keeps_running(parallelism: int | None, completions: int | None,
                                                            succeeded: int, size: int) -> None:
    spec = {"parallelism": parallelism, "completions": completions}
    assert job_gang_size(spec, succeeded) == size
    assert job_gang_size(spec, succeeded, suspended=True) == 0


def upstream_group(name: str, min_count: int | None) -> dict[str, Any]:
    """A `scheduling.k8s.io/v1beta1` PodGroup: the gang policy of `min_count`, or the basic policy for None."""
    policy = {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "uid": f"wpg-{name}", "resourceVersion": "1"},
            "spec": {"schedulingPolicy": policy}}


def member(name: str, gpus: int, group: str, job: str | None = None,
           created: str = "2026-12-01T10:00:00Z") -> dict[str, Any]:
    return gpu_pod(name, gpus, job=job, created=created, schedulingGroup={"podGroupName": group})


def test_an_upstream_podgroup_is_a_gang_of_its_min_count_ahead_of_the_pods_job() -> None:
    pods = [member(f"w{i}", 4, "wl", job="train") for i in range(3)] + [
        member(f"h{i}", 8, "huge", created="2026-12-01T10:00:09Z") for i in range(3)]
    api = cycle([gpu_node("n1"), gpu_node("n2")], pods, [batch_job("train", 3)],
                upstream=[upstream_group("wl", 2), upstream_group("huge", 3)])
    assert sorted(api.bound) == ["default/w0", "default/w1"]  # minCount 2, not the Job's 3
    assert api.unschedulable["default/w2"].startswith("waiting for its gang default/wl to start")  # a follower
    assert api.unschedulable["default/h0"].startswith("waiting for room for the gang's 3 members")


def test_an_upstream_podgroup_of_the_basic_policy_is_no_gang_and_one_not_read_yet_is_waited_for() -> None:
    api = cycle([gpu_node("n1")], [member(f"b{i}", 4, "basic") for i in range(3)], [],
                upstream=[upstream_group("basic", None)])
    assert len(api.bound) == 2
    api = cycle([gpu_node("n1")], [member(f"l{i}", 4, "later") for i in range(2)], [])
    assert api.bound == {} and api.unschedulable == {}
