"""The one victim search of every preempt plugin: from the running jobs a plugin may stop, ranked worst first, the
fewest whose resources, freed where the job may run, let it start: node-aware for one task, gang-aware for many."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from itertools import chain, compress, groupby

import numpy as np

from trimtab.model import Job
from trimtab.policy import CycleContext

Ranked = Iterable[tuple[Hashable, str]]
"""(level, job id) of the running jobs a plugin may stop, worst first; levels never fall along the walk (a level
is what Kubernetes calls a victim's priority: the plugin's own, e.g. a priority or an order key)."""

_REQUESTS = (("gpus", "free_gpus"), ("cpu_milli", "free_cpu_milli"), ("mem_mib", "free_mem_mib"))


def fewest_victims(job: Job, ctx: CycleContext, ranked: Ranked) -> list[str] | None:
    """Victims for `job` among `ranked` (eligible running jobs, worst first), or None when stopping them cannot
    make the job fit on the nodes its filters allow (or it fits already: nothing to stop). Called by the preempt
    plugins, which keep what is theirs (who is eligible, in what rank: priority, order key; guards such as a
    minimum run time or an eviction cap as filters, budgets on the answer); the cycle then releases the answer in
    a Txn and starts the job only if it fits.

    One task: per node, victims there worst first until the task fits, then each given back, most important first,
    while it still fits (kube-scheduler's reprieve); among such nodes the one whose most important victim has the
    lowest level, then the smallest sum of levels (counted as ranks: 0 for the worst level), the fewest victims, the
    latest start of its most important victims (the earliest among them: the least work lost), the lowest index. A
    gang (many tasks): victims worst first until all its tasks fit, then each given back, most important first,
    whose return leaves the gang placeable; None if it never fits. Inside a level, a gang takes first the victims on
    the nodes with the most room already free, so the freed GPUs join the free ones (fewer victims). A victim
    spanning several nodes frees them all and is stopped whole. Whole-GPU, CPU and memory requests are counted per
    node as `ClusterState.fit_counts` counts them; GPU shares and MIG slices are released tentatively in a Txn,
    discarded before returning."""
    cluster, task = ctx.cluster, job.task
    walk = iter(ranked)  # taken lazily: most searches end after the first few victims
    seen: list[tuple[Hashable, str]] = []
    short_gpus = job.gpus - cluster.free_gpus_total  # missing cluster-wide, whatever the nodes
    if task.gpus and short_gpus > 0:
        held_gpus = 0
        for entry in walk:
            seen.append(entry)
            held_gpus += ctx.running[entry[1]].alloc.gpus
            if held_gpus >= short_gpus:
                break
        else:
            return None  # too few GPUs in all (the common failure, found without looking at nodes)
    victims = chain(seen, walk)
    allowed = cluster.healthy if ctx.node_mask is None else cluster.healthy & ctx.node_mask(job)
    fit: np.ndarray | None = None
    if job.tasks > 1 or short_gpus <= 0 or not task.gpus:  # else one task that no node has the GPUs for
        fit = np.minimum(np.where(allowed, cluster.fit_counts(task), 0), job.tasks)
        if int(fit.sum()) >= job.tasks:
            return None  # it fits without victims: what holds it back is not room
    if task.gpu_milli or task.mig:
        return _in_txn(job, ctx, victims, allowed)
    room = _Room(job, ctx, allowed)
    if job.tasks == 1:
        return _one_task(job, ctx, victims, room)
    assert fit is not None
    return _gang(job, victims, room, fit.tolist())


class _Room:
    """Per node, what would be free in the resources a job asks for (whole GPUs, CPU, memory) once the victims
    counted so far stop, and how many of its tasks fit in an amount; what each victim holds on the nodes the job
    may use. For one task the cluster's arrays are read node by node as victims touch them (such a search touches
    a few nodes: copying whole arrays would cost more than the search on a large cluster); a gang, which reads
    every node's fit anyway, reads them as lists (cheaper to index)."""

    def __init__(self, job: Job, ctx: CycleContext, allowed: np.ndarray) -> None:
        task, cluster = job.task, ctx.cluster
        asked = [(req, free) for req, free in _REQUESTS if getattr(task, req)]
        self.requests = [req for req, _ in asked]
        self.need = [getattr(task, req) for req, _ in asked]
        arrays = [getattr(cluster, free) for _, free in asked]
        self.free: list[np.ndarray] | list[list[int]] = arrays
        self.allowed: np.ndarray | list[bool] = allowed
        if job.tasks > 1:
            self.free, self.allowed = [array.tolist() for array in arrays], allowed.tolist()
        self.running = ctx.running
        self._have: dict[int, list[int]] = {}

    def held(self, jid: str) -> list[tuple[int, list[int]]]:
        """(node, amounts) that victim `jid` holds on each node the job may use."""
        alloc, allowed = self.running[jid].alloc, self.allowed
        per_task = [getattr(alloc.task, req) for req in self.requests]
        return [(node, [count * amount for amount in per_task])
                for node, count in zip(alloc.nodes.tolist(), alloc.counts.tolist(), strict=True)
                if allowed[node]]

    def have(self, node: int) -> list[int]:
        """Free on `node` once the victims counted so far stop, per resource asked: the search adds to it what a
        victim holds there, and takes it back when it gives the victim back."""
        have = self._have.get(node)
        if have is None:
            have = self._have[node] = [int(free[node]) for free in self.free]
        return have

    def tasks(self, have: list[int]) -> int:
        """Tasks that fit in `have` (per resource asked)."""
        return min([amount // need for amount, need in zip(have, self.need, strict=True)])


def _one_task(job: Job, ctx: CycleContext, walk: Ranked, room: _Room) -> list[str] | None:
    """A single task: the best node's victims (see `fewest_victims`); victims of a level above the first node
    found are never looked at (no node needing them can win)."""
    taken: dict[int, list[tuple[int, str, list[int]]]] = {}  # node -> (rank of level, victim, held there)
    found: dict[int, list[tuple[int, str, list[int]]]] = {}
    rank, last_level = -1, object()
    for level, jid in walk:
        if level != last_level:
            rank, last_level = rank + 1, level
            if found:
                break
        for node, amounts in room.held(jid):
            if node in found:
                continue
            have = room.have(node)
            for i, amount in enumerate(amounts):
                have[i] += amount
            victims = taken.setdefault(node, [])
            victims.append((rank, jid, amounts))
            if room.tasks(have) >= 1:
                found[node] = _reprieve_on_node(victims, have, room)
    if not found:
        return None
    if len(found) == 1:  # most searches: one victim on one node, nothing to rank
        return [jid for _, jid, _ in next(iter(found.values()))]
    running = ctx.running

    def cost(node: int) -> tuple[int, int, int, float, int]:
        victims = found[node]
        top = max(r for r, _, _ in victims)
        # the earliest start among the most important victims, latest first: the least work lost
        started_s = min(running[jid].start_s for r, jid, _ in victims if r == top)
        return (top, sum(r for r, _, _ in victims), len(victims), -started_s, node)

    return [jid for _, jid, _ in found[min(found, key=cost)]]


def _reprieve_on_node(victims: list[tuple[int, str, list[int]]], have: list[int],
                      room: _Room) -> list[tuple[int, str, list[int]]]:
    """Give back victims, most important first, while one task still fits without them on their node (`have`:
    free there once they all stop)."""
    kept = list(victims)
    for victim in reversed(victims):
        without = [h - a for h, a in zip(have, victim[2], strict=True)]
        if room.tasks(without) >= 1:
            kept.remove(victim)
            have = without
    return kept


def _nearest_first(walk: Ranked, room: _Room) -> Iterator[tuple[Hashable, str]]:
    """The victims level by level (worst level first), inside a level those on the nodes with the most free room
    for the gang first (their eviction completes a task soonest), then in the plugin's order."""
    free, allowed, running = room.free[0], room.allowed, room.running
    # no victim has more room than the roomiest node: victims with that much come first, in the plugin's order,
    # so they are handed out as they are found, and most searches end before the rest of the level is sorted
    most = max(compress(free, allowed), default=-1)

    def room_of(entry: tuple[Hashable, str]) -> int:  # the most free room on a node of the victim the job may use
        nodes = running[entry[1]].alloc.nodes.tolist()
        return max((int(free[node]) for node in nodes if allowed[node]), default=-1)

    for _, group in groupby(walk, key=lambda entry: entry[0]):
        rest: list[tuple[int, tuple[Hashable, str]]] = []
        for entry in list(group):  # the plugin's walk is taken a whole level at a time
            entry_room = room_of(entry)
            if entry_room == most:
                yield entry
            else:
                rest.append((-entry_room, entry))
        rest.sort(key=lambda item: item[0])  # stable: the plugin's order inside equal room
        yield from (entry for _, entry in rest)


def _gang(job: Job, walk: Ranked, room: _Room, fit: list[int]) -> list[str] | None:
    """Many tasks: victims worst first until the whole gang fits, then the minimal set (see `fewest_victims`);
    `fit`: tasks that fit per node now (at most the gang's)."""
    if room.need:
        walk = _nearest_first(walk, room)
    tasks = job.tasks
    placed = sum(fit)

    def add(held: list[tuple[int, list[int]]], sign: int) -> int:
        gained = 0
        for node, amounts in held:
            have = room.have(node)
            for i, amount in enumerate(amounts):
                have[i] += sign * amount
            now = min(room.tasks(have), tasks)
            gained += now - fit[node]
            fit[node] = now
        return gained

    chosen: list[tuple[str, list[tuple[int, list[int]]]]] = []
    for _, jid in walk:
        held = room.held(jid)
        if not held:
            continue  # it holds nothing where the gang may run
        chosen.append((jid, held))
        placed += add(held, +1)
        if placed >= tasks:
            break
    else:
        return None
    for victim in reversed(chosen):
        lost = add(victim[1], -1)
        if placed + lost >= tasks:
            chosen.remove(victim)
            placed += lost
        else:
            add(victim[1], +1)
    return [jid for jid, _ in chosen]


def _in_txn(job: Job, ctx: CycleContext, walk: Ranked, allowed: np.ndarray) -> list[str] | None:
    """GPU shares and MIG slices: which GPUs a release frees decides what fits, so victims are released
    tentatively (worst first until the job fits, then given back most important first while it still fits)."""
    cluster, tasks = ctx.cluster, job.tasks

    def placeable() -> bool:
        return int(np.minimum(np.where(allowed, cluster.fit_counts(job.task), 0), tasks).sum()) >= tasks

    with cluster.txn() as txn:  # discarded on leaving: the cycle stops the victims it is given
        chosen: list[str] = []
        for _, jid in walk:
            txn.release(ctx.running[jid].alloc)
            chosen.append(jid)
            if placeable():
                break
        else:
            return None
        for jid in reversed(list(chosen)):
            txn.allocate(ctx.running[jid].alloc)
            if placeable():
                chosen.remove(jid)
            else:
                txn.release(ctx.running[jid].alloc)
    return chosen
