"""Run-time models: a gang's spread gives the documented slowdown; GPU models run job types at their measured speed."""

import numpy as np
import pytest

from builders import job, nodes
from trimtab.cluster import Allocation, ClusterState
from trimtab.model import Resources
from trimtab.sim.speed import (
    DEFAULT_SPREAD_PENALTY,
    CompositeSpeed,
    GpuModelSpeed,
    GpuThroughputs,
    ReferenceSpeed,
    Spread,
    TopologySpeed,
    spread_of,
)

ONE = Resources(gpus=1)


def alloc(node_idx, counts):
    return Allocation(np.array(node_idx), np.array(counts), ONE)


CLUSTER = ClusterState(nodes(4, gpus=8, racks=2))  # n000, n001 in r0; n002, n003 in r1


@pytest.mark.parametrize(("where", "counts", "spread"), [
    ([0], [4], Spread.ISLAND),  # 4 GPUs fit one NVLink island of 4
    ([0], [8], Spread.NODE),  # 8 GPUs span both islands of the node
    ([0, 1], [4, 4], Spread.RACK),
    ([1, 2], [4, 4], Spread.CROSS_RACK),
])
def test_a_known_gang_spread_gives_the_documented_slowdown(where, counts, spread):
    """slowdown = 1 + sensitivity x penalty(spread): a VGG gang (sensitivity 1) pays the full documented penalty,
    a ResNet-18 gang (0.2) a fifth of it."""
    a = alloc(where, counts)
    model = TopologySpeed()
    assert spread_of(a, CLUSTER, 4) is spread
    vgg = job("v", gpus=a.gpus, job_type="VGG16")
    small = job("r", gpus=a.gpus, job_type="ResNet-18 (batch size 32)")
    assert model.slowdown(vgg, a, CLUSTER) == pytest.approx(1.0 + DEFAULT_SPREAD_PENALTY[spread])
    assert model.slowdown(small, a, CLUSTER) == pytest.approx(1.0 + 0.2 * DEFAULT_SPREAD_PENALTY[spread])


def test_penalties_grow_with_spread_and_a_single_gpu_is_never_slowed():
    values = [DEFAULT_SPREAD_PENALTY[s] for s in Spread]
    assert values == sorted(values) and values[0] == 0.0
    assert TopologySpeed().slowdown(job("one", job_type="VGG16"), alloc([0], [1]), CLUSTER) == 1.0
    custom = TopologySpeed(penalty={Spread.ISLAND: 0, Spread.NODE: 0, Spread.RACK: 1, Spread.CROSS_RACK: 3})
    assert custom.slowdown(job("x", gpus=8), alloc([1, 2], [4, 4]), CLUSTER) == pytest.approx(1 + 0.5 * 3)


def test_gpu_model_factors_come_from_the_table_and_a_gang_runs_at_its_slowest_gpu(tmp_path):
    table = tmp_path / "rates.yaml"
    table.write_text("v100: {resnet: 30.0, lm: 10.0}\nk80: {resnet: 10.0, lm: 8.0}\n")
    rates = GpuThroughputs.load(table, reference="v100")
    assert rates.factor("resnet", 1, "k80") == pytest.approx(3.0)
    assert rates.factor("lm", 1, "k80") == pytest.approx(1.25)
    assert rates.factor("unknown", 1, "k80") == pytest.approx((3.0 + 1.25) / 2)  # mean of the known types
    mixed = ClusterState(nodes(1, gpus=4, model="v100") + [
        n.__class__(name="k0", capacity=n.capacity, gpu_model="k80") for n in nodes(1, gpus=4)])
    speed = GpuModelSpeed(rates)
    j = job("j", gpus=8, job_type="resnet")
    assert speed.slowdown(j, alloc([0], [4]), mixed) == pytest.approx(1.0)
    assert speed.slowdown(j, alloc([0, 1], [4, 4]), mixed) == pytest.approx(3.0)
    both = CompositeSpeed([speed, ReferenceSpeed()])
    assert both.slowdown(j, alloc([1], [4]), mixed) == pytest.approx(3.0)


def test_gavel_table_reads_the_alone_throughputs(tmp_path):
    table = tmp_path / "t.json"
    table.write_text('{"v100": {"(\'A\', 1)": {"null": 20.0}}, "k80": {"(\'A\', 1)": {"null": 5.0}},'
                     ' "k80_unconsolidated": {"(\'A\', 1)": {"null": 1.0}}}')
    rates = GpuThroughputs.load(table)
    assert rates.models == ["k80", "v100"]
    assert rates.factor("A", 1, "k80") == pytest.approx(4.0)
