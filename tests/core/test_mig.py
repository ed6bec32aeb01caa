"""MIG: slices are placed only at the start slots NVIDIA allows for their profile, never overlap, and a GPU is
repartitioned (free slices of other profiles dropped) only when it is idle."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trimtab.cluster import GPU_MILLI, Allocation, ClusterState
from trimtab.mig import MIG_GEOMETRY, mig_model
from trimtab.model import Node, Resources


def a100(gpus: int = 1, model: str = "A100-SXM4-40GB") -> ClusterState:
    return ClusterState([Node("m", Resources(gpus, 64_000, 1 << 20), gpu_model=model),
                         Node("t", Resources(2, 64_000, 1 << 20), gpu_model="T4")])


def mig(state: ClusterState, profile: str, gpu=None, start=None) -> Allocation:
    alloc = Allocation(np.array([0]), np.array([1]), Resources(mig=profile),
                       gpu_idx=None if gpu is None else np.array([gpu]),
                       mig_start=None if start is None else np.array([start]))
    state.allocate(alloc)
    return alloc


@pytest.mark.parametrize(("model", "profile", "per_gpu"), [
    ("A100-SXM4-40GB", "1g.5gb", 7), ("A100-SXM4-40GB", "1g.10gb", 4), ("A100-SXM4-40GB", "2g.10gb", 3),
    ("A100-SXM4-40GB", "3g.20gb", 2), ("A100-SXM4-40GB", "4g.20gb", 1), ("A100-SXM4-40GB", "7g.40gb", 1),
    ("A100-80GB", "1g.10gb", 7), ("A100-80GB", "3g.40gb", 2), ("H100-80GB", "7g.80gb", 1),
    ("H100", "2g.20gb", 3), ("A100-SXM4-40GB", "3g.40gb", 0), ("T4", "1g.10gb", 0),
])
def test_slices_per_gpu_follow_the_profile_table(model, profile, per_gpu):
    state = ClusterState([Node("m", Resources(2, 64_000, 1 << 20), gpu_model=model)])
    assert state.fit_counts(Resources(mig=profile)).tolist() == [2 * per_gpu]


def test_model_names_map_to_geometries():
    assert mig_model("NVIDIA-A100-SXM4-80GB") == "A100-80GB"
    assert mig_model("a100") == "A100-40GB"
    assert mig_model("H100-PCIE") == "H100-80GB"
    assert mig_model("V100M32") is None


def test_seven_small_slices_fill_a_gpu_and_an_eighth_does_not_fit():
    state = a100()
    starts = [int(mig(state, "1g.5gb").mig_start[0]) for _ in range(7)]
    assert starts == [0, 1, 2, 3, 4, 5, 6]
    assert state.fit_counts(Resources(mig="1g.5gb")).tolist() == [0, 0]
    with pytest.raises(ValueError, match="no room for MIG"):
        mig(state, "1g.5gb")


def test_4g_and_3g_share_a_gpu_but_two_4g_do_not():
    state = a100()
    assert int(mig(state, "4g.20gb").mig_start[0]) == 0
    assert state.fit_counts(Resources(mig="4g.20gb")).tolist() == [0, 0]
    assert int(mig(state, "3g.20gb").mig_start[0]) == 4
    assert state.mig_busy[0, 0] == 0xFF


def test_a_slice_only_at_an_allowed_start():
    state = a100()
    with pytest.raises(ValueError):
        mig(state, "2g.10gb", gpu=0, start=1)  # 2g.10gb starts at 0, 2 or 4
    assert int(mig(state, "2g.10gb", gpu=0, start=2).mig_start[0]) == 2


def test_a_busy_gpu_is_not_repartitioned_an_idle_one_is():
    """A free 1g slice next to a busy one blocks a 2g slice over it; once the GPU is idle it is repartitioned."""
    state = a100()
    first = mig(state, "1g.5gb")
    second = mig(state, "1g.5gb")
    state.release(first)  # slot 0 stays carved as a free 1g.5gb slice, slot 1 busy
    assert state.mig_carved[(0, 0)] == {0: "1g.5gb", 1: "1g.5gb"}
    assert int(mig(state, "2g.10gb").mig_start[0]) == 2  # not 0: that would reshape the GPU while it is busy
    with pytest.raises(ValueError):
        mig(state, "7g.40gb")
    assert int(mig(state, "1g.5gb").mig_start[0]) == 0  # the free slice of that profile is reused
    state.release(second)


def test_whole_and_shared_work_stay_off_a_gpu_with_a_busy_slice():
    state = a100()
    slice_ = mig(state, "3g.20gb")
    assert state.free_gpus.tolist() == [0, 2]
    assert state.fit_counts(Resources(gpus=1)).tolist() == [0, 2]
    assert state.fit_counts(Resources(gpu_milli=100)).tolist() == [0, 20]
    state.release(slice_)
    assert state.free_gpus.tolist() == [1, 2]
    whole = Allocation(np.array([0]), np.array([1]), Resources(gpus=1))
    state.allocate(whole)  # the idle GPU is repartitioned: its free slices go
    assert (0, 0) not in state.mig_carved
    assert state.fit_counts(Resources(mig="1g.5gb")).tolist() == [0, 0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(sorted(MIG_GEOMETRY["A100-40GB"]))), max_size=30))
def test_slices_never_overlap_and_start_where_allowed(steps):
    state = a100(gpus=2)
    geometry = MIG_GEOMETRY["A100-40GB"]
    held: list[Allocation] = []
    for release, profile in steps:
        if release and held:
            state.release(held.pop(0))
            continue
        fits = state.fit_counts(Resources(mig=profile))[0] > 0
        try:
            held.append(mig(state, profile))
            assert fits
        except ValueError:
            assert not fits
        masks = np.zeros(2, dtype=np.int64)
        for alloc in held:
            gpu, start = int(alloc.gpu_idx[0]), int(alloc.mig_start[0])
            p = geometry[alloc.task.mig]
            assert start in p.starts
            assert not masks[gpu] & p.mask(start), "two busy slices overlap"
            masks[gpu] |= p.mask(start)
        assert state.mig_busy[0, :2].tolist() == masks.tolist()
        assert [int(v) for v in state.gpu_free_milli[0, :2]] == [GPU_MILLI if m == 0 else 0 for m in masks]
