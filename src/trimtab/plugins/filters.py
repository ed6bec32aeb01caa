"""Filter plugins: boolean masks over nodes that a job's tasks may use.

gpu-model (the job's allowed GPU models), node-selector (labels that must match), taints (NoSchedule and
NoExecute taints the job does not tolerate, a cordoned node's among them) and node-affinity (required node affinity
terms; its score point ranks nodes by preferred node affinity). Each costs a cached all-True mask for a job with
nothing to check."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import ClassVar

import numpy as np

from trimtab.model import Job, Node, Taint
from trimtab.policy import CycleContext, Plugin


def read_only(mask: np.ndarray) -> np.ndarray:
    """`mask`, frozen: a cached answer handed to every caller (filters' callers only read what they get)."""
    mask.flags.writeable = False
    return mask


class NodeCache(Plugin):
    """A filter or scorer whose answers depend on the nodes alone (labels, models, taints: they never change), so
    they are cached per job constraint in `_cache`; the caches start afresh when the plugin meets another cluster.
    Subclasses call `_nodes_of(ctx)` first; a filter returns `self._all` (the cached all-True mask) for a job with
    nothing to check."""

    def __init__(self) -> None:
        self._nodes: tuple[Node, ...] = ()
        self._all = read_only(np.ones(0, dtype=bool))
        self._cache: dict[Hashable, np.ndarray] = {}

    def _nodes_of(self, ctx: CycleContext) -> tuple[Node, ...]:
        nodes = ctx.cluster.nodes
        if nodes is not self._nodes:
            self._nodes, self._cache = nodes, {}
            self._all = read_only(np.ones(len(nodes), dtype=bool))
            self._met(nodes)
        return nodes

    def _met(self, nodes: tuple[Node, ...]) -> None:
        """Called once per cluster met, with its nodes: what a subclass precomputes."""

    def _cached(self, key: Hashable, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """The answer for the constraint `key`: computed (and frozen) the first time it is asked for."""
        answer = self._cache.get(key)
        if answer is None:
            answer = self._cache[key] = read_only(compute())
        return answer


class GpuModel(NodeCache):
    """Nodes whose GPU model the job allows (all nodes when it names none)."""

    filter_reason: ClassVar[str] = "have another GPU model"

    def filter(self, job: Job, ctx: CycleContext) -> np.ndarray:
        self._nodes_of(ctx)
        return self._cached(job.gpu_models, lambda: ctx.cluster.model_mask(job.gpu_models)) if job.gpu_models \
            else self._all


class NodeSelector(NodeCache):
    """Nodes carrying every label of the job's node selector (cached per selector)."""

    filter_reason: ClassVar[str] = "do not match the node selector"

    def filter(self, job: Job, ctx: CycleContext) -> np.ndarray:
        self._nodes_of(ctx)
        if not job.node_selector:
            return self._all
        return self._cached(tuple(job.node_selector.items()), lambda: np.logical_and.reduce(
            [ctx.cluster.label_mask(key, value) for key, value in job.node_selector.items()]))


class Taints(NodeCache):
    """Nodes whose NoSchedule and NoExecute taints are all tolerated by the job (PreferNoSchedule is a preference,
    scored by `taint-preference`, and never excludes a node). A cordoned node carries the NoSchedule taint
    `node.kubernetes.io/unschedulable` (the reader adds it), so it is kept out too. A toleration matches a taint as
    Kubernetes defines it: an empty key with Exists matches every taint, Exists matches any value, Equal needs the
    same value, and an empty effect matches all effects. Masks are cached per set of tolerations; on a cluster
    without such taints every job gets the all-True mask."""

    filter_reason: ClassVar[str] = "are tainted"

    def __init__(self) -> None:
        super().__init__()
        self._tainted = False

    def _met(self, nodes: tuple[Node, ...]) -> None:
        self._tainted = any(taint.effect != "PreferNoSchedule" for node in nodes for taint in node.taints)

    def filter(self, job: Job, ctx: CycleContext) -> np.ndarray:
        nodes = self._nodes_of(ctx)
        if not self._tainted:
            return self._all
        return self._cached(job.tolerations, lambda: np.array(
            [all(taint.effect == "PreferNoSchedule" or tolerates(job.tolerations, taint) for taint in node.taints)
             for node in nodes], dtype=bool))


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


class NodeAffinity(NodeCache):
    """Filter: nodes matching the job's required node affinity: any one term, each term all of its expressions
    (In, NotIn, Exists, DoesNotExist, Gt, Lt on labels; keys `field:metadata.name` match the node name). NotIn and
    DoesNotExist match a node without the label, as in Kubernetes.

    Score: preferred node affinity, as Kubernetes's NodeAffinity scorer: a node gets the sum of the weights of the
    preferences it matches, scaled so the best node scores 100 (all 0 when no node matches one, or the job states
    none). Masks and scores are cached per affinity (node labels do not change)."""

    filter_reason: ClassVar[str] = "do not match the node affinity"

    def __init__(self) -> None:
        super().__init__()
        self._values: dict[str, np.ndarray] = {}
        self._zeros = read_only(np.zeros(0))

    def _met(self, nodes: tuple[Node, ...]) -> None:
        self._values = {}
        self._zeros = read_only(np.zeros(len(nodes)))

    def _labels(self, key: str, ctx: CycleContext) -> np.ndarray:
        values = self._values.get(key)
        if values is None:
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
        self._nodes_of(ctx)
        if not job.node_affinity:
            return self._all
        return self._cached(job.node_affinity, lambda: np.logical_or.reduce(
            [self._term_mask(term, ctx) for term in job.node_affinity]))

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        self._nodes_of(ctx)
        if not job.node_preferences:
            return self._zeros
        return self._cached(("preferred", job.node_preferences), lambda: self._preference_scores(job, ctx))

    def _preference_scores(self, job: Job, ctx: CycleContext) -> np.ndarray:
        total = np.zeros(len(ctx.cluster))
        for weight, term in job.node_preferences:
            total += weight * self._term_mask(term, ctx)
        best = float(total.max())
        return total * (100.0 / best) if best > 0 else total


def _as_int(value: object) -> int | None:
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None


PLUGINS = {"gpu-model": GpuModel, "node-selector": NodeSelector, "taints": Taints, "node-affinity": NodeAffinity}
