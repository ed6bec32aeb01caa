"""Filter plugins: boolean masks over nodes that a job's tasks may use.

gpu-model (the job's allowed GPU models), node-selector (labels that must match), taints (NoSchedule and
NoExecute taints the job does not tolerate) and node-affinity (required node affinity terms; its score point ranks
nodes by preferred node affinity)."""

from __future__ import annotations

import numpy as np

from trimtab.model import Job, Taint
from trimtab.policy import CycleContext, Plugin


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


class Taints(Plugin):
    """Nodes whose NoSchedule and NoExecute taints are all tolerated by the job (PreferNoSchedule is a preference
    and never excludes a node). A toleration matches a taint as Kubernetes defines it: an empty key with Exists
    matches every taint, Exists matches any value, Equal needs the same value, and an empty effect matches all
    effects. Masks are cached per set of tolerations (taints do not change)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[tuple[str, str, str, str], ...], np.ndarray] = {}

    def filter(self, job: Job, ctx: CycleContext) -> np.ndarray:
        mask = self._cache.get(job.tolerations)
        if mask is None or len(mask) != len(ctx.cluster):
            mask = np.array([all(taint.effect == "PreferNoSchedule" or tolerates(job.tolerations, taint)
                                 for taint in node.taints) for node in ctx.cluster.nodes], dtype=bool)
            self._cache[job.tolerations] = mask
        return mask


def tolerates(tolerations: tuple[tuple[str, str, str, str], ...], taint: Taint) -> bool:
    """Whether one of `tolerations` (key, operator, value, effect) tolerates `taint`."""
    for key, op, value, effect in tolerations:
        if effect and effect != taint.effect:
            continue
        if op == "Exists" and (not key or key == taint.key):
            return True
        if op == "Equal" and key == taint.key and value == taint.value:
            return True
    return False


class NodeAffinity(Plugin):
    """Filter: nodes matching the job's required node affinity: any one term, each term all of its expressions
    (In, NotIn, Exists, DoesNotExist, Gt, Lt on labels; keys `field:metadata.name` match the node name). NotIn and
    DoesNotExist match a node without the label, as in Kubernetes.

    Score: preferred node affinity, as Kubernetes's NodeAffinity scorer: a node gets the sum of the weights of the
    preferences it matches, scaled so the best node scores 100 (all 0 when no node matches one, or the job states
    none). Masks and scores are cached per affinity (node labels do not change)."""

    def __init__(self) -> None:
        self._cache: dict[object, np.ndarray] = {}
        self._values: dict[str, np.ndarray] = {}
        self._zeros = np.zeros(0)

    def _labels(self, key: str, ctx: CycleContext) -> np.ndarray:
        values = self._values.get(key)
        if values is None or len(values) != len(ctx.cluster):
            if key == "field:metadata.name":
                values = np.array([n.name for n in ctx.cluster.nodes], dtype=object)
            else:
                values = np.array([n.labels.get(key) for n in ctx.cluster.nodes], dtype=object)
            self._values[key] = values
        return values

    def _term_mask(self, term: tuple[tuple[str, str, tuple[str, ...]], ...], ctx: CycleContext) -> np.ndarray:
        """Nodes matching every expression of one term."""
        term_mask = np.ones(len(ctx.cluster), dtype=bool)
        for key, op, values in term:
            labels = self._labels(key, ctx)
            present = labels != None  # noqa: E711 (elementwise over an object array)
            if op == "In":
                term_mask &= np.isin(labels, list(values))
            elif op == "NotIn":
                term_mask &= ~np.isin(labels, list(values))
            elif op == "Exists":
                term_mask &= present
            elif op == "DoesNotExist":
                term_mask &= ~present
            else:  # Gt / Lt: the label parses as an integer and compares
                bound = int(values[0])
                numbers = np.array([_as_int(v) for v in labels], dtype=object)
                ok = np.array([n is not None and (n > bound if op == "Gt" else n < bound) for n in numbers],
                              dtype=bool)
                term_mask &= ok
        return term_mask

    def filter(self, job: Job, ctx: CycleContext) -> np.ndarray:
        if not job.node_affinity:
            return np.ones(len(ctx.cluster), dtype=bool)
        mask = self._cache.get(job.node_affinity)
        if mask is not None and len(mask) == len(ctx.cluster):
            return mask
        mask = np.zeros(len(ctx.cluster), dtype=bool)
        for term in job.node_affinity:
            mask |= self._term_mask(term, ctx)
        self._cache[job.node_affinity] = mask
        return mask

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        n = len(ctx.cluster)
        if not job.node_preferences:
            if len(self._zeros) != n:
                self._zeros = np.zeros(n)
            return self._zeros
        key = ("preferred", job.node_preferences)
        scores = self._cache.get(key)
        if scores is not None and len(scores) == n:
            return scores
        total = np.zeros(n)
        for weight, term in job.node_preferences:
            total += weight * self._term_mask(term, ctx)
        best = float(total.max())
        scores = total * (100.0 / best) if best > 0 else total
        self._cache[key] = scores
        return scores


def _as_int(value: object) -> int | None:
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None


PLUGINS = {"gpu-model": GpuModel, "node-selector": NodeSelector, "taints": Taints, "node-affinity": NodeAffinity}
