"""The walk of a grouped dynamic order (queue.Walk with `lifts` and `moved`): a group's key is asked again once its
count moved, so the walk interleaves groups as their keys rise within one pass, and `rekey` takes in keys that
fell. And the scheduler's use of it: under drf, queues that ask at once share one cycle's GPUs by weight."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from builders import job, nodes
from trimtab.cluster import ClusterState
from trimtab.profile import Profile
from trimtab.queue import Entry, Key, ShapeQueue
from trimtab.scheduler import Scheduler


def _queue_of_two_groups() -> tuple[ShapeQueue, dict[int, str]]:
    queue = ShapeQueue(lambda j: (j.queue,))
    group_of: dict[int, str] = {}
    for i in range(3):
        for q in ("a", "b"):
            shape = queue.add(job(f"{q}{i}", queue=q), (None, float(i)), seq=i * 2 + (q == "b"))
            group_of[shape] = q
    return queue, group_of


def test_a_group_whose_key_rose_is_lifted_again_and_falls_behind() -> None:
    queue, group_of = _queue_of_two_groups()
    share = {"a": 0.0, "b": 0.5}
    moved: Counter[str] = Counter()
    asked: list[str] = []

    def lifts(shape: int, entry: Entry) -> Callable[[Key], Key]:
        asked.append(group_of[shape])
        part = share[group_of[shape]]
        return lambda key: (part, *key[1:])

    walk = queue.walk(set(), lifts, lambda shape: moved[group_of[shape]])
    order = []
    for entry, _shape in walk:
        order.append(entry[2])
        q = entry[2][0]
        share[q] += 0.3  # the job started: its group's key rises
        moved[q] += 1
    # a0 (0.0) then a1 (0.3) before b0 (0.5); a2 (0.6) after b0; then b1 (0.8), b2
    assert order == ["a0", "a1", "b0", "a2", "b1", "b2"]
    assert asked.count("a") >= 3  # asked again after each start of its group, not once per walk


def test_rekey_takes_in_a_key_that_fell() -> None:
    queue, group_of = _queue_of_two_groups()
    share = {"a": 0.0, "b": 0.5}
    moved: Counter[str] = Counter()
    walk = queue.walk(set(), lambda shape, entry: (lambda key, p=share[group_of[shape]]: (p, *key[1:])),
                      lambda shape: moved[group_of[shape]])
    first, _ = next(walk)
    assert first[2] == "a0"
    share["a"], share["b"] = 0.9, 0.0  # a job of b stopped (its key fell) and a's rose
    moved["a"] += 1
    moved["b"] += 1
    walk.rekey()
    assert next(walk)[0][2] == "b0"


def test_queues_asking_at_once_share_one_cycle_by_weight() -> None:
    """Volcano's allocate action orders the queues again after each job it places: 32 one-GPU jobs of queues of
    weight 3 and 1, all waiting, on 16 GPUs: one cycle starts 12 and 4."""
    profile = Profile.load("drf").with_args({"drf": {"weights": {"heavy": 3, "light": 1}}})
    sched = Scheduler(ClusterState(nodes(2, gpus=8)), profile)
    for q in ("heavy", "light"):
        for i in range(16):
            sched.submit(job(f"{q}-{i}", queue=q, tenant=q), 0.0)
    started = Counter(j.queue for j, _ in sched.cycle(0.0).starts)
    assert started == {"heavy": 12, "light": 4}
