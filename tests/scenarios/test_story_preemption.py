"""Story: a production gang arrives on a cluster full of batch work. It evicts exactly enough batch jobs to fit,
never a job that has just started, and with the anti-thrash guards on a stream that makes a naive preemptor
evict the same jobs over and over costs ten times fewer evictions and nothing in the top class's JCT."""

import numpy as np
from stories import manifests, node, priority_class, run, vcjob

from trimtab.model import Job, Resources
from trimtab.profile import Profile
from trimtab.sim.run import SimConfig, simulate


def full_cluster_then_gang(gang_never: bool = False):
    docs = [node("n0"), node("n1"), priority_class("batch", 10), priority_class("production", 1000, gang_never)]
    docs += [vcjob(f"batch{i}", "research", gpus=1, duration="4h", priority="batch") for i in range(16)]
    docs.append(vcjob("train", "prod", replicas=4, gpus=2, duration="1h", submit="30m", priority="production"))
    return manifests(*docs)


def test_a_high_priority_gang_preempts_exactly_enough():
    """16 one-GPU batch jobs fill 16 GPUs; a gang of 4 x 2 GPUs arrives: exactly 8 batch jobs go, all at once,
    the gang runs whole at once, and every evicted job comes back and completes."""
    m = full_cluster_then_gang()
    result = run(m, "tenants")
    jobs = {j["id"]: j for j in result["jobs"]}
    train = jobs["prod/train"]
    assert len(train["runs"]) == 1 and train["runs"][0]["start"] == 1800.0
    assert sum(train["runs"][0]["node_tasks"]) == 4, "the gang runs whole"
    evicted = [j for j in jobs.values() if j["preemptions"]]
    assert len(evicted) == 8 and sum(j["gpus"] for j in evicted) == 8
    assert all(j["runs"][0]["end"] == 1800.0 for j in evicted)
    assert result["summary"]["jobs_completed"] == 17
    assert result["summary"]["tenants"]["research"]["evictions"] == 8
    assert result["summary"]["evicted_gpus_per_needed_gpu"] == 1.0, "not one GPU evicted in vain"


def test_preemption_policy_never_waits_instead():
    """The same gang, its class saying preemptionPolicy: Never: it evicts nobody and starts when batch ends."""
    result = run(full_cluster_then_gang(gang_never=True), "tenants")
    train = next(j for j in result["jobs"] if j["id"] == "prod/train")
    assert result["summary"]["preemptions"] == 0
    assert result["summary"]["evicted_gpus_per_needed_gpu"] is None
    assert train["runs"][0]["start"] == 4 * 3600.0


def thrash_trace(seed: int = 1, hours: float = 30.0, mid_per_h: float = 16.0) -> list[Job]:
    """8 long batch jobs (priority 0); a bursty stream of 30-minute jobs (priority 1) that needs about the other
    8 GPUs, so in every burst it wants the batch jobs' GPUs; and a top-priority 2-GPU job every two hours."""
    rng = np.random.default_rng(seed)
    jobs = [Job(f"low{i}", 0.0, 1, Resources(gpus=1), 30 * 3600.0, priority=0) for i in range(8)]
    t, i = 0.0, 0
    while t < hours * 3600:
        t += float(rng.exponential(3600 / mid_per_h))
        i += 1
        jobs.append(Job(f"mid{i}", t, 1, Resources(gpus=1), 1800.0, priority=1))
    jobs += [Job(f"top{k}", float(t), 2, Resources(gpus=1), 1800.0, priority=2)
             for k, t in enumerate(np.arange(3 * 3600, hours * 3600, 2 * 3600))]
    return jobs


def test_anti_thrash_guards_cut_evictions_tenfold_at_no_cost_to_the_top_class():
    from builders import nodes

    jobs = thrash_trace()
    cluster = nodes(2, 8)
    naive = Profile(name="naive", order=["priority", "fifo"], preempt=["lower-priority"])
    guarded = Profile(name="guarded", order=["priority", "fifo"], preempt=["guarded"])
    config = SimConfig(timing=False)
    runs = {p.name: simulate(cluster, jobs, p, config) for p in (naive, guarded)}

    def top_jct(r):
        return np.mean([j["end"] - j["submit"] for j in r["jobs"] if j["priority"] == 2])

    evictions = {name: r["summary"]["preemptions"] for name, r in runs.items()}
    assert evictions["naive"] >= 10 * evictions["guarded"] > 0, evictions
    assert max(j["preemptions"] for j in runs["naive"]["jobs"]) > 20, "the naive preemptor thrashes"
    assert max(j["preemptions"] for j in runs["guarded"]["jobs"]) <= 2, "no job is evicted beyond its cap"
    assert top_jct(runs["guarded"]) <= top_jct(runs["naive"])
    assert runs["guarded"]["summary"]["jobs_completed"] == len(jobs)
