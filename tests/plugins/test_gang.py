"""min-member admission: the pods of a gang beyond its minimum wait until the gang has started, then run as ordinary
jobs; composed onto every profile for manifests that hold such gangs, and onto none otherwise."""

import pytest

from builders import job, nodes
from trimtab.cluster import ClusterState
from trimtab.formats.k8s import load_manifests
from trimtab.model import JobState
from trimtab.plugins.gang import MinMember
from trimtab.policy import Cause
from trimtab.profile import Profile, profile_for_manifests
from trimtab.scheduler import Scheduler
from trimtab.sim.run import SimConfig, simulate


def gang_profile(policy: str = "fifo") -> Profile:
    return Profile.load(policy).with_admission("min-member", {})


def scheduler(policy: str = "fifo", gpus: int = 8) -> Scheduler:
    return Scheduler(ClusterState(nodes(1, gpus=gpus)), gang_profile(policy))


def started(decision) -> list[str]:
    return sorted(j.id for j, _ in decision.starts)


def test_a_follower_waits_for_its_gang_saying_why_then_starts_in_the_cycle_its_gang_starts():
    s = scheduler("fifo-backfill", gpus=4)
    s.submit(job("hog", 3, duration_s=60), 0)
    s.cycle(0)
    s.submit(job("g", 2), 1)  # does not fit beside the hog
    s.submit(job("f", 1, after="g"), 1)
    decision = s.cycle(1)
    assert decision.waiting["f"].cause is Cause.GANG and "gang g" in decision.waiting["f"].reason
    s.stopped("hog", 60, JobState.COMPLETED)
    assert started(s.cycle(60)) == ["f", "g"]


def test_a_follower_refused_before_its_gang_starts_in_the_same_cycle_starts_at_the_next_instant():
    """Smallest first: the one-GPU follower is asked before its two-GPU gang; once the gang has started, the
    plugin asks for a cycle at the next instant, where the follower starts."""
    s = scheduler("sjf")
    s.submit(job("g", 2), 0)
    s.submit(job("f", 1, after="g"), 0)
    decision = s.cycle(0)
    assert started(decision) == ["g"] and 0 < decision.wake_s < 1e-300
    assert started(s.cycle(decision.wake_s)) == ["f"]


def test_followers_of_a_waiting_gang_do_not_hold_those_of_a_started_one():
    """Smallest first: a1, b and b1 (one GPU each) are asked in that order; a1 is held, b and b1 start."""
    s = scheduler("sjf", gpus=4)
    s.submit(job("hog", 2), 0)
    s.cycle(0)
    s.submit(job("a", 4, submit_s=1), 1)  # cannot start: its followers wait
    for follower in (job("a1", 1, submit_s=1, after="a"), job("b", 1, submit_s=1),
                     job("b1", 1, submit_s=1, after="b")):
        s.submit(follower, 1)
    decision = s.cycle(1)
    assert started(decision) == ["b", "b1"] and "gang a" in decision.waiting["a1"].reason


def test_once_its_gang_has_started_a_follower_is_an_ordinary_job():
    """The gang ran and ended before the follower was ever asked (the full cluster ended each cycle before it):
    the follower starts all the same."""
    s = scheduler(gpus=2)
    s.submit(job("g", 2), 0)
    s.submit(job("f", 1, after="g"), 0)
    assert started(s.cycle(0)) == ["g"]
    s.stopped("g", 10, JobState.COMPLETED)
    assert started(s.cycle(10)) == ["f"]


def test_a_fresh_instance_counts_the_gangs_the_books_say_have_run():
    s = scheduler()
    s.submit(job("done", 1), 0)
    s.submit(job("ran", 1), 0)
    s.submit(job("runs", 1), 0)
    s.cycle(0)
    s.stopped("done", 5, JobState.COMPLETED)
    s.stopped("ran", 5, JobState.PENDING, enqueue=False)
    plugin = MinMember()
    ctx = s.context(6)
    plugin.open(ctx)
    assert all(plugin.admit(job(f"f-{gang}", 1, after=gang), ctx).success for gang in ("done", "ran", "runs"))
    assert not plugin.admit(job("f-never", 1, after="never"), ctx).success


PODGROUP = """apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: g}
spec: {minMember: MIN}
""" + "".join(f"""---
apiVersion: v1
kind: Pod
metadata: {{name: g-{i}, labels: {{scheduling.x-k8s.io/pod-group: g}}, annotations: {{trimtab.io/duration: 10m}}}}
spec: {{containers: [{{name: c, image: i, resources: {{limits: {{nvidia.com/gpu: 2}}}}}}]}}
""" for i in range(3))


@pytest.mark.parametrize("policy", Profile.builtin_names())
def test_min_member_is_composed_onto_every_profile_only_for_gangs_below_their_pods(policy):
    below, whole = (load_manifests(PODGROUP.replace("MIN", n), text=True) for n in ("2", "3"))
    composed, warnings = profile_for_manifests(Profile.load(policy), below)
    assert composed.admit[0] == "min-member" and warnings == []
    assert "min-member" not in profile_for_manifests(Profile.load(policy), whole)[0].enabled("admit")
    record = simulate(nodes(1, gpus=4), below.jobs, composed, SimConfig(timing=False))
    starts = {r["id"]: r["runs"][0]["start"] for r in record["jobs"]}
    assert starts == {"default/g": 0.0, "default/g-2": 600.0}
