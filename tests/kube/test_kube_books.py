"""One Scheduler for as long as trimtab leads (kube/books.py), against a fake API: it lives across cycles, a job
keeps its identity and its credit when its controller recreates its pods, a preemptor binds once its victims are
gone, and jobs whose pods are gone are let go."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the kube extra (lightkube) is not installed")

from kube_objects import batch_job, gpu_node, gpu_pod, pod_group
from test_kube_cycle import LATER_S, FakeApi, scheduler

from trimtab.kube.books import ORPHAN_S
from trimtab.model import JobState

URGENT = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "urgent"},
          "value": 1000}


def _nominating(api: FakeApi) -> list[tuple[str, str]]:
    nominated: list[tuple[str, str]] = []
    api.nominate = lambda ns, name, node: nominated.append((name, node))  # type: ignore[method-assign]
    return nominated


def test_one_scheduler_lives_across_cycles_while_leading() -> None:
    api = FakeApi()
    sched = scheduler(api, [gpu_node("n1", 4)], [gpu_pod("a", 2)])
    sched.cycle(LATER_S)
    first = sched.books.scheduler
    sched.informers["pods"].load([*sched.informers["pods"].items(), gpu_pod("b", 2)])
    sched.cycle(LATER_S + 1)
    assert api.bound == {"default/a": "n1", "default/b": "n1"}
    assert sched.books.scheduler is first and sched.books.rebuilds == 1
    assert first.state["default/a"] is JobState.RUNNING  # started by the first cycle, still running in the second


def test_a_preempted_gang_recreated_by_its_controller_is_the_same_job_with_its_attained_service() -> None:
    """The Job controller replaces an evicted pod by a new one (a new uid) of the same gang: the same job, which
    keeps the GPU-seconds it attained (las and steady order by them) and its first submit time."""
    api = FakeApi()
    nominated = _nominating(api)
    low = gpu_pod("w0", 4, group="train", node="n1")  # bound since 10:00, an hour before LATER_S
    sched = scheduler(api, [gpu_node("n1", 4)], [low, gpu_pod("high", 4, priorityClassName="urgent")],
                      [pod_group("train", 1)], policy="priority")
    sched.informers["priorityclasses"].load([URGENT])
    sched.cycle(LATER_S)
    assert api.evicted == ["default/w0"] and nominated == [("high", "n1")] and api.bound == {}
    books = sched.books
    assert books.scheduler.state["default/train"] is JobState.PENDING
    attained = books.scheduler.prior_attained_gpu_s["default/train"]
    assert attained == pytest.approx(4 * 3600.0)
    high = next(p for p in sched.informers["pods"].items() if p["metadata"]["name"] == "high")
    recreated = gpu_pod("w0-again", 4, group="train", created="2026-12-01T11:00:05Z")
    sched.informers["pods"].load([high, recreated])  # the victim is gone; its controller made a new pod
    sched.cycle(LATER_S + 10)
    assert api.bound == {"default/high": "n1"}  # the preemptor binds once its victim has gone
    job = books.scheduler.jobs["default/train"]
    assert books.scheduler.state["default/train"] is JobState.PENDING
    assert books.scheduler.prior_attained_gpu_s["default/train"] == attained
    assert job.submit_s < LATER_S  # its first submit time, not the new pod's creation
    assert books.rebuilds == 1


def test_a_bare_pod_evicted_and_not_recreated_is_let_go() -> None:
    api = FakeApi()
    _nominating(api)
    sched = scheduler(api, [gpu_node("n1", 4)], [gpu_pod("solo", 4, node="n1"),
                                                 gpu_pod("high", 4, priorityClassName="urgent")], policy="priority")
    sched.informers["priorityclasses"].load([URGENT])
    sched.cycle(LATER_S)
    assert api.evicted == ["default/solo"]
    high = next(p for p in sched.informers["pods"].items() if p["metadata"]["name"] == "high")
    sched.informers["pods"].load([high])
    sched.cycle(LATER_S + 1)
    assert sched.books.scheduler.state["default/solo"] is JobState.PENDING  # held: its pods may come back
    sched.cycle(LATER_S + 2 + ORPHAN_S)
    assert "default/solo" not in sched.books.scheduler.state
    assert "default/solo" not in api.unschedulable


def test_a_preempted_job_stays_the_same_job_through_its_controllers_backoff_and_is_let_go_once_deleted() -> None:
    """A batch/v1 Job's evicted pods come back only after the Job controller's backoff (40 s for 3 pods, up to
    10 min): its gang is held for as long as the Job stands, keeping its first submit time (its place in the queue
    and its credit), and let go ORPHAN_S after the Job is deleted."""
    api = FakeApi()
    _nominating(api)
    low = [gpu_pod(f"w{i}", 2, job="train", node="n1") for i in range(2)]
    sched = scheduler(api, [gpu_node("n1", 4)], [*low, gpu_pod("high", 4, priorityClassName="urgent")],
                      policy="priority")
    sched.informers["priorityclasses"].load([URGENT])
    sched.informers["jobs"].load([batch_job("train", 2)])
    sched.cycle(LATER_S)
    assert sorted(api.evicted) == ["default/w0", "default/w1"]
    high = next(p for p in sched.informers["pods"].items() if p["metadata"]["name"] == "high")
    sched.informers["pods"].load([high])  # the victims are gone; the controller waits out its backoff
    books = sched.books
    for later_s in (1, 2 + ORPHAN_S, 40 + ORPHAN_S):
        sched.cycle(LATER_S + later_s)
        assert books.scheduler.state["default/train"] is JobState.PENDING
    submit_s = books.scheduler.jobs["default/train"].submit_s
    assert submit_s < LATER_S
    again = [gpu_pod(f"w{i}-again", 2, job="train", created="2026-12-01T11:02:00Z") for i in range(2)]
    sched.informers["pods"].load([high, *again])
    sched.cycle(LATER_S + 41 + ORPHAN_S)
    assert books.scheduler.jobs["default/train"].submit_s == submit_s  # not the new pods' creation
    sched.informers["pods"].load([high])
    sched.informers["jobs"].load([])  # evicted again, and the Job deleted: nothing will bring its pods back
    sched.cycle(LATER_S + 42 + ORPHAN_S)
    sched.cycle(LATER_S + 43 + 2 * ORPHAN_S)
    assert "default/train" not in books.scheduler.state


def test_a_completed_job_is_forgotten_and_its_name_may_come_again() -> None:
    api = FakeApi()
    sched = scheduler(api, [gpu_node("n1", 4)], [gpu_pod("a", 2)])
    sched.cycle(LATER_S)
    done: dict[str, Any] = sched.informers["pods"].items()[0]
    done = {**done, "spec": {**done["spec"], "nodeName": "n1"},
            "status": {"phase": "Succeeded", "startTime": "2026-12-01T11:00:00Z"}}
    sched.informers["pods"].load([done])
    sched.cycle(LATER_S + 60)
    assert "default/a" not in sched.books.scheduler.state
    assert [job.id for job, _ in sched.history] == ["default/a"]
    api.bound.clear()
    sched.informers["pods"].load([gpu_pod("a", 2)])  # a new pod of the same name
    sched.cycle(LATER_S + 61)
    assert api.bound == {"default/a": "n1"}


def test_a_node_that_is_not_ready_is_down_in_the_books_until_it_is_ready_again() -> None:
    api = FakeApi()
    sched = scheduler(api, [gpu_node("n1", 4), gpu_node("n2", 4)], [])
    sched.cycle(LATER_S)
    sched.informers["nodes"].load([gpu_node("n1", 4), gpu_node("n2", 4, ready=False)])
    sched.informers["pods"].load([gpu_pod("a", 4), gpu_pod("b", 4)])
    sched.cycle(LATER_S + 1)
    assert list(api.bound.values()) == ["n1"]
    sched.informers["nodes"].load([gpu_node("n1", 4), gpu_node("n2", 4)])
    sched.cycle(LATER_S + 2)
    assert sorted(api.bound.values()) == ["n1", "n2"] and sched.books.rebuilds == 1


def test_a_ready_node_still_tainted_not_ready_by_the_lifecycle_controller_takes_no_pod_until_the_taint_goes() -> None:
    api = FakeApi()
    lingering = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    sched = scheduler(api, [gpu_node("n1", 4, taints=lingering)], [gpu_pod("a", 4)])
    sched.cycle(LATER_S)
    assert api.bound == {}
    sched.informers["nodes"].load([gpu_node("n1", 4)])
    sched.cycle(LATER_S + 1)
    assert api.bound == {"default/a": "n1"} and sched.books.rebuilds == 1


def _named(sched: Any, name: str) -> dict[str, Any]:
    return next(p for p in sched.informers["pods"].items() if p["metadata"]["name"] == name)


def test_las_orders_a_preempted_gang_by_the_service_it_attained_before_its_pods_were_recreated() -> None:
    """Tiresias's LAS on Kubernetes as in simulation: a gang that ran an hour on 4 GPUs (14,400 GPU-s, the lowest
    queue) is preempted by a new job; its Job controller recreates its pod. When the GPUs free up, a job that
    arrived after it but has attained nothing goes first. A Scheduler rebuilt every cycle would see the recreated
    pod with no service and the earlier submit time, and start it first."""
    api = FakeApi()
    _nominating(api)
    old = gpu_pod("old", 4, group="train", node="n1")  # bound since 10:00
    sched = scheduler(api, [gpu_node("n1", 4)], [old, gpu_pod("new", 4, created="2026-12-01T10:59:00Z")],
                      [pod_group("train", 1)], policy="las")
    sched.cycle(LATER_S)
    assert api.evicted == ["default/old"]
    new = _named(sched, "new")
    sched.informers["pods"].load([new, gpu_pod("old-2", 4, group="train", created="2026-12-01T11:00:02Z")])
    sched.cycle(LATER_S + 5)
    assert api.bound == {"default/new": "n1"}
    running = {**new, "spec": {**new["spec"], "nodeName": "n1"},
               "status": {"phase": "Running", "startTime": "2026-12-01T11:00:05Z"}}
    later = gpu_pod("later", 4, created="2026-12-01T11:00:10Z")
    sched.informers["pods"].load([running, _named(sched, "old-2"), later])
    sched.cycle(LATER_S + 10)
    done = {**running, "status": {"phase": "Succeeded", "startTime": "2026-12-01T11:00:05Z"}}
    sched.informers["pods"].load([done, _named(sched, "old-2"), _named(sched, "later")])
    sched.cycle(LATER_S + 100)
    assert api.bound == {"default/new": "n1", "default/later": "n1"}
    assert sched.books.scheduler.prior_attained_gpu_s["default/train"] == pytest.approx(4 * 3600.0)


def test_guarded_preemption_keeps_its_eviction_budget_across_cycles() -> None:
    """guarded's budget (GPUs evicted per hour, a fraction of the cluster's) holds over the hour, not per cycle:
    the second preemptor, a cycle later, waits instead of evicting past it."""
    from trimtab.kube.live import KubeScheduler
    from trimtab.profile import Profile

    profile = Profile.model_validate({"name": "guarded-live", "order": ["priority", "fifo"],
                                      "preempt": [{"guarded": {"budget_per_hour": 0.5}}]})
    api = FakeApi()
    _nominating(api)
    sched = KubeScheduler(api, profile)  # type: ignore[arg-type]
    sched.informers["nodes"].load([gpu_node("n1", 8)])
    sched.informers["priorityclasses"].load([URGENT])
    sched.informers["pods"].load([gpu_pod("low1", 4, node="n1"), gpu_pod("low2", 4, node="n1"),
                                  gpu_pod("high1", 4, priorityClassName="urgent")])
    sched.cycle(LATER_S)
    assert len(api.evicted) == 1  # 4 of 8 GPUs: the whole budget of the hour
    kept = next(n for n in ("low1", "low2") if f"default/{n}" not in api.evicted)
    sched.informers["pods"].load([_named(sched, kept), _named(sched, "high1"),
                                  gpu_pod("high2", 4, priorityClassName="urgent")])
    sched.cycle(LATER_S + 5)
    assert api.bound == {"default/high1": "n1"}
    high1 = _named(sched, "high1")
    sched.informers["pods"].load([_named(sched, kept), {**high1, "spec": {**high1["spec"], "nodeName": "n1"}},
                                  _named(sched, "high2")])
    sched.cycle(LATER_S + 600)
    assert api.bound == {"default/high1": "n1"} and len(api.evicted) == 1
    assert "default/high2" in api.unschedulable


def test_drf_with_a_half_life_remembers_a_namespace_s_recent_usage_across_cycles() -> None:
    """drf with `half_life_s` orders by usage decayed over time, as in simulation: team-a held the node's 4 GPUs for
    five minutes; when it and team-b then ask at once, team-b goes first, though team-a asked a minute earlier.
    Rebuilt each cycle, the Scheduler would know no usage and start team-a's pod, the older."""
    from trimtab.kube.live import KubeScheduler
    from trimtab.profile import Profile

    profile = Profile.model_validate({"name": "drf-decay", "order": [{"drf": {"half_life_s": 600}}, "fifo"]})
    api = FakeApi()
    sched = KubeScheduler(api, profile)  # type: ignore[arg-type]
    sched.informers["nodes"].load([gpu_node("n1", 4)])
    big = gpu_pod("big", 4, namespace="team-a", node="n1")
    sched.informers["pods"].load([big])
    sched.cycle(LATER_S)
    sched.cycle(LATER_S + 300)
    done = {**big, "status": {"phase": "Succeeded", "startTime": big["status"]["startTime"]}}
    sched.informers["pods"].load([done, gpu_pod("a-next", 4, namespace="team-a", created="2026-12-01T11:04:00Z"),
                                  gpu_pod("b-next", 4, namespace="team-b", created="2026-12-01T11:05:00Z")])
    sched.cycle(LATER_S + 310)
    assert api.bound == {"team-b/b-next": "n1"}


def test_drain_keeps_new_pods_off_a_node_that_went_not_ready_twice() -> None:
    """A node going NotReady is a failure observed on it, as a node fault is in simulation: after two, `drain`
    keeps new work off it while its record is worse than the others', so a pod that fits only there waits."""
    from trimtab.kube.live import KubeScheduler
    from trimtab.profile import Profile

    profile = Profile.model_validate({"name": "health", "order": ["fifo"],
                                      "filter": [{"drain": {"threshold": 1.5, "ratio": 1.5, "max_share": 0.5}}]})
    api = FakeApi()
    sched = KubeScheduler(api, profile)  # type: ignore[arg-type]
    held = [gpu_pod("held", 2, node="n1")]
    sched.informers["pods"].load(held)
    for i, ready in enumerate([True, False, True, False, True]):
        sched.informers["nodes"].load([gpu_node("n1", 4), gpu_node("n2", 4, ready=ready)])
        sched.cycle(LATER_S + i)
    sched.informers["pods"].load([*held, gpu_pod("new", 4)])
    sched.cycle(LATER_S + 10)
    assert api.bound == {} and "default/new" in api.unschedulable
    assert "drained" in api.unschedulable["default/new"]


def test_delay_holds_a_gang_for_one_node_and_wakes_the_loop_when_its_wait_runs_out() -> None:
    """delay on Kubernetes as in simulation: a gang that fits one node, but only spread right now, waits up to
    `max_delay_s` after its creation; the loop is woken at that moment (not at its next resync), and the gang then
    takes the spread placement."""
    from trimtab.kube.live import KubeScheduler
    from trimtab.profile import Profile

    profile = Profile.model_validate({"name": "delay", "order": ["fifo"], "admit": [{"delay": {"max_delay_s": 60}}]})
    api = FakeApi()
    sched = KubeScheduler(api, profile)  # type: ignore[arg-type]
    sched.informers["nodes"].load([gpu_node("n1", 4), gpu_node("n2", 4)])
    sched.informers["podgroups"].load([pod_group("g", 2)])
    created = "2026-12-01T10:59:30Z"  # LATER_S - 30: the wait runs out at LATER_S + 30
    members = [gpu_pod(f"g-{i}", 2, group="g", created=created) for i in range(2)]
    sched.informers["pods"].load([gpu_pod("x", 2, node="n1"), gpu_pod("y", 2, node="n2"), *members])
    sched.cycle(LATER_S)
    assert api.bound == {} and sched._wake_at_s == pytest.approx(LATER_S + 30)
    assert "one node" in api.unschedulable["default/g-0"]
    sched.cycle(LATER_S + 30)
    assert sorted(api.bound.values()) == ["n1", "n2"]


def test_reserve_keeps_a_gangs_reservation_across_cycles_and_lets_it_go_after_its_timeout() -> None:
    """reserve on Kubernetes as in simulation: a blocked gang of 8 GPUs reserves the GPUs free now, so a pod that
    would end after the reservation starts waits; the gang holds it for `gang_timeout_s` counted from its first
    cycle (state a rebuilt Scheduler would forget), then lets it go and the pod binds."""
    from trimtab.kube.live import KubeScheduler
    from trimtab.profile import Profile

    profile = Profile.model_validate({"name": "reserve", "order": ["fifo"],
                                      "backfill": [{"reserve": {"min_gpus": 8, "gang_timeout_s": 60}}]})
    api = FakeApi()
    sched = KubeScheduler(api, profile)  # type: ignore[arg-type]
    sched.informers["nodes"].load([gpu_node("n1", 4), gpu_node("n2", 4)])
    sched.informers["podgroups"].load([pod_group("g", 2)])
    two_hours = {"trimtab.io/duration": "7200s"}  # x started an hour before LATER_S: it ends an hour after
    gang = [gpu_pod(f"g-{i}", 4, group="g", created="2026-12-01T10:30:00Z") for i in range(2)]
    sched.informers["pods"].load([gpu_pod("x", 2, node="n1", annotations=two_hours), *gang])
    sched.cycle(LATER_S)
    assert api.bound == {}
    late = gpu_pod("long", 1, annotations=two_hours, created="2026-12-01T11:00:00Z")
    sched.informers["pods"].load([*sched.informers["pods"].items(), late])
    sched.cycle(LATER_S + 30)
    assert api.bound == {}, "the reservation holds the free GPUs from a pod that would outlast its start"
    sched.cycle(LATER_S + 61)
    assert list(api.bound) == ["default/long"] and sched.books.rebuilds == 1


class CreditApi(FakeApi):
    """A fake API that also keeps ConfigMaps' keys (the credit of kube/credit.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.configs: dict[tuple[str, str, str], str] = {}

    def read_config(self, namespace: str, name: str, key: str) -> str | None:
        return self.configs.get((namespace, name, key))

    def write_config(self, namespace: str, name: str, key: str, text: str) -> None:
        self.configs[(namespace, name, key)] = text


def _preempt_train(api: FakeApi) -> tuple[Any, dict[str, Any]]:
    """A leader that preempted gang `train` (4 GPUs for an hour) for pod `high`; returns it and `high`."""
    from trimtab.kube.live import KubeScheduler
    from trimtab.profile import Profile

    sched = KubeScheduler(api, Profile.load("priority"), credit_at=("kube-system", "trimtab-credit"))  # type: ignore[arg-type]
    sched.informers["nodes"].load([gpu_node("n1", 4)])
    sched.informers["podgroups"].load([pod_group("train", 1)])
    sched.informers["priorityclasses"].load([URGENT])
    high = gpu_pod("high", 4, priorityClassName="urgent")
    sched.informers["pods"].load([gpu_pod("w0", 4, group="train", node="n1"), high])
    sched.cycle(LATER_S)
    assert api.evicted == ["default/w0"]
    return sched, high


def test_a_new_leader_goes_on_from_the_credit_the_last_one_wrote() -> None:
    """The leader writes each job's credit to a ConfigMap (kube/credit.py); a new leader reads it when its term
    begins, so the preempted gang keeps the GPU-seconds it attained (las and steady order by them) though its
    pods are new and no pod of it is bound."""
    import json

    from trimtab.kube.live import KubeScheduler
    from trimtab.profile import Profile

    api = CreditApi()
    old, high = _preempt_train(api)
    old._reports.shutdown(wait=True)  # the credit's write runs on the report threads
    text = api.configs[("kube-system", "trimtab-credit", "credit.json")]
    assert json.loads(text)["jobs"] == {"default/train": [4 * 3600.0, 3600.0]}
    new = KubeScheduler(api, Profile.load("priority"), credit_at=("kube-system", "trimtab-credit"))  # type: ignore[arg-type]
    new.informers["nodes"].load([gpu_node("n1", 4)])
    new.informers["podgroups"].load([pod_group("train", 1)])
    new.informers["priorityclasses"].load([URGENT])
    bound = {**high, "spec": {**high["spec"], "nodeName": "n1"}, "status": {"phase": "Running",
                                                                          "startTime": "2026-12-01T11:00:01Z"}}
    new.informers["pods"].load([bound, gpu_pod("w0-again", 4, group="train", created="2026-12-01T11:00:05Z")])
    new.cycle(LATER_S + 10)
    scheduler = new.books.scheduler
    assert scheduler.state["default/train"] is JobState.PENDING
    assert scheduler.prior_attained_gpu_s["default/train"] == pytest.approx(4 * 3600.0)
    assert scheduler.prior_executed_s["default/train"] == pytest.approx(3600.0)


def test_a_rebuild_within_a_term_keeps_the_credit() -> None:
    """A node whose labels change rebuilds the Scheduler; the preempted gang's credit goes into the new one."""
    api = CreditApi()
    sched, high = _preempt_train(api)
    sched.informers["nodes"].load([gpu_node("n1", 4, labels={"trimtab.io/rack": "r2"})])
    sched.informers["pods"].load([high, gpu_pod("w0-again", 4, group="train", created="2026-12-01T11:00:05Z")])
    sched.cycle(LATER_S + 1)
    assert sched.books.rebuilds == 2
    assert sched.books.scheduler.prior_attained_gpu_s["default/train"] == pytest.approx(4 * 3600.0)


def _drf(api: FakeApi) -> Any:
    """A leader under drf with a 60 s half-life, keeping its credit in a ConfigMap: team-a holds 4 GPUs."""
    from pathlib import Path

    from trimtab.kube.live import KubeScheduler
    from trimtab.profile import Profile

    profile = Profile.load(Path(__file__).parents[2] / "benchmarks/fidelity/profiles/drf-decay.yaml")
    sched = KubeScheduler(api, profile, credit_at=("kube-system", "trimtab-credit"))  # type: ignore[arg-type]
    sched.informers["nodes"].load([gpu_node("n1", 8)])
    sched.informers["pods"].load([gpu_pod("a0", 4, namespace="team-a", node="n1", scheduler="default-scheduler")])
    return sched


def _decayed(sched: Any) -> dict[str, float]:
    (drf,) = [p for p in sched.books.scheduler.framework.plugins if p.name == "drf"]
    return drf._decayed


def test_drfs_decayed_usage_is_kept_across_a_rebuild_and_by_the_next_leader() -> None:
    """Fair share with decay (drf `half_life_s`) learns team-a's usage over the cycles; a rebuild within the term
    and the next leader (through the ConfigMap, key `plugins`) go on from it rather than from zero."""
    import json

    api = CreditApi()
    old = _drf(api)
    running = gpu_pod("a0", 4, namespace="team-a", node="n1", scheduler="default-scheduler")
    for i, t in enumerate((0, 30, 60)):  # a pod arriving each time (too large to fit): each cycle runs the plugins
        old.informers["pods"].load([running, *(gpu_pod(f"b{k}", 8, namespace="team-b") for k in range(i + 1))])
        old.cycle(LATER_S + t)
    learned = dict(_decayed(old))
    assert learned.get("team-a", 0.0) > 0
    old.informers["nodes"].load([gpu_node("n1", 8, labels={"trimtab.io/rack": "r2"})])
    old.cycle(LATER_S + 61)
    assert old.books.rebuilds == 2 and _decayed(old)["team-a"] >= learned["team-a"]
    old.credit._due_s = 0.0  # the writes are paced by CREDIT_S of the wall clock; these cycles take milliseconds
    old.informers["pods"].load([running, gpu_pod("b9", 8, namespace="team-b")])
    old.cycle(LATER_S + 70)
    old._reports.shutdown(wait=True)
    written = json.loads(api.configs[("kube-system", "trimtab-credit", "credit.json")])
    assert written["plugins"]["drf"]["decayed"]["team-a"] > 0
    new = _drf(api)
    new.cycle(LATER_S + 71)
    assert _decayed(new)["team-a"] >= written["plugins"]["drf"]["decayed"]["team-a"] * 0.9
