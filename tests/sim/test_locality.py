"""Data locality: LRU eviction, shared bandwidth, prefetching, the locality score, dataset assignment."""

import numpy as np
import pytest

from builders import job, nodes
from trimtab.cluster import ClusterState
from trimtab.sim.data import DataConfig, DataModel, NetMeter, assign_datasets
from trimtab.sim.run import SimConfig, simulate


def model(n=4, racks=1, **kw):
    cluster = ClusterState(nodes(n, racks=racks))
    return DataModel(cluster, DataConfig(**kw))


def test_the_cache_evicts_the_least_recently_used_dataset_first():
    data = model(cache_gb=300.0)
    for name in ("a", "b", "c"):
        data.delay_s(name, 100.0, [0], 0.0)
    data.delay_s("a", 100.0, [0], 1000.0)  # a is used again: b is now the least recently used
    data.delay_s("d", 100.0, [0], 2000.0)
    assert list(data.caches[0]) == ["c", "a", "d"]
    data.delay_s("e", 150.0, [0], 3000.0)  # needs two evictions: c, then a
    assert list(data.caches[0]) == ["d", "e"]
    assert data.cached_mask("a")[0] == np.False_ and data.cached_mask("e")[0] == np.True_
    assert data.used_gb[0] == 250.0


def test_a_cached_dataset_costs_nothing_and_one_being_loaded_costs_what_is_left():
    data = model(node_link_gb_s=1.0, uplink_gb_s=10.0)
    assert data.delay_s("a", 100.0, [0], 0.0) == pytest.approx(100.0)
    assert data.delay_s("a", 100.0, [0], 40.0) == pytest.approx(60.0)
    assert data.delay_s("a", 100.0, [0], 500.0) == 0.0
    assert data.delay_s("", 0.0, [0], 0.0) == 0.0


def test_loads_share_the_rack_uplink_and_the_node_link():
    """Uplink 2 GB/s, node links 1.5 GB/s. Alone a load gets its node link's 1.5; a second load in the same rack
    (another node) gets half the uplink, 1; a third on a node already loading gets half that node's link, 0.75,
    and a third of the uplink, 0.67: the tighter, 0.67. A load in another rack is not slowed."""
    data = model(n=4, racks=2, node_link_gb_s=1.5, uplink_gb_s=2.0)
    assert data.delay_s("a", 150.0, [0], 0.0) == pytest.approx(100.0)
    assert data.rate_gb_s(1, 0.0) == pytest.approx(1.0)
    assert data.delay_s("b", 100.0, [1], 0.0) == pytest.approx(100.0)
    assert data.rate_gb_s(0, 0.0) == pytest.approx(2.0 / 3.0)
    assert data.rate_gb_s(2, 0.0) == pytest.approx(1.5)  # rack r1: nothing loading there
    assert data.rate_gb_s(0, 150.0) == pytest.approx(1.5)  # both loads are over


def test_a_gang_waits_for_its_slowest_node_and_a_prefetch_never_slows_a_running_load():
    data = model(n=2, node_link_gb_s=1.0, uplink_gb_s=100.0)
    data.delay_s("a", 50.0, [0], 0.0)
    assert data.delay_s("a", 50.0, [0, 1], 10.0) == pytest.approx(50.0)  # node 1 loads it all, node 0 has 40 s left
    data.prefetch("b", 10.0, 0, 20.0)  # node 0 is still loading: no prefetch
    assert "b" not in data.caches[0] and data.prefetches == 0
    data.prefetch("b", 10.0, 0, 100.0)
    assert "b" in data.caches[0] and data.prefetches == 1


def test_net_meter_caps_each_link_at_full_use():
    meter = NetMeter()
    meter.change(0.0, 0, 0.75)
    meter.change(0.0, 0, 0.75)  # offered 150%: counts as 100%
    meter.change(10.0, 0, -1.5)
    meter.change(0.0, 1, 0.5)
    meter.change(20.0, 1, -0.5)
    assert meter.mean(0.0, 20.0, 2) == pytest.approx((10 * 1.0 + 20 * 0.5) / 40)


def test_datasets_are_assigned_by_job_not_by_order():
    jobs = [job(i) for i in range(50)] + [job("own", dataset="imagenet", dataset_gb=150.0)]
    config = DataConfig(seed=3)
    forward = {j.id: (j.dataset, j.dataset_gb) for j in assign_datasets(jobs, config)}
    backward = {j.id: (j.dataset, j.dataset_gb) for j in assign_datasets(jobs[::-1], config)}
    assert forward == backward and forward["own"] == ("imagenet", 150.0)
    assert len({d for d, _ in forward.values()}) > 5
    sizes = [g for _, g in forward.values()]
    assert min(sizes) >= config.dataset_min_gb and max(sizes) <= 600.0


def test_loading_delays_progress_and_a_second_run_on_the_same_node_finds_the_data_cached():
    jobs = [job("a", duration_s=100.0, dataset="d", dataset_gb=125.0),
            job("b", submit_s=500.0, duration_s=100.0, dataset="d", dataset_gb=125.0)]
    result = simulate(nodes(1), jobs, "fifo", SimConfig(timing=False, speed="data,node-link-gb-s=1.25"))
    a, b = result["jobs"]
    assert a["runs"][0]["progress_from"] == pytest.approx(100.0) and a["end"] == pytest.approx(200.0)
    assert b["end"] == pytest.approx(600.0)
    assert result["data"]["loads"] == 1 and result["summary"]["net_util"] > 0


def test_the_locality_score_sends_a_job_to_the_node_that_caches_its_dataset():
    """Two idle nodes; a job's dataset is on node n001 (an earlier job ran there): score-pack + locality picks
    n001, plain pack picks n000 (lowest index)."""
    from trimtab.profile import Profile

    first = job("first", gpus=8, duration_s=100.0, dataset="d", dataset_gb=100.0)
    blocker = job("blocker", gpus=8, duration_s=300.0, dataset="small", dataset_gb=1.0)
    later = job("later", gpus=1, submit_s=500.0, duration_s=100.0, dataset="d", dataset_gb=100.0)
    config = SimConfig(timing=False, speed="data")
    local = Profile(name="local", order=["fifo"], score={"locality": 1.0}, place="score-pack")
    for profile, node in (("fifo", "n000"), (local, "n001")):
        result = simulate(nodes(2), [blocker, first, later], profile, config)
        runs = {j["id"]: j["runs"] for j in result["jobs"]}
        assert runs["first"][0]["nodes"] == ["n001"]
        assert runs["later"][0]["nodes"] == [node], profile
