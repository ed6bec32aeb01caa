"""Preempt plugins: which running jobs may be stopped so that a waiting job can start, in what rank, under which
guards; the victims themselves are chosen by the one search of plugins/victims.py.

lower-order (victims ordered after the job in the queue order: LAS, SRTF), lower-priority, guarded (lower
priority with anti-thrash guards and checkpoint-aware victims) and consolidate (move small jobs off a few nodes
when a gang is blocked by fragmentation)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from trimtab.model import Job
from trimtab.plugins.victims import fewest_victims
from trimtab.policy import CycleContext, Decision, Plugin, RunningJob


class LowerOrder(Plugin):
    """Victims are running jobs ordered strictly after the job by the first `key_depth` parts of the profile's
    order key (worst first). A victim's level in the search is its whole order key, so the policy's own order
    decides between nodes before the number of victims does; or its first `level_depth` parts (None: all), so
    that victims alike in those (one priority class and LAS queue) are alike to the search, which then stops the
    fewest of them and, for a gang, those on the nodes with the most room (the gang spans fewer nodes, and fewer
    node failures stop it). With `[las, fifo]` and depth 1, a
    job preempts only jobs in a lower LAS queue, never one of its own queue (as in Tiresias). Anti-thrash guards
    (filters of the victims): a job that started less than `min_runtime_s` ago is spared, so a job is not stopped
    before it got anything done; a job already evicted `max_evictions` times (None: no cap) is not evicted again.

    Checkpoint-aware victims (`checkpoint_window_s`, None: off): a job is a victim only in the first
    `checkpoint_window_s` of progress after a checkpoint (every `checkpoint_s` of progress, or the job's own
    interval; a resumed attempt makes progress `restart_s` after it starts), so an eviction loses at most that
    much progress; the others are spared until their next checkpoint, and the scheduler looks again then (at most
    once every `checkpoint_window_s`: a victim stays eligible that long). A job waits so for at most one
    `checkpoint_s` (every victim has passed a checkpoint by then; a gang that needs many victims at once may not
    find them all in their windows together), then evicts as without the window. A job of a higher priority class
    than its victim does not wait for the checkpoint (a class above is urgent).

    Victims the size of the need (`max_victim_gpus_per_gpu`, None: off): in its first `victim_size_wait_s` after
    submission, a job passes over victims of its class that hold more than this many times the GPUs it asks for
    (stopping a gang of 8 GPUs for a job of one restarts 8 GPUs, and the gang, resumed on whatever GPUs are free
    then, spans more nodes, any of whose failures stops it); then it stops them as it finds them. Counted from
    the submission, not from the first attempt: jobs alike that wait behind it (a cycle does not ask them while
    it fails) wait no longer for it. A job that finds no victim so passes its limit on to the jobs after it in
    the cycle, so a later job never finds victims an earlier one was refused (the answers stay monotone, as the
    cycle assumes when it stops asking larger jobs). Off in `steady`: see docs/steady.md for what it gives."""

    def __init__(self, min_runtime_s: float = 0.0, key_depth: int = 1, max_evictions: int | None = None,
                 checkpoint_window_s: float | None = None, checkpoint_s: float = 600.0,
                 restart_s: float = 30.0, level_depth: int | None = None,
                 max_victim_gpus_per_gpu: float | None = None, victim_size_wait_s: float = 300.0) -> None:
        if key_depth < 1 or (level_depth is not None and level_depth < 1):
            raise ValueError("key_depth and level_depth must be >= 1")
        if max_victim_gpus_per_gpu is not None and max_victim_gpus_per_gpu < 1:
            raise ValueError("max_victim_gpus_per_gpu must be >= 1 (or null: off)")
        if victim_size_wait_s < 0:
            raise ValueError("victim_size_wait_s must be >= 0")
        if max_evictions is not None and max_evictions < 0:
            raise ValueError("max_evictions must be >= 0 (or null: no cap)")
        if checkpoint_window_s is not None and not 0 < checkpoint_window_s <= checkpoint_s:
            raise ValueError("checkpoint_window_s must be in (0, checkpoint_s] (or null: off)")
        self.min_runtime_s = float(min_runtime_s)
        self.key_depth = key_depth
        self.max_evictions = max_evictions
        self.checkpoint_window_s = checkpoint_window_s
        self.checkpoint_s = float(checkpoint_s)
        self.restart_s = float(restart_s)
        self.level_depth = level_depth
        self.max_victim_gpus_per_gpu = max_victim_gpus_per_gpu
        self.victim_size_wait_s = float(victim_size_wait_s)
        self.evictions: dict[str, int] = {}
        self._guard_ends_s = math.inf  # when the first job spared by a guard in this cycle may be a victim
        self._waiting_since_s: dict[str, float] = {}  # jobs waiting for their victims' checkpoints: since when
        self._too_big_gpus = math.inf  # victims above this many GPUs are passed over for the rest of the cycle

    def open(self, ctx: CycleContext) -> None:
        self._guard_ends_s = math.inf
        self._too_big_gpus = math.inf

    def preempt(self, job: Job, ctx: CycleContext) -> list[str] | None:
        depth = self.key_depth
        ranked = ctx.running_ranked  # ascending: jobs ordered after `key` form its tail
        if not ranked:
            return None
        key = ctx.order_key(job)[:depth]
        if ranked[-1][0][:depth] <= key:
            return None  # no running job is ordered after it (most attempts: a waiting job of the worst level)
        first = bisect.bisect_right(ranked, key, key=lambda entry: entry[0][:depth])
        now_s, min_runtime_s = ctx.now_s, self.min_runtime_s
        cap, evictions, window_s = self.max_evictions, self.evictions, self.checkpoint_window_s
        if window_s is not None:
            patience_ends_s = self._waiting_since_s.get(job.id, now_s) + self.checkpoint_s
            window_s = window_s if now_s < patience_ends_s else None
        too_big_gpus, sized_until_s = self._too_big_gpus, job.submit_s + self.victim_size_wait_s
        if self.max_victim_gpus_per_gpu is not None and now_s < sized_until_s:
            too_big_gpus = min(too_big_gpus, job.gpus * self.max_victim_gpus_per_gpu)
        sized = too_big_gpus < math.inf
        passed_over: list[str] = []  # by their size
        level_depth = self.level_depth
        spared: list[str] = []  # by the checkpoint window

        def worst_first() -> Iterator[tuple[tuple[Any, ...], str]]:
            for i in range(len(ranked) - 1, first - 1, -1):
                key, start_s, jid = ranked[i]
                level = key if level_depth is None else key[:level_depth]
                if cap is not None and evictions.get(jid, 0) >= cap:
                    continue
                if now_s - start_s < min_runtime_s:  # spared for now: the scheduler must look again when it ends
                    self._guard_ends_s = min(self._guard_ends_s, start_s + min_runtime_s)
                elif ctx.running[jid].job.priority < job.priority:
                    yield level, jid
                elif sized and ctx.running[jid].alloc.gpus > too_big_gpus:
                    passed_over.append(jid)
                elif window_s is None:
                    yield level, jid
                else:
                    to_checkpoint_s = self._to_checkpoint_s(ctx.running[jid], now_s)
                    if to_checkpoint_s <= 0.0:
                        yield level, jid
                    else:
                        spared.append(jid)
                        self._guard_ends_s = min(self._guard_ends_s, now_s + max(to_checkpoint_s, window_s))

        victims = fewest_victims(job, ctx, worst_first())
        if victims is None and passed_over:  # jobs after it pass over as much (answers stay monotone)
            self._too_big_gpus = too_big_gpus
            if sized_until_s > now_s:
                self._guard_ends_s = min(self._guard_ends_s, sized_until_s)
        if victims is None and spared:
            since_s = self._waiting_since_s.setdefault(job.id, now_s)
            self._guard_ends_s = min(self._guard_ends_s, since_s + self.checkpoint_s)
        elif victims is not None:
            self._waiting_since_s.pop(job.id, None)
        return victims

    def _to_checkpoint_s(self, run: RunningJob, now_s: float) -> float:
        """0 when `run` is within `checkpoint_window_s` of progress after its last checkpoint, else the seconds to
        its next checkpoint (progress at the reference speed: what a run without a speed model makes)."""
        assert self.checkpoint_window_s is not None
        step_s = self.checkpoint_s if run.job.checkpoint_s is None else run.job.checkpoint_s
        if step_s <= 0:
            return 0.0  # a job that loses nothing when stopped (checkpoint_s 0) need not be waited for
        restart_s = self.restart_s if run.prior_attained_gpu_s > 0 else 0.0
        executed_s = run.prior_executed_s + max(now_s - run.start_s - restart_s, 0.0)
        since_s = executed_s - max(run.prior_executed_s, executed_s // step_s * step_s)
        return 0.0 if since_s <= self.checkpoint_window_s else step_s - since_s

    def close(self, ctx: CycleContext, decision: Decision) -> float | None:
        if self._waiting_since_s:  # a job that started (its victims ended on their own) waits no longer
            for started, _ in decision.starts:
                self._waiting_since_s.pop(started.id, None)
        if self.max_evictions is not None:
            for victim in decision.preemptions:
                self.evictions[victim] = self.evictions.get(victim, 0) + 1
        return self._guard_ends_s if self._guard_ends_s < math.inf else None


class LowerPriority(Plugin):
    """Victims are running jobs of strictly lower priority (their level in the search), lowest first, then most
    recently started first."""

    def __init__(self, min_runtime_s: float = 0.0) -> None:
        self.min_runtime_s = float(min_runtime_s)

    def preempt(self, job: Job, ctx: CycleContext) -> list[str] | None:
        ranked = sorted(
            (run.job.priority, -run.start_s, jid)
            for jid, run in ctx.running.items()
            if run.job.priority < job.priority and ctx.now_s - run.start_s >= self.min_runtime_s
        )
        return fewest_victims(job, ctx, [(priority, jid) for priority, _, jid in ranked])


class Guarded(Plugin):
    """A job may evict running jobs of strictly lower priority, only if that makes it fit, under three anti-thrash
    guards (each off when set to None):

    - `min_runtime_s`: a job that started less than this ago is not evicted (it has not got anything done yet);
    - `max_evictions_per_job`: a job already evicted this many times is not evicted again;
    - `budget_per_hour`: GPUs evicted over the last hour stay within this fraction of the cluster's GPUs; a job
      whose victims would overrun it waits instead.

    Victims are the lowest priority first (their level in the search), then those that lose the least progress
    (GPUs x run time since their last checkpoint, every `checkpoint_s`, or the job's own interval), then the fewest
    GPUs; the search gives back victims that turn out not to be needed, and the budget applies to its answer. A
    job whose priority class says `preemptionPolicy: Never` never evicts (the framework does not ask for it)."""

    def __init__(self, min_runtime_s: float | None = 600.0, max_evictions_per_job: int | None = 2,
                 budget_per_hour: float | None = 0.5, checkpoint_s: float = 600.0) -> None:
        self.min_runtime_s = min_runtime_s
        self.max_evictions_per_job = max_evictions_per_job
        self.budget_per_hour = budget_per_hour
        self.checkpoint_s = float(checkpoint_s)
        self.evictions: dict[str, int] = {}
        self._evicted: list[tuple[float, int]] = []  # (time, GPUs) of evictions in the last hour
        self._offered: dict[str, int] = {}

    def open(self, ctx: CycleContext) -> None:
        self._offered = {}
        horizon = ctx.now_s - 3600.0
        self._evicted = [(t, g) for t, g in self._evicted if t > horizon]

    def _loss_gpu_s(self, jid: str, ctx: CycleContext) -> float:
        run = ctx.running[jid]
        step = getattr(run.job, "checkpoint_s", None) or self.checkpoint_s
        since = ctx.executed_s(jid) % step if step > 0 else 0.0
        return run.alloc.gpus * min(since, ctx.now_s - run.start_s + run.prior_executed_s)

    def preempt(self, job: Job, ctx: CycleContext) -> list[str] | None:
        ranked = sorted(
            (run.job.priority, self._loss_gpu_s(jid, ctx), run.alloc.gpus, -run.start_s, jid)
            for jid, run in ctx.running.items()
            if run.job.priority < job.priority
            and (self.min_runtime_s is None or ctx.now_s - run.start_s >= self.min_runtime_s)
            and (self.max_evictions_per_job is None or self.evictions.get(jid, 0) < self.max_evictions_per_job)
        )
        victims = fewest_victims(job, ctx, [(r[0], r[-1]) for r in ranked])
        if not victims:
            return None
        gpus = sum(ctx.running[v].alloc.gpus for v in victims)
        if self.budget_per_hour is not None:
            spent = sum(g for _, g in self._evicted)
            if spent + gpus > self.budget_per_hour * ctx.cluster.total_gpus:
                return None
        self._offered.update({v: ctx.running[v].alloc.gpus for v in victims})
        return victims

    def close(self, ctx: CycleContext, decision: Decision) -> float | None:
        for victim in decision.preemptions:
            if victim in self._offered:
                self.evictions[victim] = self.evictions.get(victim, 0) + 1
                self._evicted.append((ctx.now_s, self._offered[victim]))
        if self._evicted and self.budget_per_hour is not None:
            return self._evicted[0][0] + 3600.0  # budget comes back: ask again then
        return None


class Consolidate(Plugin):
    """For a gang blocked by fragmentation (enough GPUs are free in all, but not enough on the nodes to hold its
    multi-GPU tasks): move small jobs (at most `small_gpus` GPUs, on one node, ordered after the gang) off the nodes
    where that costs least, so whole tasks fit. The cost of a move is the progress it loses (GPUs x run time since
    its last checkpoint) plus a restart (`restart_s` x GPUs); nodes are freed cheapest per task gained first, with
    at most `max_moves` jobs moved. Moved jobs wait in the queue and restart in the holes the gang leaves (the
    scheduler is woken a second later for that). Gangs of one-GPU tasks are never fragmented and are left alone."""

    def __init__(self, small_gpus: int = 2, max_moves: int = 4, checkpoint_s: float = 600.0,
                 restart_s: float = 30.0) -> None:
        self.small_gpus = int(small_gpus)
        self.max_moves = int(max_moves)
        self.checkpoint_s = float(checkpoint_s)
        self.restart_s = float(restart_s)
        self._moved = False

    def open(self, ctx: CycleContext) -> None:
        self._moved = False

    def _cost_gpu_s(self, jid: str, ctx: CycleContext) -> float:
        run = ctx.running[jid]
        step = getattr(run.job, "checkpoint_s", None) or self.checkpoint_s
        lost = ctx.executed_s(jid) % step if step > 0 else 0.0
        return run.alloc.gpus * (min(lost, ctx.now_s - run.start_s) + self.restart_s)

    def preempt(self, job: Job, ctx: CycleContext) -> list[str] | None:
        per_task = job.task.gpus
        if per_task <= 1:
            return None
        cl = ctx.cluster
        allowed = cl.healthy if ctx.node_mask is None else cl.healthy & ctx.node_mask(job)
        free = np.where(allowed, cl.free_gpus, 0)
        tasks_now = int((free // per_task).sum())
        if tasks_now >= job.tasks or int(free.sum()) < job.gpus:
            return None  # it fits already, or it lacks GPUs rather than whole nodes: not fragmentation
        key = ctx.order_key(job)
        movable: dict[int, list[tuple[float, int, str]]] = {}
        for jid, run in ctx.running.items():
            if (len(run.alloc.nodes) == 1 and run.alloc.gpus <= self.small_gpus and allowed[run.alloc.nodes[0]]
                    and ctx.running_keys.get(jid, key) > key):
                movable.setdefault(int(run.alloc.nodes[0]), []).append(
                    (self._cost_gpu_s(jid, ctx), run.alloc.gpus, jid))
        plans = []  # (cost per task gained, tasks gained, jobs) per node
        for node, jobs in movable.items():
            jobs.sort()
            have, cost, chosen = int(free[node]), 0.0, []
            best = (have + sum(g for _, g, _ in jobs)) // per_task
            for c, g, jid in jobs:
                if have // per_task >= best:
                    break
                have, cost = have + g, cost + c
                chosen.append(jid)
            gained = have // per_task - int(free[node]) // per_task
            if gained > 0:
                plans.append((cost / gained, gained, chosen))
        plans.sort()
        victims: list[str] = []
        for _, gained, chosen in plans:
            if tasks_now >= job.tasks:
                break
            victims += chosen
            tasks_now += gained
        if tasks_now < job.tasks or len(victims) > self.max_moves:
            return None
        self._moved = True
        return victims

    def close(self, ctx: CycleContext, decision: Decision) -> float | None:
        return ctx.now_s + 1.0 if self._moved and decision.preemptions else None


PLUGINS = {"lower-order": LowerOrder, "lower-priority": LowerPriority, "guarded": Guarded,
           "consolidate": Consolidate}
