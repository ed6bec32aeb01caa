"""Tenancy plugins one by one: taints and tolerations, node affinity, quota admission, explicit reservations,
and the guards of preemption."""

import pytest

from builders import job, nodes
from trimtab.cluster import ClusterState
from trimtab.model import JobState, Node, Outcome, Resources, Taint
from trimtab.plugins.filters import NodeAffinity, Taints, tolerates
from trimtab.policy import Cause
from trimtab.profile import Profile
from trimtab.scheduler import Scheduler
from trimtab.sim.run import SimConfig, simulate

TAINT = Taint("dedicated", "gpu", "NoSchedule")


@pytest.mark.parametrize(("toleration", "ok"), [
    (("dedicated", "Equal", "gpu", "NoSchedule"), True),
    (("dedicated", "Equal", "cpu", "NoSchedule"), False),
    (("dedicated", "Exists", "", ""), True),
    (("", "Exists", "", ""), True),
    (("dedicated", "Equal", "gpu", "NoExecute"), False),
    (("other", "Exists", "", "NoSchedule"), False),
])
def test_tolerations_match_taints_as_kubernetes_does(toleration, ok):
    assert tolerates((toleration,), TAINT) is ok


def cluster() -> ClusterState:
    return ClusterState([
        Node("plain", Resources(8), labels={"zone": "a", "rank": "3"}),
        Node("tainted", Resources(8), labels={"zone": "b", "rank": "7"}, taints=(TAINT,)),
        Node("soft", Resources(8), labels={"zone": "c"}, taints=(Taint("x", "", "PreferNoSchedule"),)),
    ])


def test_untolerated_hard_taints_exclude_a_node_and_soft_ones_do_not():
    scheduler = Scheduler(cluster(), "tenants")
    ctx = scheduler.context(0.0)
    assert Taints().filter(job(1), ctx).tolist() == [True, False, True]
    tolerant = job(2, tolerations=(("dedicated", "Exists", "", ""),))
    assert Taints().filter(tolerant, ctx).tolist() == [True, True, True]


@pytest.mark.parametrize(("affinity", "mask"), [
    ((((("zone", "In", ("a", "b")),),)), [True, True, False]),
    ((((("zone", "NotIn", ("a",)),),)), [False, True, True]),
    ((((("rank", "Exists", ()),),)), [True, True, False]),
    ((((("rank", "DoesNotExist", ()),),)), [False, False, True]),
    ((((("rank", "Gt", ("5",)),),)), [False, True, False]),
    ((((("rank", "Lt", ("5",)),),)), [True, False, False]),
    ((((("zone", "In", ("a",)),), (("zone", "In", ("c",)),))), [True, False, True]),  # terms are ORed
    ((((("zone", "In", ("a", "b")), ("rank", "Gt", ("5",))),)), [False, True, False]),  # expressions ANDed
    ((((("field:metadata.name", "In", ("soft",)),),)), [False, False, True]),
])
def test_required_node_affinity(affinity, mask):
    ctx = Scheduler(cluster(), "tenants").context(0.0)
    assert NodeAffinity().filter(job(1, node_affinity=affinity), ctx).tolist() == mask


def test_quota_holds_an_over_quota_job_with_a_reason():
    profile = Profile.load("quota-fifo").with_args({"quota": {"quotas": [{"namespace": "a", "name": "q", "gpus": 4}]}})
    scheduler = Scheduler(ClusterState(nodes(2, 8)), profile)
    scheduler.submit(job("a1", 3, tenant="a"), 0.0)
    scheduler.submit(job("a2", 2, tenant="a"), 0.0)
    scheduler.submit(job("b1", 8, tenant="b"), 0.0)
    decision = scheduler.cycle(0.0)
    assert sorted(j.id for j, _ in decision.starts) == ["a1", "b1"]
    status = decision.waiting["a2"]
    assert status.plugin == "quota" and "gpus would be 5 > 4" in status.reason and status.reason.startswith("quota: ")
    assert status.cause is Cause.QUOTA


def test_queue_capability_caps_a_queue_even_with_idle_gpus():
    profile = Profile.load("quota-fifo").with_args(
        {"quota": {"queues": [{"name": "q1", "weight": 1, "capability_gpus": 4}]}})
    jobs = [job(i, 2, queue="q1") for i in range(4)]
    result = simulate(nodes(1, 8), jobs, profile, SimConfig(timing=False))
    starts = sorted(j["runs"][0]["start"] for j in result["jobs"])
    assert starts == [0.0, 0.0, 100.0, 100.0]


def test_nodes_reserved_for_a_tenant_serve_only_that_tenant_in_the_window():
    profile = Profile.load("tenants").with_args({"reservation": {"reservations": [
        {"name": "r", "gpus": 0, "start_s": 0.0, "end_s": 1000.0, "tenant": "vip", "nodes": ["n001"]}]}})
    jobs = [job("other", 16, tenant="x", duration_s=50.0), job("vip", 8, submit_s=10.0, tenant="vip")]
    result = {j["id"]: j for j in simulate(nodes(2, 8), jobs, profile, SimConfig(timing=False))["jobs"]}
    assert result["other"]["runs"][0]["start"] == 1000.0, "the whole cluster only once the window is over"
    assert result["vip"]["runs"][0]["start"] == 10.0


def test_a_gpu_count_reservation_holds_free_gpus_back_from_others():
    profile = Profile.load("tenants").with_args({"reservation": {"reservations": [
        {"name": "r", "gpus": 4, "start_s": 0.0, "end_s": 500.0, "tenant": "vip"}]}})
    jobs = [job("x1", 4, tenant="x"), job("x2", 2, tenant="x"), job("v", 4, submit_s=5.0, tenant="vip")]
    result = {j["id"]: j for j in simulate(nodes(1, 8), jobs, profile, SimConfig(timing=False))["jobs"]}
    assert result["x1"]["runs"][0]["start"] == 0.0
    assert result["x2"]["runs"][0]["start"] == 100.0, "2 more would leave fewer than the 4 reserved"
    assert result["v"]["runs"][0]["start"] == 5.0


def test_quota_blocked_time_is_booked_per_tenant():
    from trimtab.metrics import Recorder
    from trimtab.policy import Code, Status

    recorder = Recorder(ClusterState(nodes(1, 8)))
    a, b = job("a", 2, tenant="x"), job("b", 2, tenant="y")
    for j in (a, b):
        recorder.submitted(j, 0.0)
    over = Status(Code.WAIT, "over", "quota", Cause.QUOTA)
    recorder.waiting(0.0, {"a": over, "b": Status(Code.WAIT, "does not fit", cause=Cause.FIT)})
    recorder.waiting(10.0, {})  # a cycle that did not look at a: still held
    recorder.waiting(20.0, {"b": over})
    sched = Scheduler(ClusterState(nodes(1, 8)), "fifo")
    for j, t in ((a, 50.0), (b, 80.0)):
        sched.submit(j, t)
        (alloc,) = [al for jj, al in sched.cycle(t).starts]
        recorder.run_started(j, alloc, t, t, 1.0)
        recorder.run_ended(j.id, t + 1, Outcome.COMPLETED, 100.0, requeued=False)
        recorder.ended(j.id, t + 1, JobState.COMPLETED)
    tenants = recorder.result(timing=False)["summary"]["tenants"]
    assert (tenants["x"]["quota_blocked_s"], tenants["y"]["quota_blocked_s"]) == (50.0, 60.0)


@pytest.mark.parametrize(("guards", "evictions"), [
    ({"min_runtime_s": None, "max_evictions_per_job": None, "budget_per_hour": None}, 3),
    ({"min_runtime_s": 600.0, "max_evictions_per_job": None, "budget_per_hour": None}, 2),  # spared at 1200 s
    ({"min_runtime_s": None, "max_evictions_per_job": 1, "budget_per_hour": None}, 1),
    ({"min_runtime_s": None, "max_evictions_per_job": None, "budget_per_hour": 1.0}, 2),  # again after an hour
])
def test_each_guard_alone_limits_repeated_evictions(guards, evictions):
    """A low job fills an 8-GPU node; three high jobs needing the whole node arrive 500 s apart from 700 s. The
    low job restarts after each and runs 400 s before the next arrives."""
    profile = Profile(name="g", order=["priority", "fifo"], preempt=[{"guarded": guards}])
    jobs = [job("low", 8, duration_s=5000.0)] + [job(f"hi{i}", 8, submit_s=700.0 + 500 * i, duration_s=100.0,
                                                      priority=5) for i in range(3)]
    result = {j["id"]: j for j in simulate(nodes(1, 8), jobs, profile, SimConfig(timing=False))["jobs"]}
    assert result["low"]["preemptions"] == evictions


@pytest.mark.parametrize(("max_delay_s", "start_s", "nodes_used"), [
    (0.0, 0.0, ["n000", "n001"]), (100.0, 100.0, ["n000", "n001"]), (600.0, 300.0, ["n000"])])
def test_delay_waits_a_bounded_time_for_a_gang_on_one_node(max_delay_s, start_s, nodes_used):
    """Two 4-GPU nodes with one GPU free on each (busy until 300 s and 500 s); a 2-task gang could spread now, or
    wait for one node at 300 s, but never longer than its delay bound."""
    profile = Profile(name="d", admit=[{"delay": {"max_delay_s": max_delay_s}}], order=["fifo"])
    jobs = [job("a", 3, duration_s=300.0), job("b", 3, duration_s=500.0), job("gang", 2, submit_s=0.0)]
    cl = nodes(2, 4)
    result = {j["id"]: j for j in simulate(cl, jobs, profile, SimConfig(timing=False))["jobs"]}
    run = result["gang"]["runs"][0]
    assert (run["start"], run["nodes"]) == (start_s, nodes_used)


def test_a_gang_that_times_out_lets_its_reservation_go_for_a_while():
    """A 16-GPU gang behind 1-GPU jobs reserves at once; with gang_timeout_s it releases the GPUs after that long
    and short jobs behind it may take them; without, they wait for it."""
    jobs = [job(f"s{i}", 1, duration_s=3600.0 + 60 * i) for i in range(8)]
    jobs.append(job("gang", 16, submit_s=10.0, duration_s=600.0))
    jobs += [job(f"late{i}", 1, submit_s=1000.0 + i, duration_s=7200.0) for i in range(4)]

    def late_start(timeout):
        p = Profile(name="r", order=["fifo"], backfill=[{"reserve": {"min_gpus": 8, "gang_timeout_s": timeout}}])
        result = {j["id"]: j for j in simulate(nodes(2, 8), jobs, p, SimConfig(timing=False))["jobs"]}
        return result["late0"]["runs"][0]["start"], result["gang"]["runs"][0]["start"]

    late, gang = late_start(None)
    assert late > gang, "the reservation holds the free GPUs for the gang"
    late, gang = late_start(900.0)
    assert late == 1000.0 < gang, "after the timeout the late jobs start at once"


def test_a_gang_timeout_wakes_the_cycle_when_the_reservation_goes():
    """Jobs that arrive while the reservation holds start when it times out (the gang reserved at 10 s, held 900
    s), though nothing else happens then: the plugin asks for a wake-up."""
    jobs = [job(f"s{i}", 1, duration_s=3600.0 + 60 * i) for i in range(8)]
    jobs += [job("gang", 16, submit_s=10.0, duration_s=600.0), job("late", 1, submit_s=100.0, duration_s=7200.0)]
    p = Profile(name="r", order=["fifo"], backfill=[{"reserve": {"min_gpus": 8, "gang_timeout_s": 900.0}}])
    result = {j["id"]: j for j in simulate(nodes(2, 8), jobs, p, SimConfig(timing=False))["jobs"]}
    assert result["late"]["runs"][0]["start"] == 910.0


def test_drf_with_a_half_life_remembers_who_used_the_cluster_recently():
    """Queue a ran alone for an hour, then both queues hold nothing. Plain drf ties them; with a half-life of an
    hour a's past use puts b first, and the memory fades: a day later the decayed usage is nearly gone."""
    from trimtab.plugins.tenancy import Drf

    scheduler = Scheduler(ClusterState(nodes(1, 8)), "fifo")
    scheduler.submit(job("a-run", 8, tenant="a"), 0.0)
    scheduler.cycle(0.0)
    plain, decayed = Drf(), Drf(half_life_s=3600.0)
    ja, jb = job("a2", 1, tenant="a"), job("b2", 1, tenant="b")

    def keys(plugin, now_s):
        ctx = scheduler.context(now_s)
        ctx.usage.sync(scheduler.running)
        plugin.open(ctx)
        return plugin.order_key(ja, ctx), plugin.order_key(jb, ctx)

    for plugin in (plain, decayed):
        keys(plugin, 0.0)
        keys(plugin, 3600.0)
    scheduler.stopped("a-run", 3600.0, JobState.COMPLETED)
    a_plain, b_plain = keys(plain, 3601.0)
    a_dec, b_dec = keys(decayed, 3601.0)
    assert a_plain == b_plain, "no one holds anything now"
    assert a_dec > b_dec, "a used the cluster in the last hour"
    a_late, _ = keys(decayed, 3601.0 + 86400.0)
    assert a_late[0] < a_dec[0] / 1000


def test_drf_orders_by_dominant_share_over_weight():
    from trimtab.plugins.tenancy import Drf

    scheduler = Scheduler(ClusterState(nodes(1, 8)), "fifo")
    for jid, gpus, queue in (("x", 4, "heavy"), ("y", 2, "light")):
        scheduler.submit(job(jid, gpus, queue=queue), 0.0)
    scheduler.cycle(0.0)
    ctx = scheduler.context(0.0)
    ctx.usage.sync(scheduler.running)
    drf = Drf(weights={"heavy": 4.0})
    drf.open(ctx)
    key = {q: drf.order_key(job("p", 1, queue=q), ctx)[0] for q in ("heavy", "light", "idle")}
    assert key == {"heavy": 0.5 / 4, "light": 0.25, "idle": 0.0}


def test_drf_orders_waiting_jobs_by_the_shares_of_this_cycle():
    """qa's first job started in the last cycle; in this one qa holds half the node and qb nothing, so qb's job
    goes before qa's second one, though qa's came first (keys computed after drf opened the cycle, not with the
    shares of the cycle before)."""
    scheduler = Scheduler(ClusterState(nodes(1, 8)), "drf")
    scheduler.submit(job("a1", 4, queue="qa"), 0.0)
    assert [j.id for j, _ in scheduler.cycle(0.0).starts] == ["a1"]
    scheduler.submit(job("a2", 4, submit_s=1.0, queue="qa"), 1.0)
    scheduler.submit(job("b1", 4, submit_s=1.5, queue="qb"), 1.5)
    assert [j.id for j, _ in scheduler.cycle(2.0).starts] == ["b1"]


def test_a_job_that_tolerates_a_taint_is_not_held_back_by_one_that_does_not():
    cl = ClusterState([Node("plain", Resources(1)), Node("tainted", Resources(1), taints=(TAINT,))])
    scheduler = Scheduler(cl, "quota-fifo")
    scheduler.submit(job("filler", 1), 0.0)
    scheduler.cycle(0.0)
    scheduler.submit(job("a", 1, submit_s=1.0), 1.0)
    scheduler.submit(job("b", 1, submit_s=2.0, tolerations=(("dedicated", "Exists", "", ""),)), 2.0)
    assert [j.id for j, _ in scheduler.cycle(2.0).starts] == ["b"]


def test_consolidate_moves_a_few_small_jobs_to_free_a_whole_node_for_a_gang():
    """Two 8-GPU nodes, each with 4 GPUs free between long one-GPU jobs: a task of 8 GPUs fits nowhere though 8
    GPUs are free. consolidate moves the 4 cheapest jobs off one node; they restart a second later in the other
    node's holes. Without it the gang waits for a node to drain."""
    from trimtab.model import Job

    low = [job(f"l{i}", 1, duration_s=100.0 if i % 8 < 4 else 9000.0) for i in range(16)]
    gang = Job("gang", 200.0, 1, Resources(gpus=8), 600.0, priority=5)
    runs = {}
    for name, preempt in (("moves", ["consolidate"]), ("waits", [])):
        profile = Profile(name=name, order=["priority", "fifo"], preempt=preempt)
        result = simulate(nodes(2, 8), [*low, gang], profile, SimConfig(timing=False))
        runs[name] = {j["id"]: j for j in result["jobs"]}
    assert runs["waits"]["gang"]["runs"][0]["start"] == 9000.0
    moves = runs["moves"]
    assert moves["gang"]["runs"][0]["start"] == 200.0
    moved = [j for j in moves.values() if j["preemptions"]]
    assert len(moved) == 4
    assert all(j["runs"][1]["start"] == 201.0 and j["runs"][1]["nodes"] != moves["gang"]["runs"][0]["nodes"]
               for j in moved)


def test_unused_reserved_capacity_is_booked():
    """4 GPUs reserved for vip over [0, 1000): vip runs 2 GPUs from 100 s to 300 s, so 4x100 + 2x200 + 4x700
    GPU-seconds of the reservation go unused."""
    profile = Profile.load("tenants").with_args({"reservation": {"reservations": [
        {"name": "r", "gpus": 4, "start_s": 0.0, "end_s": 1000.0, "tenant": "vip"}]}})
    scheduler = Scheduler(ClusterState(nodes(1, 8)), profile)
    assert scheduler.cycle(0.0).wake_s == 1000.0
    scheduler.submit(job("v", 2, submit_s=100.0, tenant="vip"), 100.0)
    assert [j.id for j, _ in scheduler.cycle(100.0).starts] == ["v"]
    scheduler.stopped("v", 300.0, JobState.COMPLETED)
    scheduler.cycle(300.0)
    scheduler.cycle(1000.0)
    plugin = next(p for p in scheduler.framework.plugins if p.name == "reservation")
    assert plugin.unused_gpu_s == {"r": 4 * 100 + 2 * 200 + 4 * 700}
