"""PreferLabel: a score plugin that sends jobs to the nodes carrying a label first (say, the nodes of a newer rack),
and elsewhere only when those are full."""

from __future__ import annotations

import numpy as np

from trimtab import CycleContext, Job, Plugin


class PreferLabel(Plugin):
    """score: 100 on the nodes whose label `key` is `value`, 0 on the others. Listed under `score` in a profile,
    with a weight; the `place` plugin then puts a job on a preferred node when one fits it."""

    def __init__(self, key: str, value: str) -> None:
        self.key = key
        self.value = value

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        # one boolean per node, cached by the cluster (labels never change): no loop over nodes per job
        return np.where(ctx.cluster.label_mask(self.key, self.value), 100.0, 0.0)
