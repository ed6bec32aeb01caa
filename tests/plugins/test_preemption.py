"""Preemption stories: the one victim search frees GPUs where the preemptor can use them. With free GPUs scattered,
a job evicts jobs on a node where the freed GPUs and the free ones make room, never more than it needs; a gang
evicts until it places whole, or evicts nobody."""

import pytest

from builders import job, nodes
from trimtab.cluster import ClusterState
from trimtab.model import Job, Resources
from trimtab.profile import Profile
from trimtab.scheduler import Scheduler
from trimtab.sim.run import SimConfig, simulate

HOUR_S = 3600.0


def started(decision):
    return [j.id for j, _ in decision.starts]


def evicted_gpus(s: Scheduler, decision) -> int:
    return sum(s.jobs[v].gpus for v in decision.preemptions)


def busy_cluster(profile: str | Profile, busy: int = 30, n: int = 4, gpus: int = 8) -> Scheduler:
    """`busy` one-GPU jobs of priority 0 start at 0 s and run 3 h on n x gpus GPUs (packed: the free GPUs are all
    on the last node). The first and the last by name go first, onto the first node: whichever way a plugin breaks
    ties by name, its worst-ranked victim is not where the free GPUs are."""
    s = Scheduler(ClusterState(nodes(n, gpus=gpus)), profile)
    for i in [0, busy - 1, *range(1, busy - 1)]:
        s.submit(job(f"low{i:02d}", 1, duration_s=3 * HOUR_S, tenant="batch", queue="batch"), 0.0)
    assert len(s.cycle(0.0).starts) == busy
    return s


def urgent(tasks: int, gpus_per_task: int, at_s: float, duration_s: float = HOUR_S) -> Job:
    return Job("urgent", at_s, tasks, Resources(gpus=gpus_per_task), duration_s, tenant="prod", queue="prod",
               priority=1000)


# Preemptive built-in profiles and when the urgent job outranks the busy ones there: by priority at 30 min; under
# las and srtf by order (at 1 h the busy jobs have left LAS queue 0, and have 2 h left against the job's 1 h).
PRIORITY_PROFILES = [("priority", 1800.0), ("tenants", 1800.0), ("steady", 1800.0)]
ORDER_PROFILES = [("las", HOUR_S), ("srtf", HOUR_S)]


@pytest.mark.parametrize(("profile", "at_s"), PRIORITY_PROFILES + ORDER_PROFILES)
@pytest.mark.parametrize(("tasks", "per_task"), [(1, 4), (4, 4)], ids=["one-task-of-4", "gang-of-4x4"])
def test_scattered_free_gpus_do_not_stop_a_preemption(profile, at_s, tasks, per_task):
    """30 of 32 GPUs busy, the 2 free ones on one node: an outranking job of one 4-GPU task (or a gang of 4 x 4)
    starts at once. The task evicts exactly the 2 GPUs it lacks, on the node with 2 free. The gang takes victims
    worst first wherever they are, then gives back every one it can: at most 16 GPUs (whole task slots of the
    worst-ranked jobs' nodes), 14 where the worst-ranked jobs sit beside the free GPUs."""
    s = busy_cluster(profile)
    s.submit(urgent(tasks, per_task, at_s), at_s)
    d = s.cycle(at_s)
    assert started(d) == ["urgent"], profile
    if tasks == 1:
        assert evicted_gpus(s, d) == 2, (profile, d.preemptions)
    else:
        assert evicted_gpus(s, d) <= 16, (profile, d.preemptions)


@pytest.mark.parametrize("profile", ["priority", "tenants", "steady"])
def test_the_task_goes_where_its_victims_are_cheapest(profile):
    """Two nodes could take the 4-GPU task: one by evicting four one-GPU jobs, one by evicting a single 4-GPU job
    of the same priority. Kubernetes's node choice (fewest victims at equal priority) takes the one job."""
    s = Scheduler(ClusterState(nodes(2, gpus=8)), profile)
    s.submit(job("wide", 4, duration_s=3 * HOUR_S, tenant="batch"), 0.0)
    s.submit(job("wide-b", 4, duration_s=3 * HOUR_S, tenant="batch"), 0.0)
    for i in range(8):
        s.submit(job(f"one{i}", 1, duration_s=3 * HOUR_S, tenant="batch"), 0.0)
    s.cycle(0.0)
    s.submit(urgent(1, 4, 1800.0), 1800.0)
    d = s.cycle(1800.0)
    assert started(d) == ["urgent"] and len(d.preemptions) == 1 and evicted_gpus(s, d) == 4, d.preemptions


@pytest.mark.parametrize("profile", ["priority", "steady"])
def test_victims_are_given_back_when_not_needed(profile):
    """Worst first takes a one-GPU job, then a 4-GPU one; the 4-GPU job alone makes room, so the one-GPU job is
    given back (reprieve)."""
    s = Scheduler(ClusterState(nodes(1, gpus=8)), profile)
    s.submit(job("four", 4, duration_s=3 * HOUR_S, priority=1), 0.0)
    s.submit(job("one", 1, duration_s=3 * HOUR_S, priority=0), 0.0)
    s.submit(job("three", 3, duration_s=3 * HOUR_S, priority=2), 0.0)
    s.cycle(0.0)
    s.submit(urgent(1, 4, 1800.0), 1800.0)
    d = s.cycle(1800.0)
    assert started(d) == ["urgent"] and d.preemptions == ["four"]


def test_a_gang_victim_is_evicted_whole_and_counted_whole():
    """A low-priority gang of 2 x 4 GPUs spans two nodes; a 4-GPU task that evicts it frees both halves, and the
    eviction counts its 8 GPUs."""
    s = Scheduler(ClusterState(nodes(2, gpus=8)), "priority")
    for i in range(8):
        s.submit(job(f"p{i}", 1, duration_s=3 * HOUR_S, priority=5), 0.0)
    s.cycle(0.0)  # node 0 full of priority 5
    s.submit(Job("gang", 1.0, 2, Resources(gpus=4), 3 * HOUR_S, priority=0), 1.0)
    s.cycle(1.0)  # the gang fills node 1
    s.submit(urgent(1, 4, 1800.0), 1800.0)
    d = s.cycle(1800.0)
    assert started(d) == ["urgent"] and d.preemptions == ["gang"]
    assert d.evictions[0].evicted_gpus == 8 and d.evictions[0].needed_gpus == 4


def test_a_gang_that_cannot_place_evicts_nobody():
    """The gang needs 3 x 8 GPUs and only two nodes hold lower-priority work: no eviction, and it waits."""
    s = Scheduler(ClusterState(nodes(3, gpus=8)), "priority")
    for i in range(16):
        s.submit(job(f"low{i}", 1, duration_s=3 * HOUR_S, priority=0), 0.0)
    for i in range(8):
        s.submit(job(f"high{i}", 1, duration_s=3 * HOUR_S, priority=2000), 0.0)
    s.cycle(0.0)
    s.submit(urgent(3, 8, 1800.0), 1800.0)
    d = s.cycle(1800.0)
    assert d.preemptions == [] and d.starts == []


def test_quota_reclaim_frees_gpus_on_one_node():
    """bronze borrowed 30 of 32 GPUs (deserved: 16); gold, within its share, reclaims for a 4-GPU task from the
    node with 2 free, evicting 2."""
    profile = Profile.load("drf").with_args(
        {"quota": {"queues": [{"name": "batch", "weight": 1}, {"name": "prod", "weight": 1}]}})
    s = busy_cluster(profile)
    s.submit(urgent(1, 4, 1800.0), 1800.0)
    d = s.cycle(1800.0)
    assert started(d) == ["urgent"] and evicted_gpus(s, d) == 2, d.preemptions


def test_freed_gpus_are_held_for_the_preemptor():
    """The preemptor starts in the cycle that evicts for it; a one-GPU job behind it in the queue does not take
    the freed GPUs (the queue's later jobs see them taken)."""
    s = busy_cluster("priority")
    s.submit(urgent(1, 4, 1800.0), 1800.0)
    s.submit(job("late", 1, submit_s=1800.0, priority=1000), 1800.0)
    d = s.cycle(1800.0)
    assert started(d)[0] == "urgent"
    alloc = d.starts[0][1]
    assert alloc.gpus == 4 and s.cluster.free_gpus.sum() == 0


def test_the_run_reports_gpus_evicted_per_gpu_needed():
    """A 4-GPU job needs 2 GPUs beyond the 2 free ones on its node; evicting two one-GPU jobs costs exactly that
    (1.0). Evicting a 4-GPU job (the newest, so the worst-ranked) for the same 2 GPUs shows as 2.0."""
    busy = [job(f"low{i:02d}", 1, duration_s=3 * HOUR_S) for i in range(30)]
    exact = simulate(nodes(4, gpus=8), [*busy, urgent(1, 4, 1800.0)], "priority", SimConfig(timing=False))
    assert exact["summary"]["preemptions"] == 2 and exact["summary"]["evicted_gpus_per_needed_gpu"] == 1.0
    wide = [job("wide", 4, submit_s=1.0, duration_s=3 * HOUR_S),
            *[job(f"one{i}", 1, duration_s=3 * HOUR_S) for i in range(2)]]
    over = simulate(nodes(1, gpus=8), [*wide, urgent(1, 4, 1800.0)], "priority", SimConfig(timing=False))
    assert over["summary"]["evicted_gpus_per_needed_gpu"] == 2.0


def test_shares_are_freed_on_one_gpu():
    """Four half-GPU jobs fill two GPUs; a job asking 0.8 of a GPU evicts the two halves of one GPU, not one half
    of each (shares are released tentatively: which GPU frees what decides)."""
    s = Scheduler(ClusterState(nodes(1, gpus=2)), "priority")
    for i in range(4):
        s.submit(Job(f"half{i}", float(i), 1, Resources(gpu_milli=500), 3 * HOUR_S), float(i))
        s.cycle(float(i))
    s.submit(Job("urgent", 1800.0, 1, Resources(gpu_milli=800), HOUR_S, priority=1000), 1800.0)
    d = s.cycle(1800.0)
    assert started(d) == ["urgent"] and len(d.preemptions) == 2


@pytest.mark.parametrize(("window_s", "short_start_s", "long_kept_s"), [(None, 4000.0, 3600.0), (60.0, 4200.0, 4200.0)])
def test_checkpoint_aware_victims_are_evicted_just_after_a_checkpoint(window_s, short_start_s, long_kept_s):
    """One 8-GPU node, checkpoints every 600 s: a short job in LAS queue 0 arrives at 4,000 s, 400 s after the
    running long job's last checkpoint. Without a window it evicts the long job at once (400 s of progress lost);
    with a 60-s window the scheduler waits for the long job's next checkpoint (4,200 s) and evicts it then, losing
    nothing."""
    profile = Profile.load("las").model_copy(update={"args": {
        "lower-order": {"min_runtime_s": 0, "checkpoint_window_s": window_s}}})
    jobs = [job("long", 8, duration_s=20_000.0), job("short", 8, submit_s=4000.0, duration_s=100.0)]
    runs = {r["id"]: r for r in simulate(nodes(1), jobs, profile,
                                         SimConfig(checkpoint_s=600.0, restart_s=30.0, timing=False))["jobs"]}
    assert runs["short"]["runs"][0]["start"] == short_start_s
    first = runs["long"]["runs"][0]
    assert first["outcome"] == "preempted" and first["useful_s"] == long_kept_s


def test_the_checkpoint_window_is_validated():
    from trimtab.plugins.preempt import LowerOrder

    with pytest.raises(ValueError, match="checkpoint_window_s"):
        LowerOrder(checkpoint_window_s=900.0)


def test_a_higher_priority_class_does_not_wait_for_the_checkpoint():
    """The same long job, and at 4,000 s an 8-GPU job of a higher priority class: it evicts at once, 400 s after
    the long job's checkpoint, window or not."""
    profile = Profile.load("steady").model_copy(update={"args": {
        "lower-order": {"min_runtime_s": 0, "key_depth": 2, "checkpoint_window_s": 60.0}}})
    jobs = [job("long", 8, duration_s=20_000.0), job("urgent", 8, submit_s=4000.0, duration_s=100.0, priority=10)]
    runs = {r["id"]: r for r in simulate(nodes(1), jobs, profile,
                                         SimConfig(checkpoint_s=600.0, restart_s=30.0, timing=False))["jobs"]}
    assert runs["urgent"]["runs"][0]["start"] == 4000.0 and runs["long"]["runs"][0]["useful_s"] == 3600.0


def test_a_job_waits_for_checkpoints_at_most_one_interval():
    """Two 4-GPU jobs whose checkpoints are 300 s apart (started at 0 s and 300 s) fill the node; an 8-GPU job
    needs both, whose windows never meet: it waits one checkpoint interval, then evicts both at once."""
    profile = Profile.load("las").model_copy(update={"args": {
        "lower-order": {"min_runtime_s": 0, "checkpoint_window_s": 60.0}}})
    jobs = [job("a", 4, duration_s=20_000.0), job("b", 4, submit_s=300.0, duration_s=20_000.0),
            job("gang", 8, submit_s=4000.0, duration_s=100.0)]
    config = SimConfig(checkpoint_s=600.0, restart_s=30.0, timing=False)
    runs = {r["id"]: r for r in simulate(nodes(1), jobs, profile, config)["jobs"]}
    assert runs["gang"]["runs"][0]["start"] == 4600.0
    assert {runs[v]["runs"][0]["outcome"] for v in "ab"} == {"preempted"}
