"""Scheduler stories: queue order, head-of-line blocking, gangs, packing, preemption, wake-ups."""

import pytest

from builders import job, nodes
from trimtab.cluster import ClusterState
from trimtab.model import JobState
from trimtab.plugins import default_registry
from trimtab.policy import Plugin
from trimtab.profile import Profile, Registry
from trimtab.scheduler import Scheduler


def sched(policy="fifo-backfill", n=1, gpus=8, **kw):
    return Scheduler(ClusterState(nodes(n, gpus=gpus)), policy, **kw)


def started(decision):
    return [j.id for j, _ in decision.starts]


def test_strict_fifo_head_blocks_the_queue_but_fifo_backfill_skips_it():
    """Under fifo a job that does not fit holds back the small job behind it; fifo-backfill lets it through."""
    for policy, expect in [("fifo", []), ("fifo-backfill", ["small"])]:
        s = sched(policy)
        s.submit(job("big0", 4), 0)
        assert started(s.cycle(0)) == ["big0"]
        s.submit(job("big1", 8, submit_s=1), 1)
        s.submit(job("small", 2, submit_s=2), 2)
        assert started(s.cycle(2)) == expect, policy


def test_a_gang_is_never_half_placed():
    """A 12-GPU gang with only 10 GPUs free waits whole; it starts whole when 12 are free."""
    s = sched(n=2, gpus=8)
    s.submit(job("a", 3), 0)
    s.submit(job("b", 3), 0)
    assert started(s.cycle(0)) == ["a", "b"]
    s.submit(job("gang", 12, submit_s=1), 1)
    d = s.cycle(1)
    assert d.starts == [] and s.state["gang"] is JobState.PENDING
    assert s.cluster.free_gpus.tolist() == [2, 8]  # a and b were packed on one node
    s.stopped("a", 5, JobState.COMPLETED)
    d = s.cycle(5)
    assert started(d) == ["gang"] and d.starts[0][1].gpus == 12


def test_pack_puts_a_gang_on_the_fewest_nodes_best_fit():
    """A 4-GPU job goes where it leaves the least free; a 12-GPU gang fills a whole node and best-fits the rest."""
    s = sched(n=3, gpus=8)
    for jid, g in [("x", 4), ("y", 2)]:
        s.submit(job(jid, g), 0)
    s.cycle(0)  # x and y both packed on node 0: free [2, 8, 8]
    assert s.cluster.free_gpus.tolist() == [2, 8, 8]
    s.submit(job("z", 2, submit_s=1), 1)
    s.cycle(1)
    assert s.cluster.free_gpus.tolist() == [0, 8, 8]
    s.submit(job("g", 12, submit_s=2), 2)
    (_, a), = s.cycle(2).starts
    assert a.nodes.tolist() == [1, 2] and sorted(a.counts.tolist()) == [4, 8]


def test_las_new_job_preempts_a_demoted_one_but_never_its_own_queue():
    """Under las, a job past 3250 GPU-seconds is in queue 1: a new job (queue 0) takes its GPUs. Two queue-0 jobs
    never preempt each other, whatever their arrival order."""
    s = sched("las", gpus=4)
    s.submit(job("old", 4, duration_s=10_000), 0)
    d = s.cycle(0)
    assert started(d) == ["old"]
    assert d.wake_s == pytest.approx(3250 / 4)  # when `old` crosses into queue 1
    s.submit(job("new", 2, submit_s=100), 100)
    assert s.cycle(100).preemptions == []  # same queue: no preemption
    d = s.cycle(3250 / 4)
    assert d.preemptions == ["old"] and started(d) == ["new"]
    assert s.state["old"] is JobState.PENDING


def test_las_keeps_attained_service_across_runs():
    s = sched("las", gpus=1)
    s.submit(job("a", 1, duration_s=10_000), 0)
    s.cycle(0)
    s.submit(job("b", 1, submit_s=3300, duration_s=10), 3300)
    d = s.cycle(3300)
    assert d.preemptions == ["a"]
    ctx = s.context(3300)
    assert ctx.attained_gpu_s("a") == pytest.approx(3300)
    assert ctx.executed_s("a") == pytest.approx(3300)


def test_priority_preempts_only_strictly_lower_priority_and_only_as_much_as_needed():
    """Equal priority never preempts; a higher one stops the fewest lower jobs, lowest priority first."""
    s = sched("priority", gpus=8)
    s.submit(job("low", 2, priority=0), 0)
    s.submit(job("mid-a", 4, priority=5), 0)
    s.submit(job("mid-b", 2, priority=5), 0)
    s.cycle(0)
    s.submit(job("peer", 2, priority=5, submit_s=1), 1)
    d = s.cycle(1)
    assert d.preemptions == ["low"] and started(d) == ["peer"]
    s.submit(job("peer2", 2, priority=5, submit_s=2), 2)
    assert s.cycle(2).preemptions == []  # only equal-priority jobs run now
    s.submit(job("high", 4, priority=10, submit_s=3), 3)
    d = s.cycle(3)
    assert d.preemptions == ["mid-a"]  # the fewest victims: one job of 4 GPUs, not two of 2
    assert started(d) == ["high"]


def test_srtf_runs_the_shortest_remaining_first():
    s = sched("srtf", gpus=1)
    s.submit(job("long", 1, duration_s=1000), 0)
    s.cycle(0)
    s.submit(job("short", 1, submit_s=10, duration_s=50), 10)
    d = s.cycle(10)
    assert d.preemptions == ["long"] and started(d) == ["short"]


def test_cycle_is_skipped_when_nothing_changed():
    s = sched()
    s.submit(job("a", 8), 0)
    s.cycle(0)
    ran = s.cycles_run
    s.cycle(1)
    assert s.cycles_run == ran


def test_node_down_reports_the_jobs_on_it_and_takes_no_new_work():
    s = sched(n=2, gpus=8)
    s.submit(job("a", 8), 0)
    s.cycle(0)
    assert s.node_down("n000") == ["a"]
    s.stopped("a", 1, JobState.PENDING)
    d = s.cycle(1)
    assert started(d) == ["a"] and d.starts[0][1].nodes.tolist() == [1]


def test_cancel_a_pending_job():
    s = sched(gpus=1)
    s.submit(job("a"), 0)
    s.submit(job("b"), 0)
    s.cycle(0)
    assert s.cancel("b", 1) and s.state["b"] is JobState.CANCELLED
    assert not s.cancel("a", 1)


def test_gpu_model_and_node_selector_filters():
    from trimtab.model import Node, Resources
    cluster = ClusterState([Node("k", Resources(8), gpu_model="k80"),
                            Node("v", Resources(8), gpu_model="v100", labels={"team": "x"})])
    s = Scheduler(cluster, "fifo-backfill")
    s.submit(job("needs-v100", 2, gpu_models=("v100",)), 0)
    s.submit(job("needs-team-x", 2, node_selector={"team": "x"}), 0)
    s.submit(job("needs-a100", 1, gpu_models=("a100",)), 0)
    d = s.cycle(0)
    assert {j.id: a.nodes.tolist() for j, a in d.starts} == {"needs-v100": [1], "needs-team-x": [1]}


def test_a_plugin_from_a_custom_registry():
    """A user's plugin, registered by name, orders the queue (largest job first here)."""

    class Largest(Plugin):
        def order_key(self, job, ctx):
            return -job.gpus

    registry = default_registry()
    registry.register("largest", Largest)
    s = Scheduler(ClusterState(nodes(1, gpus=8)), Profile(name="mine", order=["largest", "fifo"]), registry)
    s.submit(job("one", 1), 0)
    s.submit(job("eight", 8), 0)
    assert started(s.cycle(0)) == ["eight"]
    with pytest.raises(ValueError, match="already registered"):
        registry.register("largest", Largest)


def test_a_profile_lists_a_plugin_only_at_points_it_implements():
    """A plugin listed at a point whose method it does not implement is refused when the profile loads, with the
    profile, the point and the plugin named, not when a cycle first reaches that point."""
    with pytest.raises(ValueError, match=r"profile odd: plugin 'fifo' is listed at filter but does not implement"):
        Scheduler(ClusterState(nodes(1, gpus=8)), Profile(name="odd", filter=["gpu-model", "fifo"]))
    with pytest.raises(ValueError, match=r"profile odd: plugin 'pack' is listed at preempt"):
        Scheduler(ClusterState(nodes(1, gpus=8)), Profile(name="odd", preempt=["pack"]))
    for name in Profile.builtin_names():  # every built-in profile passes
        Scheduler(ClusterState(nodes(1, gpus=8)), name)


def test_the_cycle_context_is_read_only():
    s = Scheduler(ClusterState(nodes(1, gpus=8)), "las")
    with pytest.raises(AttributeError):
        s.context(0.0).releasing = frozenset({"x"})  # type: ignore[misc]


def test_profiles_load_by_name_and_from_yaml_with_clear_errors(tmp_path):
    assert {"fifo", "fifo-backfill", "sjf", "srtf", "las", "priority"} <= set(Profile.builtin_names())
    assert Profile.load("las").preempt == ["lower-order"]
    path = tmp_path / "p.yaml"
    path.write_text("name: mine\norder: [priority, fifo]\nscore: {}\npreempt: [lower-priority]\n")
    assert Profile.load(path).order == ["priority", "fifo"]
    path.write_text("name: bad\nordr: [fifo]\n")
    with pytest.raises(ValueError, match=r"p\.yaml: ordr: Extra inputs"):
        Profile.load(path)
    path.write_text("name: bad\norder: [nosuch]\n")
    with pytest.raises(ValueError, match="unknown plugin 'nosuch'"):
        Scheduler(ClusterState(nodes()), Profile.load(path))
    with pytest.raises(ValueError, match="unknown policy 'nosuch'"):
        Profile.load("nosuch")
    with pytest.raises(ValueError, match="bad arguments"):
        Registry({"fifo": default_registry()._factories["fifo"]}).create("fifo", {"x": 1})


def test_qssf_learns_durations_from_completed_jobs_of_the_same_user():
    """qssf knows nothing at first (arrival order); once alice's jobs are seen to be short and bob's long, a new
    alice job goes before an earlier bob job."""
    s = sched("qssf", gpus=1)
    s.submit(job("b0", 1, user="bob", duration_s=5000), 0)
    s.cycle(0)
    s.stopped("b0", 5000, JobState.COMPLETED, executed_s=5000)
    s.submit(job("a0", 1, submit_s=5000, user="alice", duration_s=10), 5000)
    s.cycle(5000)
    s.stopped("a0", 5010, JobState.COMPLETED, executed_s=10)
    s.submit(job("filler", 1, submit_s=5010, user="carol"), 5010)
    s.cycle(5010)  # carol's job (predicted as everyone's median) holds the GPU
    s.submit(job("b1", 1, submit_s=5020, user="bob"), 5020)
    s.submit(job("a1", 1, submit_s=5030, user="alice"), 5030)
    s.stopped("filler", 5110, JobState.COMPLETED, executed_s=100)
    assert started(s.cycle(5110)) == ["a1"]


def test_adopt_takes_in_a_job_already_running() -> None:
    """A live service restarting books a running job it finds (its GPUs, its key for preemption) and may stop it."""
    import numpy as np

    from trimtab.cluster import Allocation

    sched = Scheduler(ClusterState(nodes(1)), "las")
    running = job("r", gpus=6)
    sched.adopt(running, Allocation(np.array([0]), np.array([6]), running.task), start_s=-50.0)
    assert sched.cluster.free_gpus_total == 2 and sched.state["r"] is JobState.RUNNING
    sched.submit(job("w", gpus=4), 0.0)
    decision = sched.cycle(100_000.0)  # r has crossed the LAS thresholds by now: w preempts it
    assert decision.preemptions == ["r"] and [j.id for j, _ in decision.starts] == ["w"]
    with pytest.raises(ValueError, match="already known"):
        sched.adopt(job("w", gpus=4), Allocation(np.array([0]), np.array([1]), running.task), start_s=0.0)


def _las_run(aging: float | None, min_runtime_s: float = 600.0, max_evictions: int | None = None) -> dict:
    """One 8-GPU node; a long 8-GPU job, then from t=1000 a stream of short 8-GPU jobs that alone keep the node
    busy (one every 100 s, each 150 s)."""
    from trimtab.sim.run import SimConfig, simulate

    profile = Profile.load("las").model_copy(update={"args": {
        "las": {"aging_slowdown": aging},
        "lower-order": {"min_runtime_s": min_runtime_s, "max_evictions": max_evictions}}})
    jobs = [job("long", gpus=8, duration_s=5000.0)]
    jobs += [job(f"s{i}", gpus=8, submit_s=1000.0 + 100 * i, duration_s=150.0) for i in range(300)]
    run = simulate(nodes(1), jobs, profile, SimConfig(checkpoint_s=0.0, restart_s=0.0, timing=False))
    return {r["id"]: r for r in run["jobs"]}


def test_las_aging_bounds_the_slowdown_of_a_job_passed_over() -> None:
    """Under plain LAS the long job, once demoted, waits for the whole stream; with aging it is in queue 0 again
    whenever its time in the system reaches 3x its run time, and runs until it is back under."""
    plain = _las_run(None)
    aged = _las_run(3.0)
    jct = {name: r["long"]["end"] - r["long"]["submit"] for name, r in (("plain", plain), ("aged", aged))}
    assert jct["plain"] > 25_000  # the stream (300 x 150 s from t=1000) goes first
    assert jct["aged"] <= 3.0 * 5000 + 1000  # about the slowdown bound, plus a short job's length
    assert len(aged["long"]["runs"]) > 2  # it was preempted and came back, more than once
    short_wait = [r["runs"][0]["start"] - r["submit"] for k, r in aged.items() if k != "long"]
    assert max(short_wait) < 20_000  # the short jobs still go through


def test_las_aging_is_validated() -> None:
    from trimtab.plugins.order import Las

    with pytest.raises(ValueError, match="above 1"):
        Las(aging_slowdown=1.0)


def test_lower_order_eviction_cap() -> None:
    """With aging the long job comes back again and again and is evicted each time; capped at one eviction, it
    runs to the end once it is back."""
    uncapped = _las_run(3.0)["long"]
    capped = _las_run(3.0, max_evictions=1)["long"]
    assert uncapped["preemptions"] > 1
    assert capped["preemptions"] == 1 and len(capped["runs"]) == 2
    assert capped["end"] < uncapped["end"]


def _drive(scheduler: Scheduler, events: list[tuple[float, object]], grow_at_s: float | None = None
           ) -> list[tuple[float, list[str], list[str], list[tuple[int, ...]]]]:
    """Run `scheduler` through `events` (time, job to submit); jobs end after their duration. With `grow_at_s`,
    the scheduler is replaced there by `with_nodes` with one more node, which goes down at once. Returns each
    cycle's (time, starts, preemptions, nodes of each start)."""
    from builders import nodes as make_nodes

    log, ends, now = [], {}, 0.0
    pending = sorted(events, key=lambda e: e[0])
    while pending or ends:
        now = min([t for t, _ in pending[:1]] + list(ends.values()))
        if grow_at_s is not None and now >= grow_at_s:
            extra = make_nodes(1, gpus=4)[0]
            scheduler = scheduler.with_nodes([type(extra)("joined", extra.capacity)])
            scheduler.node_down("joined")
            grow_at_s = None
        for jid, end_s in sorted(ends.items()):
            if end_s <= now:
                del ends[jid]
                scheduler.stopped(jid, now, JobState.COMPLETED)
        while pending and pending[0][0] <= now:
            scheduler.submit(pending.pop(0)[1], now)  # type: ignore[arg-type]
        decision = scheduler.cycle(now)
        for victim in decision.preemptions:
            ends.pop(victim, None)
        for j, _ in decision.starts:
            ends[j.id] = now + j.duration_s
        if decision.starts or decision.preemptions:
            log.append((now, [j.id for j, _ in decision.starts], list(decision.preemptions),
                        [tuple(int(n) for n in a.nodes) for _, a in decision.starts]))
        if decision.wake_s is not None and not pending and not ends:
            break
    return log


@pytest.mark.parametrize("policy", ["steady", "las", "fifo-backfill", "drf"])
def test_a_scheduler_grown_by_a_node_that_is_down_decides_as_before(policy: str) -> None:
    """`with_nodes` carries every book: grown mid-run by a node that goes down at once, the scheduler makes exactly
    the decisions of the one that was not grown (running jobs, queue order, credit, a failed GPU, a down node)."""
    import random

    rng = random.Random(7)
    events = [(rng.uniform(0, 4000), job(i, gpus=rng.choice([1, 1, 2, 4, 8]), duration_s=rng.uniform(50, 3000),
                                         tenant=rng.choice("ab"))) for i in range(120)]

    def fresh() -> Scheduler:
        s = Scheduler(ClusterState(nodes(3, gpus=8)), policy)
        s.gpu_down("n002")
        s.node_down("n001")
        s.node_up("n001")
        return s

    baseline = _drive(fresh(), events)
    grown = _drive(fresh(), events, grow_at_s=2000.0)
    assert len(baseline) > 50
    assert grown == baseline


def test_a_node_that_joins_takes_a_waiting_job() -> None:
    sched = Scheduler(ClusterState(nodes(1, gpus=8)), "steady")
    sched.submit(job("a", gpus=8), 0.0)
    sched.submit(job("b", gpus=8), 0.0)
    assert started(sched.cycle(0.0)) == ["a"]
    assert started(sched.cycle(1.0)) == []
    sched = sched.with_nodes(nodes(2, gpus=8)[1:])
    decision = sched.cycle(2.0)
    assert started(decision) == ["b"] and [int(n) for n in decision.starts[0][1].nodes] == [1]
    assert sched.cluster.free_gpus.tolist() == [0, 0] and sched.state["a"] is JobState.RUNNING
    sched.stopped("a", 3.0, JobState.COMPLETED)
    assert sched.cluster.free_gpus.tolist() == [8, 0]


@pytest.mark.parametrize("policy", ["drf", "tenants"])
def test_a_grouped_dynamic_order_decides_as_sorting_the_whole_queue_every_cycle(policy: str) -> None:
    """drf's key depends on a job only through its queue (`key_group`), so the scheduler keeps each group sorted
    and computes one key per group and cycle; the decisions are those of sorting every waiting job's key every
    cycle (a drf without `key_group`), with quota queues, priorities, preemption and, in tenants, backfill."""
    import random

    from trimtab.plugins.tenancy import Drf

    class WholeQueueDrf(Drf):
        key_group = Plugin.key_group  # no group: the whole queue is sorted every cycle

    registry = default_registry()
    registry._factories["drf"] = WholeQueueDrf  # the same name, so the profile is unchanged
    rng = random.Random(11)
    queues = [{"name": q, "weight": w} for q, w in (("qa", 1), ("qb", 2), ("qc", 1))]
    events = [(rng.uniform(0, 6000), job(i, gpus=rng.choice([1, 1, 2, 4, 8, 16]), duration_s=rng.uniform(50, 4000),
                                         tenant=rng.choice("xy"), queue=rng.choice(["qa", "qb", "qc"]),
                                         priority=rng.choice([0, 0, 100])))
              for i in range(250)]
    profile = Profile.load(policy).with_args({"quota": {"queues": queues}})
    grouped = Scheduler(ClusterState(nodes(4, gpus=8)), profile)
    whole = Scheduler(ClusterState(nodes(4, gpus=8)), profile, registry)
    assert grouped.framework.group_order and not whole.framework.group_order
    expected = _drive(whole, events)
    assert len(expected) > 100 and any(preempted for _, _, preempted, _ in expected)
    assert _drive(grouped, events) == expected
