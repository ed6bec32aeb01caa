"""The running jobs' order keys the cycle keeps (queue.RunningKeys): after every cycle, whatever parts it kept or
asked again, each running job's key is the one the profile's order gives now, and `ranked` is them sorted (a
cycle with nothing to do returns before the keys are brought up to date: those are not checked)."""

import random

import pytest

from builders import job, nodes
from trimtab.cluster import ClusterState
from trimtab.model import JobState
from trimtab.scheduler import Scheduler


@pytest.mark.parametrize("policy", ["srtf", "drf", "tenants", "las"])
def test_kept_keys_equal_the_keys_asked_afresh_after_every_cycle(policy):
    rng = random.Random(7)
    s = Scheduler(ClusterState(nodes(3, gpus=4)), policy)
    fw = s.framework
    checked = 0
    for t in range(120):
        now_s = float(t * 50)
        for k in range(rng.randint(0, 3)):
            s.submit(job(f"j{t}-{k}", rng.choice([1, 1, 2, 4]), submit_s=now_s, duration_s=rng.uniform(50, 900),
                         tenant=rng.choice(["a", "b", "c"]), queue=rng.choice(["q1", "q2", "q3"])), now_s)
        for jid, run in list(s.running.items()):
            if now_s - run.start_s >= run.job.duration_s:
                s.stopped(jid, now_s, JobState.COMPLETED)
        ran = s.cycles_run
        s.cycle(now_s)
        if s.cycles_run == ran:
            continue
        ctx = s._cycle_context(now_s)
        fresh = {jid: fw.order_key(run.job, ctx) for jid, run in s.running.items()}
        assert fw.running_keys.keys == fresh
        assert fw.running_keys.ranked == sorted((key, s.running[jid].start_s, jid) for jid, key in fresh.items())
        checked += len(fresh)
    assert checked > 200  # many running jobs were checked, through starts, stops and preemptions
