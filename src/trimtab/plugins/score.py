"""Score plugins: rank the nodes for one job, 0..100 per node (higher is better), vectorised over nodes.

The packing baselines of the FGD paper, round robins, least-*, qos-isolation (fgd and steady-pack: fragmentation.py),
and taint-preference (Kubernetes's PreferNoSchedule taints)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from trimtab.cluster import GPU_MILLI, ClusterState, gpu_kind
from trimtab.model import Job, Node, Resources
from trimtab.plugins.filters import NodeCache, read_only, tolerates
from trimtab.policy import CycleContext, Plugin

# Normalisers of the FGD authors' simulator (hkust-adsl/kubernetes-scheduler-simulator): the largest node spec.
MAX_SPEC_CPU_MILLI = 128_000
MAX_SPEC_GPU_MILLI = 8_000


def _gpu_milli(task: Resources) -> int:
    return task.gpus * GPU_MILLI + task.gpu_milli


class Random(Plugin):
    """Every node a uniform random score, from the cycle's seeded RNG (ties in `place` are random too)."""

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        return ctx.rng.uniform(0.0, 100.0, len(ctx.cluster))


class RoundRobin(Plugin):
    """Nodes in turn: the node after the one favoured for the previous job scores 100, the others less the further
    they are from it in index order."""

    def __init__(self) -> None:
        self._next = 0

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        n = len(ctx.cluster)
        distance = (np.arange(n) - self._next) % n
        self._next = (self._next + 1) % n
        return 100.0 * (1.0 - distance / n)


class WeightedRoundRobin(Plugin):
    """Smooth weighted round robin (as nginx): each job, every node's credit grows by its weight; the node with the
    most credit scores 100 and pays the total weight back, so node i is favoured weight_i / sum of weights of the
    time. `weights` maps node names or GPU models to weights (default 1; a node's own name wins over its model)."""

    def __init__(self, weights: Mapping[str, float] | None = None) -> None:
        self.weights = dict(weights or {})
        self._credit: np.ndarray | None = None
        self._w: np.ndarray | None = None

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        cluster = ctx.cluster
        if self._w is None or len(self._w) != len(cluster):
            self._w = np.array([float(self.weights.get(n.name, self.weights.get(n.gpu_model, 1.0)))
                                for n in cluster.nodes])
            self._credit = np.zeros(len(cluster))
        assert self._credit is not None
        self._credit += self._w
        order = np.argsort(-self._credit, kind="stable")
        self._credit[order[0]] -= self._w.sum()
        ranks = np.empty(len(cluster))
        ranks[order] = np.arange(len(cluster))
        return 100.0 * (1.0 - ranks / len(cluster))


class LeastConnections(Plugin):
    """Fewest running tasks: 100 on a node that runs none, 0 on the busiest."""

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        tasks = ctx.cluster.tasks_running
        top = max(int(tasks.max()), 1)
        return 100.0 * (1.0 - tasks / top)


def _free_share(cluster: ClusterState, task: Resources) -> np.ndarray:
    """Mean free share (0..1) over the dimensions the task asks for (GPU milli, CPU, memory)."""
    parts = []
    if task.wants_gpu:
        cap = np.maximum(cluster.cap_gpus * GPU_MILLI, 1)
        parts.append(cluster.free_gpu_milli / cap)
    if task.cpu_milli or not parts:
        parts.append(cluster.free_cpu_milli / np.maximum(cluster.cap_cpu_milli, 1))
    if task.mem_mib:
        parts.append(cluster.free_mem_mib / np.maximum(cluster.cap_mem_mib, 1))
    return np.mean(parts, axis=0)


class LeastLoad(Plugin):
    """Most free (spread): 100 x the node's mean free share over the resources the job asks for."""

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        return 100.0 * _free_share(ctx.cluster, job.task)


def _fits(cluster: ClusterState, task: Resources) -> np.ndarray:
    return cluster.fit_counts(task) > 0


def _normalise_int(raw: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Integer min-max normalisation to 0..100 over the nodes in `mask`, as kube-scheduler score extensions do."""
    out = np.zeros(len(raw))
    if not mask.any():
        return out
    lo, hi = raw[mask].min(), raw[mask].max()
    if hi > lo:
        out[mask] = (raw[mask] - lo) * 100 // (hi - lo)
    return out


class BestFit(Plugin):
    """Least left over after placing: 100 x (1 - (CPU left / 128 cores + GPU milli left / 8000) / 2), truncated to
    an integer and min-max normalised over the nodes the task fits on (the FGD authors' BestFit)."""

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        c, t = ctx.cluster, job.task
        left = 0.5 * (c.free_cpu_milli - t.cpu_milli) / MAX_SPEC_CPU_MILLI \
            + 0.5 * (c.free_gpu_milli - _gpu_milli(t)) / MAX_SPEC_GPU_MILLI
        raw = np.trunc((1.0 - left) * 100.0)
        return _normalise_int(raw, _fits(c, t))


class DotProduct(Plugin):
    """Tetris-style alignment of the request with what is left, CPU and GPU milli normalised by the largest node
    spec: 100 x (1 - <left, request> / 2), truncated (the FGD authors' DotProd with merged GPU dimension; a smaller
    product, i.e. a request that leaves the node's other resources alone, scores higher)."""

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        c, t = ctx.cluster, job.task
        dot = (c.free_cpu_milli / MAX_SPEC_CPU_MILLI) * (t.cpu_milli / MAX_SPEC_CPU_MILLI) \
            + (c.free_gpu_milli / MAX_SPEC_GPU_MILLI) * (_gpu_milli(t) / MAX_SPEC_GPU_MILLI)
        score = np.trunc(100.0 * (1.0 - dot / 2.0))
        score[c.free_cpu_milli < t.cpu_milli] = 0.0
        return score


class GpuClustering(Plugin):
    """Keep GPU jobs of one kind together (share, 1-GPU, 2-GPU, ...): 75..100 on nodes running only that kind,
    50..75 with other kinds as well, 25..50 on nodes with no GPU job, 0..25 on nodes running only other kinds;
    within a band, fuller nodes score higher. A CPU-only job scores 0 everywhere."""

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        c = ctx.cluster
        tag = gpu_kind(job.task)
        if not tag:
            return np.zeros(len(c))
        kinds = c.kind_tasks
        same = kinds.get(tag, np.zeros(len(c), dtype=np.int64)) > 0
        count = sum((v > 0).astype(np.int64) for v in kinds.values()) if kinds else np.zeros(len(c), np.int64)
        band = np.where(same, np.where(count == 1, 75, 50), np.where(count == 0, 25, 0))
        return band + 25 * (MAX_SPEC_GPU_MILLI - c.free_gpu_milli) // MAX_SPEC_GPU_MILLI


def _best_share_left(cluster: ClusterState, milli: int) -> np.ndarray:
    """Per node, the least free milli of a GPU that can take `milli` (a large number where none can)."""
    rows = cluster.gpu_free_milli
    return np.where(rows >= milli, rows, 10 * GPU_MILLI).min(axis=1)


class GpuPacking(Plugin):
    """Fill shared GPUs first, then idle GPUs on used nodes, then empty nodes (the FGD authors' GpuPacking):
    a share that fits on a used GPU scores 50..100 (fuller GPU higher), a task that must take idle GPUs of a node
    already in use 33..50 (fewer idle GPUs taken higher), a fully idle node 0..33 (fewer GPUs higher)."""

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        c, t = ctx.cluster, job.task
        n = len(c)
        if not (t.gpus or t.gpu_milli):
            return np.zeros(n)
        all_idle = c.free_gpus == c.cap_gpus
        score = np.maximum(33 - c.free_gpus, c.free_gpus).astype(float)
        if t.gpu_milli:
            left = _best_share_left(c, t.gpu_milli)
            shared = np.maximum(100 - (left * 100 // GPU_MILLI) // 10, 50)
            used = np.where(left < GPU_MILLI, shared, 49)
        else:
            used = np.full(n, max(50 - t.gpus, 33))
        return np.where(all_idle, score, used).astype(float)


LATENCY_SENSITIVE = ("LS", "Guaranteed")
BEST_EFFORT = ("BE", "BestEffort")


class QosIsolation(Plugin):
    """Keep latency-sensitive work (QoS LS, Guaranteed) away from best-effort work (BE) on shared nodes: an LS task
    scores 100 on nodes running no BE task, less the more they run; a BE task scores higher where BE tasks already
    run (so they gather); other classes score 50 everywhere."""

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        c, qos = ctx.cluster, job.task.qos
        be = sum((c.qos_tasks[q] for q in BEST_EFFORT if q in c.qos_tasks), np.zeros(len(c), dtype=np.int64))
        top = max(int(be.max()), 1)
        if qos in LATENCY_SENSITIVE:
            return 100.0 * (1.0 - be / top)
        if qos in BEST_EFFORT:
            return 100.0 * be / top
        return np.full(len(c), 50.0)


class TaintPreference(NodeCache):
    """Score: PreferNoSchedule taints as kube-scheduler's TaintToleration scorer: per node, the PreferNoSchedule
    taints the job does not tolerate (a toleration of an empty effect or of PreferNoSchedule counts) are counted,
    and a node scores 100 x (1 - count / the largest count over the nodes), in whole points, so the nodes without
    one score 100 and the most tainted 0. Where the count is 0 on every node (always, on a cluster without such
    taints) the score is 0 everywhere: a constant, which Kubernetes makes 100; 0 leaves the profile's score sum, and
    so every placement, exactly as without this plugin. Cached per set of tolerations (taints do not change)."""

    def __init__(self) -> None:
        super().__init__()
        self._zeros = read_only(np.zeros(0))
        self._preferred = False

    def _met(self, nodes: tuple[Node, ...]) -> None:
        self._zeros = read_only(np.zeros(len(nodes)))
        self._preferred = any(taint.effect == "PreferNoSchedule" for node in nodes for taint in node.taints)

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        nodes = self._nodes_of(ctx)
        if not self._preferred:
            return self._zeros
        return self._cached(job.tolerations, lambda: _untolerated_scores(nodes, job.tolerations))


def _untolerated_scores(nodes: tuple[Node, ...], tolerations: tuple[tuple[str, str, str, str], ...]) -> np.ndarray:
    """TaintPreference's scores for one set of tolerations (see there)."""
    counts = np.array([sum(taint.effect == "PreferNoSchedule" and not tolerates(tolerations, taint)
                           for taint in node.taints) for node in nodes], dtype=np.int64)
    top = int(counts.max())
    return np.zeros(len(nodes)) if top == 0 else (100 - 100 * counts // top).astype(np.float64)


PLUGINS = {
    "random": Random,
    "round-robin": RoundRobin,
    "weighted-round-robin": WeightedRoundRobin,
    "least-connections": LeastConnections,
    "least-load": LeastLoad,
    "best-fit": BestFit,
    "dot-product": DotProduct,
    "gpu-clustering": GpuClustering,
    "gpu-packing": GpuPacking,
    "qos-isolation": QosIsolation,
    "taint-preference": TaintPreference,
}
