"""The fragmentation engine (FGD, Weng et al., ATC'23): the target workload a node's fragmentation is measured
against, and the placers that score and place by the fragmentation a placement adds (fgd, steady-pack)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from trimtab.cluster import GPU_MILLI, Allocation, ClusterState
from trimtab.model import Job, Resources
from trimtab.plugins.place import tie_rank, top_node
from trimtab.policy import CycleContext, Plugin

Kind = tuple[int, int, int, tuple[str, ...]]
_FEW = 8  # stale nodes up to which a score is refreshed on Python scalars (`_refresh_few`)
_FEW_CHANGED = 64  # changed nodes up to which a score finds the stale ones among them, on Python scalars


def _constrained_share(counts: Iterable[tuple[Kind, float]]) -> dict[tuple[str, ...], float]:
    """Share of the GPU milli asked for by `counts` (kind, weight) that is constrained to each set of GPU models."""
    total, by_set = 0.0, {}
    for (_, count, milli, models), weight in counts:
        demand = weight * count * milli
        total += demand
        if models and demand:
            key = tuple(sorted(set(models)))
            by_set[key] = by_set.get(key, 0.0) + demand
    return {k: v / total for k, v in by_set.items()} if total else {}


class TargetWorkload:
    """The workload a node's fragmentation is measured against: request kinds with their probabilities.

    Kind k asks for `cpu_milli[k]`, `count[k]` GPUs of `milli[k]` milli each (count 0: CPU only), on any model in
    `models[k]` (empty: any). Built from jobs by `from_jobs`, which keeps the most popular kinds that together
    make up `popular` of the jobs (the FGD authors keep 95%) and renormalises. `constrained_share` maps each set of
    GPU models to the share of the workload's GPU milli that may use only those models, from every job (the cut
    drops most constrained kinds, each rare on its own); by default it is computed from the kinds."""

    def __init__(self, kinds: Sequence[Kind], weights: Sequence[float],
                 constrained_share: Mapping[tuple[str, ...], float] | None = None) -> None:
        if not kinds:
            raise ValueError("a target workload needs at least one request kind")
        w = np.asarray(weights, dtype=float)
        self.kinds = list(kinds)
        self.p = w / w.sum()
        # the measure sums integer milli times these weights, then divides once: with integer weights (job counts,
        # as from_jobs gives) the sum is exact, so a state's value does not depend on the batch it is computed in
        self._weight, self._weight_total = w, float(w.sum())
        self.cpu_milli = np.array([k[0] for k in kinds], dtype=np.int64)
        self.cpu_steps = np.unique(self.cpu_milli)  # the distinct CPU requests, ascending (see `cpu_step`)
        self._cpu_steps = self.cpu_steps.tolist()
        self.count = np.array([k[1] for k in kinds], dtype=np.int64)
        self.milli = np.array([k[2] for k in kinds], dtype=np.int64)
        self.models = [k[3] for k in kinds]
        self.constrained = any(self.models)
        gpu = self.count > 0
        gpu_milli = float((self.p[gpu] * self.count[gpu] * self.milli[gpu]).sum())
        # the workload's own CPU per milli-GPU, over its GPU requests (0 when it asks for no GPU)
        self.cpu_per_gpu_milli = float((self.p[gpu] * self.cpu_milli[gpu]).sum()) / gpu_milli if gpu_milli else 0.0
        self.constrained_share = dict(constrained_share) if constrained_share is not None \
            else _constrained_share(zip(self.kinds, self.p, strict=True))

    @staticmethod
    def kind_of(task: Resources, models: tuple[str, ...] = ()) -> Kind:
        if task.gpus:
            return (task.cpu_milli, task.gpus, GPU_MILLI, models)
        if task.gpu_milli:
            return (task.cpu_milli, 1, task.gpu_milli, models)
        return (task.cpu_milli, 0, 0, models)

    @classmethod
    def from_jobs(cls, jobs: Iterable[Job], popular: float = 0.95) -> TargetWorkload:
        counts: dict[Kind, int] = {}
        for job in jobs:
            kind = cls.kind_of(job.task, tuple(job.gpu_models))
            counts[kind] = counts.get(kind, 0) + job.tasks
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        total = sum(counts.values())
        kept, cum = [], 0
        for kind, n in ranked:
            if cum >= popular * total:
                break
            kept.append((kind, n))
            cum += n
        return cls([k for k, _ in kept], [n for _, n in kept], _constrained_share(counts.items()))

    def cpu_step(self, cpu_left: int) -> int:
        """How many of the workload's distinct CPU requests fit in `cpu_left`: states alike in it pass the same
        CPU checks of `frag_milli`."""
        return bisect_right(self._cpu_steps, cpu_left)

    def model_ok(self, cluster: ClusterState) -> np.ndarray:
        """[kind, node]: the kind may use the node's GPU model."""
        ok = np.ones((len(self.kinds), len(cluster)), dtype=bool)
        for k, models in enumerate(self.models):
            if models:
                ok[k] = cluster.model_mask(models)
        return ok

    def oversubscription(self, cluster: ClusterState) -> np.ndarray:
        """Per node, how far the requests that may use only some GPU models over-subscribe the node's model:
        max(0, r - 1), where r is the share of the workload's GPU milli constrained to that model over the model's
        share of the cluster's GPU milli (a request allowed on several models is spread over them in proportion to
        their GPUs). 0 for a model with room for all of its constrained demand, and on nodes without GPUs."""
        capacity = cluster.cap_gpus.astype(float)
        ratio = np.zeros(len(cluster))
        for models, share in self.constrained_share.items():
            on = cluster.model_mask(models)
            if capacity[on].sum() > 0:
                ratio[on] += share * capacity.sum() / capacity[on].sum()
        return np.where(capacity > 0, np.maximum(ratio - 1.0, 0.0), 0.0)

    def frag_milli(self, cpu_left: np.ndarray, gpu_left: np.ndarray, model_ok: np.ndarray,
                   other_models_count: bool = True) -> np.ndarray:
        """Expected fragmented GPU milli of node states (FGD's F_n(M)): for each kind, the free GPU milli it could
        not use on that node (all of it when the kind does not fit, by CPU, GPU count or model, or asks no GPU;
        else the GPUs with less free than it asks per GPU), weighted by the kind's probability.

        With `other_models_count=False` a kind that may not use the node's GPU model adds nothing (instead of all
        the free GPU milli): its requests go to other models, so they neither use nor waste this node.
        `cpu_left[b]`, `gpu_left[b, g]` and `model_ok[b, k]` describe B states; returns B values."""
        total = gpu_left.sum(axis=1)
        ge = gpu_left[:, None, :] >= self.milli[None, :, None]
        enough = ge.sum(axis=2) >= self.count[None, :]
        small = np.where(ge, 0, gpu_left[:, None, :]).sum(axis=2)
        fits = enough & (cpu_left[:, None] >= self.cpu_milli[None, :]) & (self.milli > 0)[None, :]
        if not self.constrained:  # every kind may use every node
            per_kind = np.where(fits, small, total[:, None])
        elif other_models_count:
            per_kind = np.where(fits & model_ok, small, total[:, None])
        else:
            per_kind = np.where(fits, small, total[:, None]) * model_ok
        return (per_kind @ self._weight) / self._weight_total


_HASH = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB),
         np.random.default_rng(0).integers(1, 2**63, 4096, dtype=np.uint64) | np.uint64(1))
# the same numbers as Python ints, for keys computed on scalars (`_refresh_few`): arithmetic modulo 2**64 as numpy's
_H0, _H1, _TABLE, _MASK = int(_HASH[0]), int(_HASH[1]), _HASH[3].tolist(), (1 << 64) - 1


class _Cache:
    """Per request kind: the last score and GPU choice per node, the node versions they were computed at, and where
    the cluster's change log stood at the last score."""

    def __init__(self, n: int) -> None:
        self.score = np.zeros(n)
        self.gpu = np.full(n, -1, dtype=np.int64)
        self.version = np.full(n, -1, dtype=np.int64)
        self.seen = (0, -1)  # the cluster's change log at the last score, and the memory the task asked for then


class _FragmentationPlacer(Plugin):
    """Shared machinery of fgd and steady-pack: per node, the change of a fragmentation measure if the job's task
    went there (on the best GPU for a share), cached per request kind and recomputed only for nodes whose state
    changed since (ClusterState.version). `place` takes the highest total score (ties at random) and the GPU that
    gave the node its score."""

    # whether the measure reads a state's CPU left otherwise than through the target's CPU checks, in `finish`:
    # `node_value` never does (states are known by their `cpu_step` instead of their CPU, so far more of them recur)
    reads_cpu_left: ClassVar[bool] = False

    def __init__(self, target: TargetWorkload | Sequence[Any] | None = None, popular: float = 0.95) -> None:
        self.popular = popular
        self.target = target if isinstance(target, TargetWorkload) or target is None else TargetWorkload(*target)
        self._seen: dict[Kind, int] = {}
        self._caches: dict[tuple[Any, ...], _Cache] = {}
        self._model_ok: np.ndarray | None = None
        self._node_weight: np.ndarray | None = None
        self._cluster: ClusterState | None = None
        self._node_hash = np.zeros(0, dtype=np.uint64)  # per node: its model mask and weight, a state key part
        self._node_hash_list: list[int] = []  # the same, as Python ints
        self._known: dict[int, float] = {}  # `node_value` by state key (see `_values`), for `_known_for`
        self._known_for: TargetWorkload | None = None
        self._score_of: dict[float, float] = {}  # `to_score` by decrease of the measure, for `_refresh_few`

    # the target is the given workload, else the distribution of requests seen so far (learned online)
    def _target(self, job: Job) -> TargetWorkload:
        if self.target is not None:
            return self.target
        kind = TargetWorkload.kind_of(job.task, tuple(job.gpu_models))
        self._seen[kind] = self._seen.get(kind, 0) + job.tasks
        self._caches.clear()
        self._model_ok = None
        ranked = sorted(self._seen.items(), key=lambda kv: (-kv[1], kv[0]))
        return TargetWorkload([k for k, _ in ranked], [v for _, v in ranked])

    def node_weight(self, target: TargetWorkload, cluster: ClusterState) -> np.ndarray:
        """A per-node number that `node_value` may use besides the node's state (computed once per cluster)."""
        return np.zeros(len(cluster))

    def node_value(self, target: TargetWorkload, cpu_left: np.ndarray, gpu_left: np.ndarray,
                   model_ok: np.ndarray, node_weight: np.ndarray) -> np.ndarray:
        """The measure to keep low (per node state; `node_weight` is `node_weight()` of the state's node); the score
        is its decrease. It must read `cpu_left` only through the target's CPU checks (states alike in `cpu_step`
        share it); a class whose measure reads more of it sets `reads_cpu_left` and adds that part in `finish`."""
        return target.frag_milli(cpu_left, gpu_left, model_ok)

    def finish(self, target: TargetWorkload, value: Any, cpu_left: Any, free_milli: Any, node_weight: Any) -> Any:
        """With `reads_cpu_left`: the measure of states (arrays, or one state's scalars) from their `node_value`,
        CPU left, free GPU milli and node weight."""
        return value

    def to_score(self, delta: np.ndarray) -> np.ndarray:
        """0..100 from the decrease of the measure (milli-GPU)."""
        return np.trunc(100.0 / (1.0 + np.exp(-delta / 1000.0)))

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        cluster, task = ctx.cluster, job.task
        target = self._target(job)
        if self._cluster is not cluster or self._model_ok is None:
            self._cluster = cluster
            self._caches.clear()
            self._model_ok = target.model_ok(cluster)
            self._node_weight = self.node_weight(target, cluster)
            with np.errstate(over="ignore"):
                ok_hash = (self._model_ok.T.astype(np.uint64) * _HASH[3][:len(target.kinds)]).sum(axis=1,
                                                                                                 dtype=np.uint64)
                self._node_hash = ok_hash * _HASH[2] + self._node_weight.astype(np.float64).view(np.uint64)
            self._node_hash_list = self._node_hash.tolist()
        if self._known_for is not target:  # measures known are the target's
            self._known, self._score_of, self._known_for = {}, {}, target
        key = (task.cpu_milli, task.gpus, task.gpu_milli, task.mig)
        cache = self._caches.get(key)
        if cache is None:
            cache = self._caches[key] = _Cache(len(cluster))
        # only nodes the task fits on now: a full node's entry stays stale until it is asked about while it fits
        # (its fit grows only by a change of the node, which the log names)
        fit, log = cluster.fit_counts(task), cluster.fits.log
        changed = log.since(cache.seen[0]) if cache.seen[1] == task.mem_mib else None  # memory bounds the fit too
        if changed is None or len(changed) > _FEW_CHANGED:
            stale = np.flatnonzero((cache.version != cluster.version) & (fit > 0)).tolist()
        else:
            version, kept = cluster.version, cache.version
            stale = sorted({node for node in changed if fit.item(node) > 0 and kept.item(node) != version.item(node)})
        cache.seen = (log.end, task.mem_mib)
        if len(stale) > _FEW:
            self._refresh(cache, np.array(stale), task, target, cluster)
        elif stale:
            self._refresh_few(cache, stale, task, target, cluster)
        self._last = cache
        return cache.score

    def _refresh(self, cache: _Cache, nodes: np.ndarray, task: Resources, target: TargetWorkload,
                 cluster: ClusterState) -> None:
        """Score `nodes` on arrays: each node's state now and, per option (a share on each GPU with room for it; one
        choice for whole GPUs or none), its state after, keyed as `_values` keys states without building them (a
        share swaps one number of the multiset); `_values` builds only the states it does not know."""
        cpu, rows, share, n = cluster.free_cpu_milli[nodes], cluster.gpu_free_milli[nodes], task.gpu_milli, len(nodes)
        held = _HASH[3][rows]
        row_hash, free = held.sum(axis=1, dtype=np.uint64), rows.sum(axis=1)
        with np.errstate(over="ignore"):
            if share:  # one option per GPU: the share on that GPU, where it fits
                feasible = rows >= share
                options = row_hash[:, None] - held + _HASH[3][np.where(feasible, rows - share, 0)]
                free_after = free - share
            else:  # whole GPUs come from the idle ones (which ones does not change the measure), or none are asked
                taken = np.minimum((rows == GPU_MILLI).sum(axis=1), task.gpus)
                feasible = np.ones((n, 1), dtype=bool)
                options = (row_hash + taken.astype(np.uint64) * (_HASH[3][0] - _HASH[3][GPU_MILLI]))[:, None]
                free_after = free - taken * GPU_MILLI
        n_opt = options.shape[1]
        measured = feasible.reshape(-1)  # a share on a GPU without room for it is not measured: it scores -1
        of_node = np.repeat(np.arange(n), n_opt)[measured]
        gpu = np.tile(np.arange(n_opt), n)[measured]

        def rows_of(picked: np.ndarray) -> np.ndarray:  # the GPUs left of states (now: below n; after: the others)
            after, source = picked >= n, picked.copy()
            source[after] = of_node[picked[after] - n]
            out = rows[source]
            if share:
                out[after, gpu[picked[after] - n]] -= share
            elif task.gpus:
                idle = out == GPU_MILLI
                out -= np.where(after[:, None] & idle & (np.cumsum(idle, axis=1) <= task.gpus), GPU_MILLI, 0)
            return out

        values = self._values(target, np.concatenate([cpu, cpu[of_node] - task.cpu_milli]),
                              np.concatenate([row_hash, options.reshape(-1)[measured]]),
                              np.concatenate([nodes, nodes[of_node]]), np.concatenate([free, free_after[of_node]]),
                              rows_of)
        decrease = np.full(n * n_opt, np.nan)  # NaN passes through `to_score` quietly, then scores -1
        decrease[measured] = values[of_node] - values[n:]
        scores = np.where(feasible, self.to_score(decrease.reshape(n, n_opt)), -1.0)
        best = np.argmax(scores, axis=1)  # the first of equals: lowest GPU index
        cache.score[nodes] = np.maximum(scores[np.arange(n), best], 0.0)
        cache.gpu[nodes] = best if share else -1
        cache.version[nodes] = cluster.version[nodes]

    def _refresh_few(self, cache: _Cache, nodes: list[int], task: Resources, target: TargetWorkload,
                     cluster: ClusterState) -> None:
        """`_refresh` for a few nodes (the usual case: those changed since the kind was last scored) on Python
        scalars: the same states under the same keys as `_values` (a state after the task is its state now with one
        GPU's number of the multiset swapped, no sort), measures (the unknown ones computed in one batch), scores
        (`to_score` looked up by decrease, the unknown ones in one call) and choices, without the fixed cost of the
        array version."""
        known, share, kinds = self._known, task.gpu_milli, self._node_hash_list
        # per node: key of its state now and, per GPU a share may take (one choice for whole GPUs), the key after or
        # None; then its CPU left and free GPU milli now and after
        per_node: list[tuple[int, list[int | None], int, int, int, int]] = []
        new: dict[int, tuple[int, int, list[int]]] = {}  # unknown state -> a node, CPU and GPUs left giving it
        for node in nodes:
            cpu, row = cluster.free_cpu_milli.item(node), cluster.gpu_free_milli[node].tolist()
            kind, after, row_hash, free = kinds[node], cpu - task.cpu_milli, sum(_TABLE[f] for f in row), sum(row)
            now = ((target.cpu_step(cpu) * _H0 + row_hash) * _H1 + kind) & _MASK
            if now not in known:
                new.setdefault(now, (node, cpu, row))
            after_hash = target.cpu_step(after) * _H0 + row_hash
            if share:  # the share on each GPU it fits on: GPUs alike in free milli give the same state
                by_free: dict[int, int] = {}
                for gpu, left in enumerate(row):
                    if left >= share and left not in by_free:
                        key = by_free[left] = ((after_hash - _TABLE[left] + _TABLE[left - share]) * _H1 + kind) & _MASK
                        if key not in known:
                            new.setdefault(key, (node, after, [*row[:gpu], left - share, *row[gpu + 1:]]))
                options: list[int | None] = [by_free.get(left) for left in row]
                per_node.append((now, options, cpu, after, free, free - share))
                continue
            # whole GPUs come from the idle ones with the lowest index (or none are asked)
            taken = min(task.gpus, row.count(GPU_MILLI))
            key = ((after_hash + taken * (_TABLE[0] - _TABLE[GPU_MILLI])) * _H1 + kind) & _MASK
            if key not in known:
                idle = [gpu for gpu, left in enumerate(row) if left == GPU_MILLI][:taken]
                new.setdefault(key, (node, after, [0 if gpu in idle else left for gpu, left in enumerate(row)]))
            per_node.append((now, [key], cpu, after, free, free - taken * GPU_MILLI))
        if new:
            assert self._model_ok is not None and self._node_weight is not None
            at = [node for node, _, _ in new.values()]
            values = self.node_value(target, np.array([cpu for _, cpu, _ in new.values()]),
                                     np.array([row for _, _, row in new.values()]), self._model_ok.T[at],
                                     self._node_weight[at])
            known.update(zip(new, values.tolist(), strict=True))
        self._choose(cache, nodes, per_node, task, target)
        version = cluster.version
        for node in nodes:
            cache.version[node] = version.item(node)

    def _choose(self, cache: _Cache, nodes: list[int], per_node: list[tuple[int, list[int | None], int, int, int, int]],
                task: Resources, target: TargetWorkload) -> None:
        """`_refresh_few`'s scores and GPU choices, from each node's states now and after (measures known)."""
        known, score_of, weight = self._known, self._score_of, self._node_weight
        assert weight is not None
        decreases: list[dict[int, float]] = []
        unknown: list[float] = []
        for node, (now, options, cpu, after, free, free_after) in zip(nodes, per_node, strict=True):
            if self.reads_cpu_left:
                w = weight.item(node)
                value_now = float(self.finish(target, known[now], cpu, free, w))
                decrease = {key: value_now - float(self.finish(target, known[key], after, free_after, w))
                            for key in options if key is not None}
            else:
                value_now = known[now]
                decrease = {key: value_now - known[key] for key in options if key is not None}
            unknown.extend(d for d in decrease.values() if d not in score_of)
            decreases.append(decrease)
        if unknown:
            score_of.update(zip(unknown, self.to_score(np.array(unknown)).tolist(), strict=True))
        for node, (_, options, *_), decrease in zip(nodes, per_node, decreases, strict=True):
            per_gpu = [-1.0 if key is None else score_of[decrease[key]] for key in options]
            best = max(range(len(per_gpu)), key=per_gpu.__getitem__)  # the first of equals: lowest GPU index
            cache.score[node] = max(per_gpu[best], 0.0)
            cache.gpu[node] = best if task.gpu_milli else -1

    def _values(self, target: TargetWorkload, cpu: np.ndarray, multiset: np.ndarray, nodes: np.ndarray,
                free: np.ndarray, rows_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """The measure of many states (CPU left `cpu[r]`, GPUs left hashed as `multiset[r]`, free GPU milli `free[r]`
        on node `nodes[r]`; `rows_of(r)` builds the GPUs left of states r): `node_value` of each distinct state
        computed once for the target, then `finish`. States are keyed by a 64-bit hash of the CPU step, the GPUs
        left as a multiset (a sum of random numbers, one per free milli: the measure does not depend on the order of
        GPUs, so no sort), the model mask and the node weight; the measure does not depend on the batch it is
        computed in either: a node's few states recur, so most are known."""
        cpu_step = np.searchsorted(target.cpu_steps, cpu, side="right")
        with np.errstate(over="ignore"):
            key = (cpu_step.astype(np.uint64) * _HASH[0] + multiset) * _HASH[1] + self._node_hash[nodes]
        # a batch holds few distinct states (about 50 in 1,200 on openb): Python looks at each once
        distinct, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        known, keys = self._known, distinct.tolist()
        new = [i for i, k in enumerate(keys) if k not in known]
        assert self._model_ok is not None and self._node_weight is not None
        if new:
            picked = first[new]
            at = nodes[picked]
            values = self.node_value(target, cpu[picked], rows_of(picked), self._model_ok[:, at].T,
                                     self._node_weight[at])
            known.update(zip([keys[i] for i in new], values.tolist(), strict=True))
        value = np.array([known[k] for k in keys])[inverse.reshape(-1)]
        if not self.reads_cpu_left:
            return value
        return self.finish(target, value, cpu, free, self._node_weight[nodes])

    def place(self, job: Job, ctx: CycleContext, fit: np.ndarray, score: np.ndarray) -> Allocation | None:
        self._rank = tie_rank(ctx, getattr(self, "_rank", None))
        alloc = top_node(job, ctx, fit, score, self._rank)
        if alloc is None or not job.task.gpu_milli or alloc.nodes.size != 1:
            return alloc
        if getattr(self, "_last", None) is None:
            self.score(job, ctx)
        gpu = int(self._last.gpu[int(alloc.nodes[0])])
        if gpu < 0 or int(alloc.counts[0]) != 1:
            return alloc
        return Allocation(alloc.nodes, alloc.counts, alloc.task, gpu_idx=np.array([gpu]))


class Fgd(_FragmentationPlacer):
    """Fragmentation gradient descent (Weng et al., USENIX ATC'23, "Beware of Fragmentation"): place the task where
    the node's expected fragmented GPU milli, measured against the target workload, grows least (or shrinks most).
    Score = trunc(100 x sigmoid(decrease / 1000)), as in the authors' simulator; a share goes to the GPU of the node
    with the best score. `target`: a TargetWorkload or (kinds, weights); None learns the distribution of the requests
    scored so far."""


class SteadyPack(_FragmentationPlacer):
    """trimtab's packing policy: FGD's expected fragmentation over the requests that may use the node, plus the GPU
    a node's CPU can no longer feed.

    A GPU is only usable with CPU beside it, and the target workload says how much: its GPU requests bring
    `cpu_per_gpu_milli` CPU per milli-GPU on average (nothing fitted). A node's free GPU milli beyond what its free
    CPU can feed at that ratio counts as stranded, in FGD's unit; the task goes where fragmentation + stranded grows
    least, scored and tie-broken as FGD. FGD sees CPU only one request ahead (a node is "short of CPU" for a kind
    only once that kind no longer fits); steady-pack sees the whole mix, so CPU-hungry and CPU-only requests drift to
    CPU-rich nodes before the CPU-poor ones run dry.

    GPU models, two rules, both read off the target workload. (1) FGD counts every free GPU of a node as fragmented
    for a request kind that may not use the node's model, so a model that many requests exclude (a small one, when
    constraints favour the common model) looks fragmented and FGD fills it first with requests that could have gone
    anywhere, using up the capacity that the requests constrained to it need. steady-pack measures a node only
    against the kinds that may use it; a kind constrained elsewhere adds nothing there. (2) Where the requests
    constrained to a model ask for a larger share of the workload than the model's share of the cluster (ratio
    r > 1), the model cannot serve them all: its free GPU milli counts against the node's value by r - 1
    (`TargetWorkload.oversubscription`), so taking it costs a request that could go elsewhere that much per milli.
    Both vanish on a workload without model constraints. See docs/placement.md."""

    reads_cpu_left = True  # the CPU left feeds GPUs in proportion

    def node_weight(self, target: TargetWorkload, cluster: ClusterState) -> np.ndarray:
        return target.oversubscription(cluster)

    def node_value(self, target: TargetWorkload, cpu_left: np.ndarray, gpu_left: np.ndarray,
                   model_ok: np.ndarray, node_weight: np.ndarray) -> np.ndarray:
        return target.frag_milli(cpu_left, gpu_left, model_ok, other_models_count=False)

    def finish(self, target: TargetWorkload, value: Any, cpu_left: Any, free_milli: Any, node_weight: Any) -> Any:
        stranded = free_milli - cpu_left / max(target.cpu_per_gpu_milli, 1e-9)  # free milli the CPU cannot feed
        # `(stranded > 0)` as a factor keeps what is positive, on arrays and on one state's scalars alike (a numpy
        # call per state would cost more than the rest of the state's score)
        return value + stranded * (stranded > 0) - node_weight * free_milli


PLUGINS = {
    "fgd": Fgd,
    "steady-pack": SteadyPack,
}
