"""Elastic jobs in `trimtab serve` (docs/elastic.md, "Live"): the resize plugin that steers a job toward its
`target_gpu_util`, and how a serve profile gets it.

The resizes themselves come from the profile's `resize` plugins (plugins/elastic.py, as in simulation); the daemon
carries each one out as a restart (daemon.py `_resize`). This module adds `gpu-util-target`, which reads what the
job's LiveScaling last saw (serve/run/progress.py) and is put first at the profile's `resize` point by
`with_live_resizes`, so a job's own target goes before the cluster-wide goodput policies."""

from __future__ import annotations

import math

from trimtab.cluster import Allocation
from trimtab.model import Job
from trimtab.plugins.elastic import grown, shrunk
from trimtab.policy import CycleContext, Decision, Plugin, Resize
from trimtab.profile import Profile, Registry
from trimtab.serve.run.progress import LiveScaling

GPU_UTIL_TARGET = "gpu-util-target"


class GpuUtilTarget(Plugin):
    """resize: a running elastic job with a `target_gpu_util` and a utilisation measured at its current size is
    resized toward the target, as Kubernetes' HPA sizes a Deployment: to ceil(tasks x util / target) tasks, within
    its range, when util / target is off 1 by more than `tolerance`. A shrink always can be done; a grow only into
    idle GPUs on the nodes its filters allow. At most one resize of a job per `min_interval_s` (from its start or
    last resize), so the utilisation of the new size is measured before the next. Jobs without a target are left
    to the other resize plugins; a job this plugin resized is not resized again in the same cycle."""

    name = GPU_UTIL_TARGET

    def __init__(self, min_interval_s: float = 10.0, tolerance: float = 0.1) -> None:
        if min_interval_s < 0 or tolerance < 0:
            raise ValueError("min_interval_s and tolerance must be >= 0")
        self.min_interval_s = float(min_interval_s)
        self.tolerance = float(tolerance)
        self._targeted: set[str] | None = None  # running jobs with a target (None: not read from the books yet)
        self._next_ready_s: float | None = None  # when a job held back by the interval may next be resized

    def resize(self, ctx: CycleContext, decision: Decision) -> list[Resize]:
        if self._targeted is None:
            self._targeted = {jid for jid, run in ctx.running.items() if _target(run.job) is not None}
        self._targeted = {jid for jid in self._targeted if jid in ctx.running}  # a pass over these jobs only
        answers: list[Resize] = []
        self._next_ready_s = None
        for jid in sorted(self._targeted):
            run = ctx.running[jid]
            ready_s = run.start_s + self.min_interval_s
            if ctx.now_s < ready_s:
                self._next_ready_s = min(ready_s, self._next_ready_s or ready_s)
                continue
            alloc = self._toward_target(run.job, run.alloc, ctx)
            if alloc is not None:
                answers.append(Resize(jid, run.alloc, alloc))
        return answers

    def _toward_target(self, job: Job, alloc: Allocation, ctx: CycleContext) -> Allocation | None:
        """The allocation `job` (now on `alloc`) should be resized to, or None to keep it."""
        scaling, target = job.scaling, _target(job)
        assert isinstance(scaling, LiveScaling) and target is not None and job.elastic is not None
        seen = scaling.latest
        if seen is None or seen.gpu_util is None or seen.gpus != alloc.gpus:
            return None  # nothing measured at this size yet
        ratio = seen.gpu_util / target
        if abs(ratio - 1.0) <= self.tolerance:
            return None
        wanted = min(max(math.ceil(alloc.tasks * ratio - 1e-9), job.elastic.min_tasks), job.elastic.max_tasks)
        nodes = len(ctx.cluster)
        if wanted < alloc.tasks:
            for _ in range(alloc.tasks - wanted):
                alloc, _node = shrunk(alloc, nodes)
            return alloc
        if wanted > alloc.tasks:
            room = ctx.cluster.fit_counts(job.task)
            if ctx.node_mask is not None:
                room[~ctx.node_mask(job)] = 0
            for extra in range(wanted - alloc.tasks, 0, -1):  # as close to the target as the idle GPUs allow
                bigger = grown(alloc, room, extra)
                if bigger is not None:
                    return Allocation(bigger.nodes, bigger.counts, bigger.task)
        return None

    def close(self, ctx: CycleContext, decision: Decision) -> float | None:
        """Book the targeted jobs the cycle started; wake up when one held back by the interval may be resized."""
        if self._targeted is not None:
            self._targeted.update(job.id for job, _ in decision.starts if _target(job) is not None)
        wake_s, self._next_ready_s = self._next_ready_s, None
        return wake_s


def _target(job: Job) -> float | None:
    scaling = job.scaling
    return scaling.target_gpu_util if isinstance(scaling, LiveScaling) and job.elastic is not None else None


def with_live_resizes(profile: Profile, registry: Registry) -> Profile:
    """`profile` with `gpu-util-target` first at its `resize` point (unless it lists it already, where it is),
    registered in `registry`: how every serve profile honours a job's target, whatever its policy."""
    if GPU_UTIL_TARGET not in registry.names():
        registry.register(GPU_UTIL_TARGET, GpuUtilTarget)
    if GPU_UTIL_TARGET in profile.enabled("resize"):
        return profile
    return profile.model_copy(update={"resize": [GPU_UTIL_TARGET, *profile.resize]})
