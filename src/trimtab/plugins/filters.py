"""Filter plugins: boolean masks over nodes that a job's tasks may use.

gpu-model (the job's allowed GPU models) and node-selector (labels that must match)."""

from __future__ import annotations

import numpy as np

from trimtab.framework import CycleContext, Plugin
from trimtab.model import Job


class GpuModel(Plugin):
    """Nodes whose GPU model the job allows (all nodes when it names none)."""

    def filter(self, job: Job, ctx: CycleContext) -> np.ndarray:
        if not job.gpu_models:
            return np.ones(len(ctx.cluster), dtype=bool)
        return ctx.cluster.model_mask(job.gpu_models)


class NodeSelector(Plugin):
    """Nodes carrying every label of the job's node selector."""

    def filter(self, job: Job, ctx: CycleContext) -> np.ndarray:
        mask = np.ones(len(ctx.cluster), dtype=bool)
        for key, value in job.node_selector.items():
            mask &= ctx.cluster.label_mask(key, value)
        return mask


PLUGINS = {"gpu-model": GpuModel, "node-selector": NodeSelector}
