"""Strategies against a changing world: topology packing, score-pack, heterogeneity, history, drain; load swings."""

import numpy as np
import pytest

from builders import job, nodes
from trimtab.cluster import Allocation, ClusterState
from trimtab.model import Resources
from trimtab.plugins.health import Drain, History
from trimtab.plugins.locality import Heterogeneity, ScorePack, Topology
from trimtab.policy import CycleContext, Observations
from trimtab.sim.load import Burst, apply_load


def ctx(cluster, now_s=0.0, pending=(), running=None, observed=None):
    return CycleContext(now_s, cluster, list(pending), running or {}, {}, {}, np.random.default_rng(0),
                        observations=observed or Observations())


def occupy(cluster, node, gpus):
    cluster.allocate(Allocation(np.array([node]), np.array([gpus]), Resources(gpus=1)))


def test_topology_keeps_a_gang_inside_the_rack_that_holds_it_whole():
    """Racks r0 (n000..n002) and r1 (n003..n005). A 16-GPU gang: r0 has 8+4+4 free, r1 has 8+8+0. `pack` takes
    the two emptiest nodes, n000 and n003, across racks; `topology` takes n003 and n004 in r1 (the tightest rack
    that holds it: 16 free, none to spare)."""
    cluster = ClusterState(nodes(6, racks=2))
    occupy(cluster, 1, 4)
    occupy(cluster, 2, 4)
    occupy(cluster, 5, 8)
    gang = job("g", gpus=16)
    c = ctx(cluster)
    fit = cluster.fit_counts(gang.task)
    from trimtab.plugins.place import Pack

    assert Pack().place(gang, c, fit, np.zeros(6)).nodes.tolist() == [0, 3]
    topo = Topology()
    alloc = topo.place(gang, c, fit, topo.score(gang, c))
    assert alloc.nodes.tolist() == [3, 4] and alloc.counts.tolist() == [8, 8]
    # one node that holds a small gang whole is always preferred to a rack
    assert topo.place(job("s", gpus=4), c, fit, np.zeros(6)).nodes.size == 1


def test_topology_spreads_over_the_fewest_racks_when_no_rack_holds_the_gang():
    cluster = ClusterState(nodes(6, racks=3))  # 2 nodes per rack
    occupy(cluster, 0, 6)
    gang = job("g", gpus=24)
    alloc = Topology().place(gang, ctx(cluster), cluster.fit_counts(gang.task), np.zeros(6))
    assert set(cluster.rack_idx[alloc.nodes].tolist()) == {1, 2} and alloc.tasks == 24


def test_score_pack_follows_the_score_but_never_spreads_a_gang_that_one_node_holds():
    cluster = ClusterState(nodes(3))
    occupy(cluster, 1, 4)
    c = ctx(cluster)
    score = np.array([0.0, 100.0, 100.0])
    fit = cluster.fit_counts(Resources(gpus=1))
    assert ScorePack().place(job("a", gpus=2), c, fit, score).nodes.tolist() == [1]  # best fit among the top
    assert ScorePack().place(job("b", gpus=8), c, fit, score).nodes.tolist() == [2]
    spread = ScorePack().place(job("c", gpus=12), c, fit, score)
    assert spread.nodes.tolist() == [1, 2]  # 4 + 8 on the two top-scored nodes


def test_heterogeneity_sends_each_job_where_its_comparative_advantage_is():
    """Two models; job type 'fast' runs 4x faster on v100, 'flat' 1.2x. Both prefer v100 by raw speed; by
    comparative advantage 'flat' scores higher on k80."""
    cluster = ClusterState(nodes(1, model="k80") + [
        n.__class__(name="v0", capacity=n.capacity, gpu_model="v100") for n in nodes(1)])
    speeds = {"fast": np.array([0.25, 1.0]), "flat": np.array([1 / 1.2, 1.0])}  # (k80, v100)
    observed = Observations(gpu_speeds=lambda j: speeds[j.job_type])
    fast, flat = job("a", job_type="fast"), job("b", job_type="flat")
    c = ctx(cluster, pending=[fast, flat], observed=observed)
    plugin = Heterogeneity()
    plugin.open(c)
    assert np.argmax(plugin.score(fast, c)) == 1
    assert np.argmax(plugin.score(flat, c)) == 0
    by_speed = Heterogeneity(speed_weight=1.0)
    by_speed.open(c)
    assert np.argmax(by_speed.score(flat, c)) == 1
    assert (Heterogeneity().score(fast, ctx(cluster, pending=[fast, flat])) == 0).all()  # no throughput table


def test_history_prefers_clean_nodes_and_nodes_where_the_type_ran_fast():
    cluster = ClusterState(nodes(3))
    observed = Observations(failure_tau_s=1000.0)
    observed.node_failed(0, 0.0, 3)
    plugin = History()
    score = plugin.score(job("a"), ctx(cluster, now_s=0.0, observed=observed))
    assert score[0] < score[1] == score[2] == 100.0
    later = plugin.score(job("a"), ctx(cluster, now_s=5000.0, observed=observed))
    assert later[0] > score[0]  # the record decays
    observed.job_ran("bert", np.array([2]), 0.5, 3)
    observed.job_ran("bert", np.array([1]), 1.0, 3)
    typed = plugin.score(job("b", job_type="bert"), ctx(cluster, now_s=1e6, observed=observed))
    assert typed[1] > typed[2]


def test_drain_keeps_new_work_off_a_node_that_failed_often_until_its_record_decays():
    cluster = ClusterState(nodes(4))
    observed = Observations(failure_tau_s=3600.0)
    drain = Drain()  # threshold 1.5, ratio 3 to the mean, at most 10% of the nodes (here 1)
    observed.node_failed(0, 0.0, 4)
    assert drain.filter(job("a"), ctx(cluster, 10.0, observed=observed)).all()
    observed.node_failed(0, 100.0, 4)
    assert drain.filter(job("a"), ctx(cluster, 110.0, observed=observed)).tolist() == [False, True, True, True]
    assert drain.filter(job("a"), ctx(cluster, 3 * 3600.0, observed=observed)).all()  # the record decayed


def test_drain_never_takes_out_more_than_its_share_and_not_when_every_node_fails_alike():
    cluster = ClusterState(nodes(20))
    observed = Observations(failure_tau_s=1e9)
    for node in range(20):
        for _ in range(3):
            observed.node_failed(node, 0.0, 20)
    drain = Drain()
    assert drain.filter(job("a"), ctx(cluster, 1.0, observed=observed)).all()  # a storm everywhere: nobody stands out
    for node in (3, 5, 7):
        for _ in range(20):
            observed.node_failed(node, 0.0, 20)
    observed.node_failed(7, 0.0, 20)
    mask = drain.filter(job("a"), ctx(cluster, 2.0, observed=observed))
    assert np.flatnonzero(~mask).tolist() == [3, 7]  # 10% of 20: the two worst


def test_load_scales_arrivals_and_a_burst_compresses_them():
    jobs = [job(i, submit_s=i * 3600.0) for i in range(6)]
    assert [j.submit_s for j in apply_load(jobs, 2.0)] == [i * 1800.0 for i in range(6)]
    burst = Burst.parse("3x@1h+1h")
    assert (burst.factor, burst.start_s, burst.length_s) == (3.0, 3600.0, 3600.0)
    warped = [j.submit_s for j in apply_load(jobs, 1.0, [burst])]
    # jobs of hours 1..3 arrive in hour 1; later ones 2 h earlier
    assert warped == [0.0, 3600.0, 4800.0, 6000.0, 7200.0, 10800.0]
    assert apply_load(jobs) == jobs
    for bad in ("3x10h+1h", "0x@1h+1h"):
        with pytest.raises(ValueError, match="burst"):
            Burst.parse(bad)


def test_score_pack_with_a_packing_slack_follows_the_score_only_among_nearly_best_fitting_nodes():
    """Free GPUs 2, 3 and 8; the score prefers the emptiest node. With a slack of 1 GPU the job goes to the
    better-scored of the two tight nodes, never to the empty one."""
    cluster = ClusterState(nodes(3))
    occupy(cluster, 0, 6)
    occupy(cluster, 1, 5)
    c = ctx(cluster)
    fit = cluster.fit_counts(Resources(gpus=1))
    score = np.array([0.0, 50.0, 100.0])
    assert ScorePack().place(job("a", gpus=2), c, fit, score).nodes.tolist() == [2]
    assert ScorePack(pack_slack_gpus=1).place(job("a", gpus=2), c, fit, score).nodes.tolist() == [1]
