"""Place plugins: choose the nodes for every task of a gang.

pack: consolidate the gang on the fewest nodes, best fit first. best-node: the highest total score, ties at random."""

from __future__ import annotations

import numpy as np

from trimtab.cluster import Allocation
from trimtab.model import Job
from trimtab.policy import CycleContext, Plugin

_BIG = np.iinfo(np.int64).max


class Pack(Plugin):
    """The fewest nodes that hold the gang. A gang that fits on one node goes to the node it leaves with the fewest
    free GPUs (best fit); a larger gang fills the nodes that take the most tasks, and its remainder goes to the
    best-fitting node left. Ties: higher score, then lower node index."""

    def place(self, job: Job, ctx: CycleContext, fit: np.ndarray, score: np.ndarray) -> Allocation | None:
        need = job.tasks
        # best fit by idle GPUs; a share (which leaves idle GPUs alone) by the free milli-GPU of the node
        free_all = ctx.cluster.free_gpu_milli if job.task.gpu_milli else ctx.cluster.free_gpus
        holds = fit >= need
        if not score.any():  # no score to break ties: the first node of the fewest free, as the lexsort gives
            node = int(np.where(holds, free_all, _BIG).argmin())
            if holds[node]:  # else no node holds the gang (all _BIG: node 0)
                return Allocation(np.array([node]), np.array([need]), job.task)
        elif holds.any():
            idx = np.flatnonzero(holds)
            best = np.lexsort((idx, -score[idx], free_all[idx]))[0]
            return Allocation(np.array([idx[best]]), np.array([need]), job.task)
        cand = np.flatnonzero(fit > 0)
        if cand.size == 0:
            return None
        cand_fit = fit[cand]  # each below need: no node holds the gang
        free = free_all[cand]
        order = np.lexsort((cand, -score[cand], -cand_fit))
        csum = np.cumsum(cand_fit[order])
        if csum[-1] < need:
            return None
        k = int(np.searchsorted(csum, need))
        chosen = list(order[:k])
        remainder = need - (int(csum[k - 1]) if k else 0)
        rest = order[k:]
        rest = rest[cand_fit[rest] >= remainder]
        last = rest[np.lexsort((cand[rest], -score[cand[rest]], free[rest]))[0]]
        chosen.append(last)
        chosen_arr = np.array(chosen)
        counts = cand_fit[chosen_arr].copy()
        counts[-1] = remainder
        nodes = cand[chosen_arr]
        sort = np.argsort(nodes)
        return Allocation(nodes[sort], counts[sort], job.task)


def tie_rank(ctx: CycleContext, cached: np.ndarray | None) -> np.ndarray:
    """A seeded random rank of the nodes (drawn once from the cycle's RNG, then kept): the tie-breaker of
    `top_node`. Pass back what it returned last time."""
    n = len(ctx.cluster)
    if cached is not None and len(cached) == n:
        return cached
    return ctx.rng.permutation(n)


def top_node(job: Job, ctx: CycleContext, fit: np.ndarray, score: np.ndarray, rank: np.ndarray) -> Allocation | None:
    """The whole gang on the highest-scoring node that holds it; among equal scores the node of lowest `rank`
    (a seeded random order of the nodes, fixed for a run: so equal scores keep going to the same node, packing it,
    as in the FGD authors' simulator, whose nodes are named by a random permutation). A gang no single node holds
    fills the highest-scoring nodes in turn. None when the gang does not fit. GPUs within a node are left to
    ClusterState unless the caller names them."""
    need = job.tasks
    whole = np.flatnonzero(fit >= need)
    if whole.size:
        top = whole[score[whole] == score[whole].max()]
        node = top[np.argmin(rank[top])] if top.size > 1 else top[0]
        return Allocation(np.array([node]), np.array([need]), job.task)
    cand = np.flatnonzero(fit > 0)
    if int(fit[cand].sum()) < need:
        return None
    order = cand[np.lexsort((rank[cand], -score[cand]))]
    take = np.minimum(fit[order], need)
    csum = np.cumsum(take)
    k = int(np.searchsorted(csum, need)) + 1
    nodes, counts = order[:k], take[:k].copy()
    counts[-1] -= int(csum[k - 1]) - need
    sort = np.argsort(nodes)
    return Allocation(nodes[sort], counts[sort], job.task)


class BestNode(Plugin):
    """The highest total score wins; ties go to the first node in a seeded random order (see `top_node`); the score
    plugins carry the policy. GPUs within the node: the idle ones with the lowest index, a share on the fullest GPU
    it fits on."""

    def __init__(self) -> None:
        self._rank: np.ndarray | None = None

    def place(self, job: Job, ctx: CycleContext, fit: np.ndarray, score: np.ndarray) -> Allocation | None:
        self._rank = tie_rank(ctx, self._rank)
        return top_node(job, ctx, fit, score, self._rank)


PLUGINS = {"pack": Pack, "best-node": BestNode}
