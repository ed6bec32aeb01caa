"""Gangs with a minimum below their pods (PodGroup minMember, Volcano minAvailable): admission that holds the pods
beyond the minimum (jobs with `Job.after`) until their gang has started.

`profile_for_manifests` composes `min-member` onto every profile when the manifests hold such gangs, so the rule
holds whatever the policy, as Volcano's and coscheduling's gang rule holds whatever queue order runs."""

from __future__ import annotations

import math

from trimtab.model import Job
from trimtab.policy import Cause, Code, CycleContext, Decision, Plugin, Status


class MinMember(Plugin):
    """admit: a job that follows a gang (`job.after`) waits until that gang has started once; any other job is
    admitted. Once the gang has started, its followers are ordinary jobs: they start when they fit and keep running
    if the gang is later preempted, fails or ends.

    The answer depends on `job.after`, which is part of the job's shape (`queue.shape_of`), so a "no" holds only
    the followers of the same gang. A gang started counts from the cycle that starts it: in that cycle (the cycle
    books a start into `ctx.running` at once), by the starts this plugin saw, and from the books a fresh instance
    reads (a running gang, one that ran before and waits again, a completed one). When a gang starts after some
    of its followers were refused, `close` asks for a cycle at the next instant, because the refused followers'
    shapes stay blocked until a cycle looks at every shape again."""

    def __init__(self) -> None:
        self._started: set[str] = set()  # jobs seen starting (the gangs among them are what followers ask about)
        self._awaited: set[str] = set()  # gangs not yet started for which a follower was refused
        self._read_history = False

    def open(self, ctx: CycleContext) -> None:
        if not self._read_history:  # a fresh instance over carried books: the gangs that completed count too
            self._read_history = True
            self._started.update(job.id for job, _ in ctx.history)

    def admit(self, job: Job, ctx: CycleContext) -> Status:
        gang = job.after
        if gang is None or gang in self._started:
            return Status.ok()
        if gang in ctx.running or gang in ctx.prior_attained_gpu_s:
            self._started.add(gang)
            return Status.ok()
        self._awaited.add(gang)
        return Status(Code.WAIT, f"waiting for its gang {gang} to start (pods beyond the gang's minimum start "
                      "after it)", self.name, Cause.GANG, f"starts once job {gang} (the gang's minimum) has started")

    def close(self, ctx: CycleContext, decision: Decision) -> float | None:
        self._started.update(job.id for job, _ in decision.starts)
        if not self._awaited:
            return None
        ready = {gang for gang in self._awaited if gang in self._started or gang in ctx.running}
        if not ready:
            return None
        self._awaited -= ready
        return math.nextafter(ctx.now_s, math.inf)


PLUGINS = {"min-member": MinMember}
