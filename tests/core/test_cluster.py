"""ClusterState and Txn: capacity is never exceeded, and a transaction is all or nothing."""

import numpy as np
import pytest

from builders import nodes
from trimtab.cluster import Allocation, ClusterState
from trimtab.model import Node, Resources


def alloc(node_idx, counts, gpus=1):
    return Allocation(np.array(node_idx), np.array(counts), Resources(gpus=gpus))


def test_fit_counts_take_every_resource_and_health_into_account():
    state = ClusterState([Node("a", Resources(8, 16_000, 1024)), Node("b", Resources(4, 64_000, 4096))])
    assert state.fit_counts(Resources(gpus=2, cpu_milli=4_000, mem_mib=512)).tolist() == [2, 2]
    state.set_health(1, False)
    assert state.fit_counts(Resources(gpus=1)).tolist() == [8, 0]
    assert state.free_gpus_total == 8


def test_allocation_beyond_capacity_is_refused_and_changes_nothing():
    """Over-allocating a node raises and leaves the free counts as they were."""
    state = ClusterState(nodes(2, gpus=4))
    state.allocate(alloc([0], [3]))
    with pytest.raises(ValueError, match="over-allocate node n000"):
        state.allocate(alloc([1, 0], [1, 2]))
    assert state.free_gpus.tolist() == [1, 4]
    assert state.free_gpus_total == 5


def test_release_more_than_allocated_is_refused():
    state = ClusterState(nodes(1, gpus=4))
    with pytest.raises(ValueError, match="release more"):
        state.release(alloc([0], [1]))


def test_txn_discards_everything_unless_committed():
    """A gang placed in a Txn that is not committed leaves no trace: never a half-placed gang."""
    state = ClusterState(nodes(3, gpus=8))
    with state.txn() as txn:
        txn.allocate(alloc([0, 1], [8, 8]))
        assert state.free_gpus_total == 8
    assert state.free_gpus.tolist() == [8, 8, 8]
    with state.txn() as txn:
        txn.allocate(alloc([2], [4]))
        txn.commit()
    assert state.free_gpus.tolist() == [8, 8, 4]
    with pytest.raises(RuntimeError):
        txn.allocate(alloc([0], [1]))


def test_txn_undoes_releases_too():
    state = ClusterState(nodes(1, gpus=8))
    state.allocate(alloc([0], [6]))
    with state.txn() as txn:
        txn.release(alloc([0], [6]))
        txn.allocate(alloc([0], [8]))
        txn.discard()
    assert state.free_gpus.tolist() == [2]


def test_txn_holds_idle_gpus_out_of_reach_until_it_ends():
    """Reserved GPUs are held in a Txn around a placement attempt: fit counts see them taken, nothing else
    changes, and the hold ends with the transaction, committed or not."""
    state = ClusterState(nodes(2, gpus=8))
    whole, share = Resources(gpus=1), Resources(gpu_milli=500)
    for end in ("discard", "commit"):
        with state.txn() as txn:
            txn.hold_gpus(np.array([6, 0]))
            assert state.fit_counts(whole).tolist() == [2, 8]
            assert state.fit_counts(share).tolist() == [16, 16] and state.free_gpus_total == 16
            getattr(txn, end)()
        assert state.free_gpus.tolist() == [8, 8]


def test_duplicate_node_names_are_an_error():
    with pytest.raises(ValueError, match="duplicate node names: a"):
        ClusterState([Node("a", Resources(1)), Node("a", Resources(1))])


def test_label_and_model_masks():
    state = ClusterState([Node("a", Resources(1), gpu_model="v100", labels={"zone": "x"}),
                          Node("b", Resources(1), gpu_model="k80", labels={"zone": "y"})])
    assert state.label_mask("zone", "y").tolist() == [False, True]
    assert state.model_mask(["v100"]).tolist() == [True, False]


def fresh_fit(state, task):
    """The fit counted from scratch, as if no answer had been kept."""
    state.fits.__init__(state)
    return state.fit_counts(task)


def test_kept_fit_counts_follow_every_change():
    """Fit counts kept between calls (recounted on the changed nodes only) equal a count from scratch after any
    sequence of allocations, releases (some refused), holds, health changes and MIG slices; and when the change log
    has been cut short (a reader too far behind), the full count takes over."""
    rng = np.random.default_rng(3)
    cluster = [Node(f"n{i}", Resources(4 + 4 * (i % 2), 16_000 * (1 + i % 3), 8_192), gpu_model=("a100", "v100")[i % 2])
               for i in range(12)]
    state = ClusterState(cluster)
    asks = [Resources(gpus=1, cpu_milli=2_000, mem_mib=1_024), Resources(gpus=2, cpu_milli=6_000),
            Resources(gpu_milli=300, cpu_milli=1_000), Resources(gpu_milli=700, mem_mib=3_000),
            Resources(cpu_milli=5_000, mem_mib=2_048), Resources(mig="1g.5gb"), Resources(mig="3g.20gb")]
    held: list[Allocation] = []
    for step in range(400):
        task = asks[int(rng.integers(len(asks)))]
        action = rng.random()
        if action < 0.5:
            node = int(rng.integers(len(cluster)))
            try:
                a = Allocation(np.array([node]), np.array([int(rng.integers(1, 3))]), task)
                state.allocate(a)
                held.append(a)
            except ValueError:
                pass
        elif action < 0.8 and held:
            state.release(held.pop(int(rng.integers(len(held)))))
        elif action < 0.9:
            state.set_health(int(rng.integers(len(cluster))), bool(rng.random() < 0.7))
        else:
            with state.txn() as txn:
                txn.hold_gpus(np.minimum(state.free_gpus, rng.integers(0, 3, len(cluster))))
                kept = state.fit_counts(task)
                assert kept.tolist() == fresh_fit(state, task).tolist()
        kept = [state.fit_counts(ask).tolist() for ask in asks]
        if step % 7 == 0:  # now and then from scratch, so that later answers are recounts of many steps
            assert kept == [fresh_fit(state, ask).tolist() for ask in asks], step
    log = state.fits.log
    log.add([0] * 70_000)  # past the log's length: it is cut, and readers behind it count every node
    assert log.since(0) is None
    assert [state.fit_counts(ask).tolist() for ask in asks] == [fresh_fit(state, ask).tolist() for ask in asks]
