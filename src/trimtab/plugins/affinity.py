"""Inter-pod affinity and anti-affinity, as Kubernetes's InterPodAffinity plugin: a filter, a scorer and a place.

A pod is one task of a running job, carrying its job's labels in its job's namespace (tenant); a topology domain is
the set of nodes sharing one value of a node label (the term's topology key)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from trimtab.cluster import Allocation, ClusterState
from trimtab.model import Job, Node, PodAffinityTerm
from trimtab.plugins.locality import ScorePack
from trimtab.plugins.place import Pack
from trimtab.policy import CycleContext, Decision, Plugin, RunningJob

HOSTNAME = "kubernetes.io/hostname"


def selects(term: PodAffinityTerm, owner: Job, pod: Job) -> bool:
    """Whether `term`, stated by the pods of `owner`, selects the pods of `pod`: `pod`'s namespace is one the term
    names (by default `owner`'s own) and its labels match the term's selector (a missing selector matches none)."""
    if term.selector is None:
        return False
    namespaces = term.namespaces if term.namespaces is not None else (owner.tenant,)
    if not term.all_namespaces and pod.tenant not in namespaces:
        return False
    return term.selector.matches(pod.labels)


class _Domains:
    """Each node's topology domain for a key, as an index from 1 (0: the node lacks the label), cached per key.
    A node without a `kubernetes.io/hostname` label is its own host domain (the kubelet sets it to the node's
    name)."""

    def __init__(self) -> None:
        self._nodes: Sequence[Node] = ()
        self._by_key: dict[str, tuple[np.ndarray, int]] = {}

    def of(self, key: str, cluster: ClusterState) -> tuple[np.ndarray, int]:
        """(domain index per node, number of indices including 0)."""
        if self._nodes is not cluster.nodes:
            self._nodes, self._by_key = cluster.nodes, {}
        got = self._by_key.get(key)
        if got is None:
            index: dict[str, int] = {}
            ids = []
            for node in cluster.nodes:
                value = node.labels.get(key, node.name if key == HOSTNAME else None)
                ids.append(0 if value is None else index.setdefault(value, len(index) + 1))
            got = (np.array(ids, dtype=np.int64), len(index) + 1)
            self._by_key[key] = got
        return got


def _placers() -> Mapping[str, Any]:
    from trimtab.plugins import fragmentation, locality, place, score

    return {**place.PLUGINS, **score.PLUGINS, **fragmentation.PLUGINS, **locality.PLUGINS}


class InterPodAffinity(Plugin):
    """Pod affinity and anti-affinity with Kubernetes's semantics, over running jobs (including those started
    earlier in the same cycle: the framework books each start before it tries the next job).

    Filter: a node passes when
      - no running pod's required anti-affinity term selects the job and covers the node's domain (symmetry);
      - for the job's required affinity terms: some running pod matches all of them and sits in the node's domain
        of every term's key; or, when no running pod matches them all and the job matches its own terms (the first
        pod of a series), the node carries every key;
      - no running pod selected by one of the job's required anti-affinity terms sits in the node's domain (a node
        without the key passes).
    Score (0..100, min-max scaled as Kubernetes does): per node, the weights of the job's preferred terms over the
    running pods they select in the node's domains (anti-affinity subtracts), plus the symmetric part: running
    pods' required affinity terms selecting the job add `hard_affinity_weight`, their preferred terms add or
    subtract their weight. Each pod counts once.
    Place: the `place` plugin (default `score-pack` with no tolerance: the best-scored nodes that hold the gang,
    then packing) chooses the nodes, after the gang's own constraints: members that select each other through a
    required anti-affinity term go one per domain; members that satisfy their own required affinity, with no
    running pod to join, go into one domain together (as Kubernetes places them one after another).
    Close: a job waiting for required affinity is tried again at once (a wake-up) when a pod it selects starts.

    Jobs without inter-pod terms cost nothing while no running job states a term that could concern them."""

    filter_reason: ClassVar[str] = "do not match the pod affinity or anti-affinity"

    def __init__(self, place: str | Mapping[str, Mapping[str, Any]] | None = None,
                 hard_affinity_weight: int = 1) -> None:
        ref = place if place is not None else {"score-pack": {"tolerance": 0.0}}
        name, args = (ref, {}) if isinstance(ref, str) else next(iter(ref.items()))
        factory = _placers().get(name)
        if factory is None:
            raise ValueError(f"pod-affinity: unknown place plugin {name!r}")
        self._inner: Plugin = factory(**dict(args or {}))
        if type(self._inner).place is Plugin.place:
            raise ValueError(f"pod-affinity: plugin {name!r} has no place point")
        self._inner.name = name  # type: ignore[misc]
        # score-pack on equal scores is pack: take the shorter way for the common job, which no score tells apart
        self._pack_if_flat = Pack() if isinstance(self._inner, ScorePack) and self._inner.pack_slack_gpus is None \
            else None
        if hard_affinity_weight < 0:
            raise ValueError(f"pod-affinity: hard_affinity_weight must be >= 0, got {hard_affinity_weight}")
        self.hard_affinity_weight = int(hard_affinity_weight)
        self._domains = _Domains()
        self._anti: dict[str, Job] = {}  # jobs seen with required anti-affinity (what symmetry checks)
        self._attract: dict[str, Job] = {}  # jobs seen with terms that score others (the symmetric score)
        self._waiters: dict[str, Job] = {}  # jobs with required affinity seen waiting
        self._adopted = False
        self._ones = np.ones(0, dtype=bool)
        self._zeros = np.zeros(0)

    # ------------------------------------------------------------------------------------------- books

    def _remember(self, job: Job, waiting: bool = True) -> None:
        pa = job.pod_affinity
        assert pa is not None
        if pa.required_anti:
            self._anti[job.id] = job
        if pa.required or pa.preferred or pa.preferred_anti:
            self._attract[job.id] = job
        if pa.required and waiting:
            self._waiters[job.id] = job

    @staticmethod
    def _running(jobs: Mapping[str, Job], ctx: CycleContext) -> list[RunningJob]:
        return [run for jid in jobs if (run := ctx.running.get(jid)) is not None and jid not in ctx.releasing]

    @staticmethod
    def _all_running(ctx: CycleContext) -> list[RunningJob]:
        """The running jobs that stay: victims of the preemption being tried are gone for its placement."""
        if not ctx.releasing:
            return list(ctx.running.values())
        return [run for jid, run in ctx.running.items() if jid not in ctx.releasing]

    def open(self, ctx: CycleContext) -> None:
        if not self._adopted:  # jobs running before the first cycle (re-adopted by serve) were never filtered here
            self._adopted = True
            for run in ctx.running.values():
                if run.job.pod_affinity is not None:
                    self._remember(run.job, waiting=False)
            return
        # every job that starts is filtered (and so remembered) first: only running ones need keeping
        if self._anti:
            self._anti = {jid: job for jid, job in self._anti.items() if jid in ctx.running}
        if self._attract:
            self._attract = {jid: job for jid, job in self._attract.items() if jid in ctx.running}

    def close(self, ctx: CycleContext, decision: Decision) -> float | None:
        if not self._waiters or not decision.starts:
            return None
        for job, _ in decision.starts:
            self._waiters.pop(job.id, None)
        started = [job for job, _ in decision.starts]
        woken = [w.id for w in self._waiters.values()
                 if any(all(selects(t, w, s) for t in w.pod_affinity.required) for s in started)]  # type: ignore[union-attr]
        if not woken:
            return None
        pending = {job.id for job in ctx.pending}
        self._waiters = {jid: job for jid, job in self._waiters.items() if jid in pending}
        # the scheduler keeps a shape that could not start blocked until something is released; a start is not a
        # release, so ask for a cycle right after this one (it unblocks every shape)
        return math.nextafter(ctx.now_s, math.inf) if any(w in pending for w in woken) else None

    # ------------------------------------------------------------------------------------------- filter

    def _near(self, key: str, runs: Iterable[RunningJob], ctx: CycleContext) -> np.ndarray:
        """Nodes in a domain of `key` that holds a task of one of `runs` (never a node without the key)."""
        dom, count = self._domains.of(key, ctx.cluster)
        hit = np.zeros(count, dtype=bool)
        for run in runs:
            hit[dom[run.alloc.nodes]] = True
        hit[0] = False
        return hit[dom]

    def _affinity_targets(self, job: Job, terms: tuple[PodAffinityTerm, ...],
                          ctx: CycleContext) -> list[np.ndarray] | None:
        """Per term, the nodes near a running pod that matches all `terms`; None when no such pod sits on a node
        carrying a term's key (the case where the first pod of a series may go anywhere)."""
        runs = [run for run in self._all_running(ctx) if all(selects(t, job, run.job) for t in terms)]
        if not runs:
            return None
        near = [self._near(t.topology_key, runs, ctx) for t in terms]
        return near if any(m.any() for m in near) else None

    def filter(self, job: Job, ctx: CycleContext) -> np.ndarray:
        n = len(ctx.cluster)
        pa = job.pod_affinity
        if pa is not None:
            self._remember(job)
        owners = self._running(self._anti, ctx) if self._anti else []
        if not owners and (pa is None or not (pa.required or pa.required_anti)):
            if len(self._ones) != n:
                self._ones = np.ones(n, dtype=bool)
            return self._ones
        mask = np.ones(n, dtype=bool)
        for run in owners:  # symmetry: a running pod's anti-affinity keeps the job out of its domains
            for term in run.job.pod_affinity.required_anti:  # type: ignore[union-attr]
                if selects(term, run.job, job):
                    mask &= ~self._near(term.topology_key, (run,), ctx)
        if pa is None:
            return mask
        if pa.required:
            targets = self._affinity_targets(job, pa.required, ctx)
            if targets is not None:
                for near in targets:
                    mask &= near
            elif all(selects(t, job, job) for t in pa.required):
                for term in pa.required:
                    mask &= self._domains.of(term.topology_key, ctx.cluster)[0] > 0
            else:
                mask[:] = False
        for term in pa.required_anti:
            runs = [run for run in self._all_running(ctx) if selects(term, job, run.job)]
            if runs:
                mask &= ~self._near(term.topology_key, runs, ctx)
        return mask

    # ------------------------------------------------------------------------------------------- score

    def score(self, job: Job, ctx: CycleContext) -> np.ndarray:
        n = len(ctx.cluster)
        pa = job.pod_affinity
        if pa is not None:
            self._remember(job)
        own = pa is not None and bool(pa.preferred or pa.preferred_anti)
        others = self._running(self._attract, ctx) if self._attract else []
        if not own and not others:
            if len(self._zeros) != n:
                self._zeros = np.zeros(n)
            return self._zeros
        totals: dict[str, np.ndarray] = {}

        def add(key: str, run: RunningJob, weight: int) -> None:
            dom, count = self._domains.of(key, ctx.cluster)
            per_domain = totals.get(key)
            if per_domain is None:
                per_domain = totals[key] = np.zeros(count)
            np.add.at(per_domain, dom[run.alloc.nodes], weight * run.alloc.counts)

        if own:
            assert pa is not None
            for run in self._all_running(ctx):
                for term in pa.preferred:
                    if selects(term, job, run.job):
                        add(term.topology_key, run, term.weight)
                for term in pa.preferred_anti:
                    if selects(term, job, run.job):
                        add(term.topology_key, run, -term.weight)
        for run in others:
            theirs = run.job.pod_affinity
            assert theirs is not None
            if self.hard_affinity_weight:
                for term in theirs.required:
                    if selects(term, run.job, job):
                        add(term.topology_key, run, self.hard_affinity_weight)
            for term in theirs.preferred:
                if selects(term, run.job, job):
                    add(term.topology_key, run, term.weight)
            for term in theirs.preferred_anti:
                if selects(term, run.job, job):
                    add(term.topology_key, run, -term.weight)
        raw = np.zeros(n)
        for key, per_domain in totals.items():
            per_domain[0] = 0.0  # nodes without the key get nothing from it
            raw += per_domain[self._domains.of(key, ctx.cluster)[0]]
        low, high = float(raw.min()), float(raw.max())
        if high <= low:
            return np.zeros(n)
        return (raw - low) * (100.0 / (high - low))

    # ------------------------------------------------------------------------------------------- place

    def place(self, job: Job, ctx: CycleContext, fit: np.ndarray, score: np.ndarray) -> Allocation | None:
        pa = job.pod_affinity
        if pa is None or job.tasks == 1 or not (pa.required or pa.required_anti):
            if self._pack_if_flat is not None and not score.any():
                return self._pack_if_flat.place(job, ctx, fit, score)
            return self._inner.place(job, ctx, fit, score)
        spread = [t for t in pa.required_anti if selects(t, job, job)]
        together = (bool(pa.required) and all(selects(t, job, job) for t in pa.required)
                    and self._affinity_targets(job, pa.required, ctx) is None)
        if not spread and not together:
            return self._inner.place(job, ctx, fit, score)
        for term in spread:
            fit = self._one_per_domain(term.topology_key, fit, score, ctx)
        if together:
            return self._in_one_domain(job, sorted({t.topology_key for t in pa.required}), fit, score, ctx)
        if int(np.minimum(fit, job.tasks).sum()) < job.tasks:
            return None
        return self._inner.place(job, ctx, fit, score)

    def _one_per_domain(self, key: str, fit: np.ndarray, score: np.ndarray, ctx: CycleContext) -> np.ndarray:
        """`fit` with at most one task per domain of `key`: on the domain's node of the highest score, then of the
        fewest free GPUs (best fit), then of the lowest index. Nodes without the key keep their fit."""
        dom, _ = self._domains.of(key, ctx.cluster)
        labelled = dom > 0
        out = np.where(labelled, 0, fit)
        cand = np.flatnonzero(labelled & (fit > 0))
        if cand.size:
            order = cand[np.lexsort((cand, ctx.cluster.free_gpus[cand], -score[cand]))]
            _, first = np.unique(dom[order], return_index=True)
            out[order[first]] = 1
        return out

    def _in_one_domain(self, job: Job, keys: list[str], fit: np.ndarray, score: np.ndarray,
                       ctx: CycleContext) -> Allocation | None:
        """The whole gang inside one domain (the same value of every key): domains that hold it, the best score
        first, then the tightest (fewest tasks to spare), then the lowest node index; the place plugin chooses
        the nodes inside."""
        columns = [self._domains.of(key, ctx.cluster)[0] for key in keys]
        labelled = np.logical_and.reduce([c > 0 for c in columns])
        _, group = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
        group = np.where(labelled, group.reshape(-1) + 1, 0)
        capped = np.where(labelled, np.minimum(fit, job.tasks), 0)
        room = np.bincount(group, weights=capped)
        room[0] = 0
        best = np.full(room.size, -np.inf)
        np.maximum.at(best, group[capped > 0], score[capped > 0])
        first = np.full(room.size, len(fit))
        np.minimum.at(first, group, np.arange(len(fit)))
        candidates = np.flatnonzero(room >= job.tasks)
        for g in candidates[np.lexsort((first[candidates], room[candidates], -best[candidates]))]:
            alloc = self._inner.place(job, ctx, np.where(group == g, fit, 0), score)
            if alloc is not None:
                return alloc
        return None


PLUGINS = {"pod-affinity": InterPodAffinity}
