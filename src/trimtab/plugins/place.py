"""Place plugins: choose the nodes for every task of a gang.

pack: consolidate the gang on the fewest nodes, best fit first."""

from __future__ import annotations

import numpy as np

from trimtab.cluster import Allocation
from trimtab.framework import CycleContext, Plugin
from trimtab.model import Job


class Pack(Plugin):
    """The fewest nodes that hold the gang. A gang that fits on one node goes to the node it leaves with the fewest
    free GPUs (best fit); a larger gang fills the nodes that take the most tasks, and its remainder goes to the
    best-fitting node left. Ties: higher score, then lower node index."""

    def place(self, job: Job, ctx: CycleContext, fit: np.ndarray, score: np.ndarray) -> Allocation | None:
        need = job.tasks
        cand = np.flatnonzero(fit > 0)
        if cand.size == 0:
            return None
        cand_fit = np.minimum(fit[cand], need)
        slack = cand_fit - need  # < 0: cannot take the whole gang
        free = ctx.cluster.free_gpus[cand]
        whole = slack >= 0
        if whole.any():
            idx = cand[whole]
            best = np.lexsort((idx, -score[idx], free[whole]))[0]
            return Allocation(np.array([idx[best]]), np.array([need]), job.task)
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


PLUGINS = {"pack": Pack}
