"""The kube scheduler's cycle against a fake API (no cluster): what it binds, what it marks Unschedulable and why,
how a gang binds whole or rolls back. The same against a real API server: test_kube_live.py."""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the kube extra (lightkube) is not installed")

from kube_objects import gpu_node, gpu_pod, pod_group
from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from trimtab.kube.live import KubeScheduler
from trimtab.profile import Profile

LATER_S = 1_796_122_800.0  # 2026-12-01T11:00:00Z, an hour after kube_objects' pods were created


class FakeApi:
    """Records every write; `refuse` names pods whose binding the server refuses."""

    scheduler_name = "trimtab"

    def __init__(self, refuse: tuple[str, ...] = ()) -> None:
        self.refuse = refuse
        self.bound: dict[str, str] = {}
        self.evicted: list[str] = []
        self.unschedulable: dict[str, str] = {}
        self.events: list[tuple[str, str, str]] = []

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        if name in self.refuse:
            raise ApiError(status=Status(code=409, message=f"pod {name} is being deleted"))
        self.bound[f"{namespace}/{name}"] = node

    def evict(self, namespace: str, name: str) -> None:
        self.evicted.append(f"{namespace}/{name}")

    def mark_unschedulable(self, namespace: str, name: str, message: str) -> None:
        self.unschedulable[f"{namespace}/{name}"] = message

    def nominate(self, namespace: str, name: str, node: str) -> None:
        pass

    def record_event(self, pod: dict[str, Any], reason: str, message: str, warning: bool = False) -> None:
        self.events.append((pod["metadata"]["name"], reason, message))


def scheduler(api: FakeApi, nodes: list[dict[str, Any]], pods: list[dict[str, Any]],
              groups: list[dict[str, Any]] = (), policy: str = "fifo") -> KubeScheduler:
    sched = KubeScheduler(api, Profile.load(policy))  # type: ignore[arg-type]
    for name, items in (("nodes", nodes), ("pods", pods), ("podgroups", list(groups))):
        sched.informers[name].load(items)
    return sched


def test_a_pod_naming_trimtab_is_bound_and_others_are_left_alone() -> None:
    api = FakeApi()
    pods = [gpu_pod("mine", 2), gpu_pod("theirs", 2, scheduler="default-scheduler")]
    scheduler(api, [gpu_node("n1", 4)], pods).cycle(1e9)
    assert api.bound == {"default/mine": "n1"}
    assert ("mine", "Scheduled", "Successfully assigned default/mine to n1") in api.events


def test_pods_bound_by_others_take_capacity() -> None:
    api = FakeApi()
    pods = [gpu_pod("busy", 3, scheduler="default-scheduler", node="n1"), gpu_pod("mine", 2)]
    scheduler(api, [gpu_node("n1", 4), gpu_node("n2", 4, ready=False)], pods).cycle(1e9)
    assert api.bound == {}
    assert api.unschedulable["default/mine"] == "0/1 nodes are available: 1 have too few free GPUs."


def test_the_reason_is_the_one_trimtab_gives_every_waiting_job() -> None:
    """kube-scheduler's FitError shape, counted by trimtab's filters (why.fit_status): one tainted node, one
    too small."""
    api = FakeApi()
    tainted = gpu_node("n2", 8)
    tainted["spec"]["taints"] = [{"key": "pool", "value": "infra", "effect": "NoSchedule"}]
    scheduler(api, [gpu_node("n1", 1), tainted], [gpu_pod("p", 2)]).cycle(1e9)
    assert api.unschedulable["default/p"] == "0/2 nodes are available: 1 are tainted, 1 have too few free GPUs."
    assert ("p", "FailedScheduling", api.unschedulable["default/p"]) in api.events


def test_an_unschedulable_pod_is_told_why_once() -> None:
    api = FakeApi()
    pod = gpu_pod("picky", 1, nodeSelector={"gpu-type": "v100"})
    sched = scheduler(api, [gpu_node("n1", 8, labels={"gpu-type": "a100"})], [pod])
    sched.cycle(1e9)
    assert api.unschedulable["default/picky"] == "0/1 nodes are available: 1 do not match the node selector."
    failed = [e for e in api.events if e[1] == "FailedScheduling"]
    sched.cycle(1e9 + 1)
    assert [e for e in api.events if e[1] == "FailedScheduling"] == failed  # the same reason is not repeated


def test_a_pod_the_reader_refuses_gets_the_readers_message() -> None:
    api = FakeApi()
    scheduler(api, [gpu_node("n1")], [gpu_pod("orphan", 1, group="never-defined")]).cycle(1e9)
    assert "names PodGroup 'never-defined'" in api.unschedulable["default/orphan"]


def test_a_gang_binds_whole_or_not_at_all() -> None:
    api = FakeApi()
    members = [gpu_pod(f"w{i}", 4, group="train") for i in range(4)]
    sched = scheduler(api, [gpu_node("n1", 8), gpu_node("n2", 8)], members, [pod_group("train", 4)])
    sched.cycle(1e9)
    assert sorted(api.bound) == [f"default/w{i}" for i in range(4)]
    assert sorted(api.bound.values()) == ["n1", "n1", "n2", "n2"]

    api = FakeApi()
    big = [gpu_pod(f"b{i}", 4, group="big") for i in range(5)]  # 20 GPUs on 16: none may be bound
    scheduler(api, [gpu_node("n1", 8), gpu_node("n2", 8)], big, [pod_group("big", 5)]).cycle(1e9)
    assert api.bound == {}
    assert api.unschedulable["default/b0"] == "waiting for room for the gang's 5 members: room for 4 on 2/2 nodes."


def test_a_gang_whose_bind_fails_midway_is_rolled_back() -> None:
    """The members are bound at once: every one bound while w2's binding was refused is evicted."""
    api = FakeApi(refuse=("w2",))
    members = [gpu_pod(f"w{i}", 4, group="train") for i in range(4)]
    sched = scheduler(api, [gpu_node("n1", 8), gpu_node("n2", 8)], members, [pod_group("train", 4)])
    sched.cycle(1e9)
    assert sorted(api.evicted) == ["default/w0", "default/w1", "default/w3"]
    assert sched.counters.gang_rollbacks == 1
    assert any(e[1] == "FailedScheduling" and "rolled back" in e[2] for e in api.events)


def test_a_gangs_members_are_bound_at_once() -> None:
    """Each binding waits until all four are in flight together (a barrier): bound one after another, none
    would be."""
    barrier = threading.Barrier(4, timeout=10)

    class TogetherApi(FakeApi):
        def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
            barrier.wait()
            super().bind(namespace, name, uid, node)

    api = TogetherApi()
    members = [gpu_pod(f"w{i}", 4, group="train") for i in range(4)]
    sched = scheduler(api, [gpu_node("n1", 8), gpu_node("n2", 8)], members, [pod_group("train", 4)])
    sched.cycle(1e9)  # waits for its writes
    assert len(api.bound) == 4 and sched.counters.gang_rollbacks == 0


def test_the_rest_of_a_partly_bound_gang_counts_its_bound_members() -> None:
    api = FakeApi()
    pods = [gpu_pod("w0", 4, group="train", node="n1"), gpu_pod("w1", 4, group="train")]
    scheduler(api, [gpu_node("n1", 8)], pods, [pod_group("train", 2)]).cycle(1e9)
    assert api.bound == {"default/w1": "n1"}


def test_a_bound_pod_is_assumed_until_the_informer_shows_it() -> None:
    api = FakeApi()
    sched = scheduler(api, [gpu_node("n1", 4)], [gpu_pod("a", 4)])
    sched.cycle(1e9)
    sched.informers["pods"].load([*sched.informers["pods"].items(), gpu_pod("b", 4)])
    sched.cycle(1e9 + 1)  # "a" still reads as pending in the informer, yet holds n1's GPUs
    assert api.bound == {"default/a": "n1"}
    assert "default/b" in api.unschedulable


def test_a_binding_still_in_flight_keeps_its_gpus_however_long_the_writes_queue() -> None:
    """A binding queued behind others for longer than ASSUME_S still holds its pod's GPUs (else they would be given
    twice); once it lands, the pod stays assumed for ASSUME_S from then, until the informer shows it bound."""
    import threading

    from trimtab.kube.live import ASSUME_S

    release = threading.Event()

    class SlowApi(FakeApi):
        def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
            release.wait(10)
            super().bind(namespace, name, uid, node)

    api = SlowApi()
    sched = scheduler(api, [gpu_node("n1", 4)], [gpu_pod("a", 4)])
    sched.cycle(1e9, wait=False)
    earlier = gpu_pod("b", 4, created="2026-12-01T09:00:00Z")  # ordered before "a", were "a" pending again
    sched.informers["pods"].load([*sched.informers["pods"].items(), earlier])
    sched.cycle(1e9 + ASSUME_S + 5, wait=False)  # "a" still being bound: n1 is full
    release.set()
    sched.cycle(1e9 + ASSUME_S + 6)  # "a" lands (booked), "b" still waits
    sched.cycle(1e9 + 2 * ASSUME_S + 5)
    assert api.bound == {"default/a": "n1"}
    assert "default/b" in api.unschedulable


def test_metrics_and_health_endpoints_report_the_cycles() -> None:
    import urllib.request

    from trimtab.kube.metrics import KubeMetrics, serve_endpoints

    api = FakeApi()
    sched = scheduler(api, [gpu_node("n1", 4)], [gpu_pod("a", 4), gpu_pod("b", 4)])
    server = serve_endpoints(KubeMetrics(sched), sched, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        sched.cycle(1e9)
        text = urllib.request.urlopen(base + "/metrics").read().decode()
        assert 'scheduler_schedule_attempts_total{profile="fifo",result="scheduled"} 1.0' in text
        assert 'scheduler_schedule_attempts_total{profile="fifo",result="unschedulable"} 1.0' in text
        assert 'trimtab_gpus_total{node="n1"} 4.0' in text
        assert "trimtab_sched_cycle_seconds_count 1.0" in text
        assert urllib.request.urlopen(base + "/healthz").status == 200
        with pytest.raises(urllib.error.HTTPError):  # informers never listed: not ready
            urllib.request.urlopen(base + "/readyz")
    finally:
        server.shutdown()


def test_a_resource_quota_holds_pods_beyond_it() -> None:
    api = FakeApi()
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": "team-a"},
             "spec": {"hard": {"requests.nvidia.com/gpu": "2"}}}
    pods = [gpu_pod("first", 2, namespace="team-a"),
            gpu_pod("second", 2, namespace="team-a", created="2026-12-01T11:00:00Z")]
    sched = scheduler(api, [gpu_node("n1", 8)], pods)
    sched.informers["resourcequotas"].load([quota])
    sched.cycle(1e9)
    assert api.bound == {"team-a/first": "n1"}
    assert api.unschedulable["team-a/second"] == "quota: ResourceQuota team-a/gpus: gpus would be 4 > 2"


def test_a_higher_priority_pod_evicts_and_waits_nominated() -> None:
    api = FakeApi()
    nominated: list[tuple[str, str]] = []
    api.nominate = lambda ns, name, node: nominated.append((name, node))  # type: ignore[method-assign]
    urgent = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "urgent"},
              "value": 1000}
    pods = [gpu_pod("low", 4, scheduler="default-scheduler", node="n1"),
            gpu_pod("high", 4, priorityClassName="urgent")]
    sched = scheduler(api, [gpu_node("n1", 4)], pods, policy="priority")
    sched.informers["priorityclasses"].load([urgent])
    sched.cycle(LATER_S)
    assert api.evicted == ["default/low"]
    assert nominated == [("high", "n1")]
    assert api.bound == {}  # it binds once the victim is gone, in a later cycle
    assert "default/high" not in api.unschedulable


def test_a_gang_member_on_a_node_gone_unreachable_is_lost_once_its_toleration_runs_out() -> None:
    """Kubernetes's taint-based eviction: the node lifecycle controller taints an unreachable node NoExecute, and
    a pod admitted with DefaultTolerationSeconds stays bound for 300 s. The gang is restarted whole when its member
    is lost then, not at the first missed heartbeat."""
    api = FakeApi()
    pods = [gpu_pod("w0", 4, group="train", node="n1"), gpu_pod("w1", 4, group="train", node="n2"),
            gpu_pod("other", 4, node="n1")]
    unreachable = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-12-01T11:00:00Z"}
    sched = scheduler(api, [gpu_node("n1", 8), gpu_node("n2", 8, ready=False, taints=[unreachable])], pods,
                      [pod_group("train", 2)])
    sched.cycle(LATER_S + 299)
    assert api.evicted == []
    sched.cycle(LATER_S + 300)
    assert sorted(api.evicted) == ["default/w0", "default/w1"]
    assert any(e[1] == "GangRestarted" for e in api.events)


@pytest.mark.parametrize("nodes", [
    pytest.param([gpu_node("n1", 8)], id="node deleted"),
    pytest.param([gpu_node("n1", 8), gpu_node("n2", 8, taints=[{"key": "maintenance", "effect": "NoExecute"}])],
                 id="a NoExecute taint the member does not tolerate"),
])
def test_a_gang_member_lost_at_once_restarts_the_gang(nodes: list[dict[str, Any]]) -> None:
    api = FakeApi()
    pods = [gpu_pod("w0", 4, group="train", node="n1"), gpu_pod("w1", 4, group="train", node="n2")]
    sched = scheduler(api, nodes, pods, [pod_group("train", 2)])
    sched.cycle(LATER_S)
    assert sorted(api.evicted) == ["default/w0", "default/w1"]


def test_a_terminating_victim_is_not_evicted_again_and_still_holds_its_gpus() -> None:
    api = FakeApi()
    urgent = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "urgent"},
              "value": 1000}
    low = gpu_pod("low", 4, scheduler="default-scheduler", node="n1")
    low["metadata"]["deletionTimestamp"] = "2026-12-01T10:59:00Z"
    sched = scheduler(api, [gpu_node("n1", 4)], [low, gpu_pod("high", 4, priorityClassName="urgent")],
                      policy="priority")
    sched.informers["priorityclasses"].load([urgent])
    sched.cycle(LATER_S)
    assert api.evicted == []
    assert api.bound == {}


def test_a_volcano_podgroup_is_a_gang_too() -> None:
    api = FakeApi()
    members = [gpu_pod(f"v{i}", 8, annotations={"scheduling.k8s.io/group-name": "vj"}) for i in range(3)]
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "vj", "namespace": "default", "uid": "vpg-1"}, "spec": {"minMember": 3}}
    sched = scheduler(api, [gpu_node("n1", 8), gpu_node("n2", 8)], members)
    sched.informers["volcanopodgroups"].load([group])
    sched.cycle(LATER_S)
    assert api.bound == {}  # 24 GPUs asked on 16: the gang waits whole
    sched.informers["nodes"].load([gpu_node(f"n{i}", 8) for i in range(1, 4)])
    sched.cycle(LATER_S + 1)
    assert sorted(api.bound.values()) == ["n1", "n2", "n3"]


def test_completed_pods_outlive_the_cycle_as_the_history_policies_learn_from() -> None:
    api = FakeApi()
    sched = scheduler(api, [gpu_node("n1", 4)], [gpu_pod("a", 2, node="n1", namespace="team-a")])
    sched.cycle(LATER_S)
    done = gpu_pod("a", 2, node="n1", namespace="team-a")
    done["metadata"]["uid"] = sched.informers["pods"].items()[0]["metadata"]["uid"]
    done["status"] = {"phase": "Succeeded", "startTime": "2026-12-01T10:00:00Z", "containerStatuses": [
        {"name": "main", "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-12-01T10:30:00Z"}}}]}
    sched.informers["pods"].load([done, gpu_pod("b", 1)])
    sched.cycle(LATER_S + 1)
    sched.cycle(LATER_S + 2)  # recorded once
    assert [(job.tenant, job.gpus, run_s) for job, run_s in sched.history] == [("team-a", 2, 1800.0)]


def test_bindings_run_on_while_the_next_cycle_decides() -> None:
    """As kube-scheduler's: a pod being bound holds its node's GPUs in the cycles that run meanwhile."""
    api = FakeApi()
    answer = threading.Event()
    bind = api.bind
    api.bind = lambda *args: (answer.wait(10), bind(*args))[1]  # type: ignore[method-assign]  # a slow server
    sched = scheduler(api, [gpu_node("n1", 4)], [gpu_pod("a", 4)])
    sched.cycle(1e9, wait=False)
    sched.informers["pods"].load([*sched.informers["pods"].items(), gpu_pod("b", 4)])
    report = sched.cycle(1e9 + 1, wait=False)
    assert api.bound == {} and report.binding == 0 and report.unschedulable == 1
    answer.set()
    report = sched.cycle(1e9 + 2)
    assert api.bound == {"default/a": "n1"} and report.scheduled == 1
    assert "default/b" in api.unschedulable


def test_a_binding_whose_outcome_is_unknown_keeps_its_gpus_until_the_informer_tells() -> None:
    """A binding that failed and whose pod could not be read back may have landed: its GPUs stay held (as for a
    binding that landed, until the informer shows the pod or ASSUME_S pass), never given to another pod."""
    from trimtab.kube.api import Unanswered
    from trimtab.kube.live import ASSUME_S

    class LostApi(FakeApi):
        def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
            if name == "a":
                raise Unanswered("binding default/a failed and the pod could not be read back")
            super().bind(namespace, name, uid, node)

    api = LostApi()
    sched = scheduler(api, [gpu_node("n1", 4)], [gpu_pod("a", 4)])
    assert sched.cycle(1e9).errors == 1
    sched.informers["pods"].load([*sched.informers["pods"].items(), gpu_pod("b", 4)])
    sched.cycle(1e9 + 1)
    assert api.bound == {} and "default/b" in api.unschedulable
    report = sched.cycle(1e9 + 2 + ASSUME_S)  # the informer never showed "a" bound: n1 is free again
    assert report.binding == 1


def test_a_gang_whose_binding_failed_is_pending_again_in_the_next_cycle() -> None:
    api = FakeApi(refuse=("w1",))
    members = [gpu_pod(f"w{i}", 4, group="train") for i in range(2)]
    sched = scheduler(api, [gpu_node("n1", 8)], members, [pod_group("train", 2)])
    assert sched.cycle(1e9).errors == 1
    api.refuse = ()
    assert sched.cycle(1e9 + 1).scheduled == 1
    assert sorted(api.bound) == ["default/w0", "default/w1"]


def test_bindings_never_wait_for_events_a_full_event_queue_drops_them() -> None:
    """Events are best effort, as client-go's broadcaster records them: with the Event writer stuck and its queue
    full, every pod is still bound, and the Events beyond the queue are dropped and counted."""
    from trimtab.kube.events import EventRecorder

    api = FakeApi()
    stuck = threading.Event()
    record = api.record_event
    api.record_event = lambda *args: (stuck.wait(10), record(*args))[1]  # type: ignore[method-assign]
    sched = scheduler(api, [gpu_node(f"n{i}", 8) for i in range(4)], [gpu_pod(f"p{i}", 1) for i in range(30)])
    sched.events = EventRecorder(api.record_event, capacity=5)
    report = sched.cycle(1e9, wait=False)
    sched._writes.shutdown(wait=True)  # every binding answered while the Event writer is still stuck
    assert len(api.bound) == 30 and report.binding == 30
    assert 30 - 6 <= sched.events.dropped <= 30 - 5  # the queue holds 5, the writer one more once it took one
    stuck.set()
    sched.events.flush()
    assert 5 <= len(api.events) <= 6


def test_a_node_not_ready_counts_among_the_nodes_down_in_the_reason() -> None:
    """As kube-scheduler counts a NotReady node among all nodes: it stays in the view, down, between cycles."""
    api = FakeApi()
    sched = scheduler(api, [gpu_node("n1", 4), gpu_node("n2", 4)], [gpu_pod("small", 1)])
    sched.cycle(1e9)
    sched.informers["nodes"].load([gpu_node("n1", 4), gpu_node("n2", 4, ready=False)])
    sched.informers["pods"].load([*sched.informers["pods"].items(), gpu_pod("big", 4), gpu_pod("big2", 4)])
    sched.cycle(1e9 + 1)
    assert api.bound == {"default/small": "n1"}
    assert api.unschedulable["default/big"] == "0/2 nodes are available: 1 are down or drained, 1 have too few " \
        "free GPUs."
