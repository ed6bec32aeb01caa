"""The live scheduler's books across cycles: one Scheduler (in its world loop) for as long as trimtab leads, kept
in step with each snapshot through the Scheduler's own calls: submit, replace, hold, adopt, stopped, node_down,
node_up and with_nodes.

Owns LiveBooks. A job's identity is its gang ("namespace/name" of its PodGroup or owning Job) or, for a pod on its
own, the pod ("namespace/name"). The pods a Job's controller recreates after an eviction are the same job, with
its attained service and history. The reasoning, and what is rebuilt when: docs/kubernetes.md ("One Scheduler
while leading")."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from trimtab.cluster import Allocation, ClusterState
from trimtab.kube.credit import Credit, Kept, credit_of, keep_plugins_on, plugins_kept
from trimtab.kube.snapshot import Snapshot
from trimtab.model import Job, JobState, Node
from trimtab.profile import Profile
from trimtab.scheduler import Scheduler
from trimtab.world import Actuator, WorldLoop

log = logging.getLogger(__name__)

# a pending job whose pods are gone waits this long, held, for its controller to recreate them; the gang of an
# owner that stands (a Job, whose backoff reaches 10 min) waits for as long as the owner does
ORPHAN_S = 30.0
NOMINATED_S = 60.0  # a start waiting for its victims' pods to go gives up after this long
HISTORY_JOBS = 2000  # completed jobs kept for the policies that learn from them (qssf's predicted run time)
REST = "+rest"  # the id of a gang's pending members while others of it are bound: a job of its own
Holding = tuple[Job, str, float]  # a bound pod: its one-pod Job, node name, start time (Snapshot.holding)
BOUND = len("bound:")  # a bound pod's one-pod Job id is "bound:" and its uid


class LiveBooks:
    """`sync(snap, profile, present, now_s)` once a cycle, before the loop's cycle. `evicting` (pod uid -> node,
    since when) are the pods of jobs this scheduler preempted: not booked while they go, since their GPUs are
    the preemptor's; `nominated` (job -> node names in task order, since when) the starts that wait for them."""

    def __init__(self, actuator: Actuator) -> None:
        self.actuator = actuator
        self.loop: WorldLoop | None = None
        self._profile: Profile | None = None
        self._nodes: dict[str, Node] = {}  # the scheduler's nodes, by name
        self._down: set[str] = set()
        self.job_of_pod: dict[str, str] = {}  # pod uid -> job id, for the pods of the jobs the scheduler runs
        self.pods_of: dict[str, list[tuple[str, str]]] = {}  # running job -> its bound pods (uid, node)
        self.evicting: dict[str, tuple[str, float]] = {}
        self.nominated: dict[str, tuple[list[str], float]] = {}
        self._orphans: dict[str, float] = {}  # held pending job -> since when its pods are gone
        self.carried: Credit = {}  # credit to give each job as it is submitted or adopted (a rebuild, a new term)
        self.carried_plugins: Kept = {}  # what the plugins learned, for the next Scheduler (a rebuild, a new term)
        self.rebuilds = 0
        self._rows_of: dict[str, list[Holding]] = {}  # the last sync's bound pods by job (`_sync_running`)

    @property
    def scheduler(self) -> Scheduler:
        assert self.loop is not None, "sync() first"
        return self.loop.scheduler

    def drop(self) -> None:
        """Forget everything (leadership lost: a new term rebuilds from the cluster)."""
        self.loop, self._profile, self._nodes, self._down = None, None, {}, set()
        self.job_of_pod, self.pods_of, self.evicting, self.nominated, self._orphans = {}, {}, {}, {}, {}
        self.carried, self.carried_plugins, self._rows_of = {}, {}, {}

    def sync(self, snap: Snapshot, profile: Profile, now_s: float) -> WorldLoop:
        """Bring the Scheduler up to `snap` (its nodes, bound pods and pending jobs). Returns the loop to cycle."""
        self._sync_nodes(snap.nodes, profile, now_s)
        self._expire(snap, now_s)
        self._sync_running(snap, now_s)
        self._sync_pending(snap, now_s)
        history = self.scheduler.history
        if len(history) > 2 * HISTORY_JOBS:
            del history[:-HISTORY_JOBS]
        assert self.loop is not None
        return self.loop

    # ------------------------------------------------------------------------------------------------ nodes

    def _sync_nodes(self, nodes: list[Node], profile: Profile, now_s: float) -> None:
        """A node read differently, or a new profile (the cluster's quotas composed onto it), rebuilds the
        Scheduler; a new node joins it; a node not Ready (or gone from the cluster) is down until it is Ready
        again, and its going down is a failure observed on it (what `history` and `drain` read, as the
        simulator's node faults are)."""
        if self.loop is None or profile is not self._profile or any(
                (old := self._nodes.get(node.name)) is not None and old is not node and old != node for node in nodes):
            if self.loop is not None:
                log.info("rebuilding the scheduler: %s", "a new profile" if profile is not self._profile
                         else "a node changed")
            self._rebuild(nodes, profile)
            return
        joined = [node for node in nodes if node.name not in self._nodes]
        if joined:
            self.loop.scheduler = self.scheduler.with_nodes(joined)
            self._nodes.update((node.name, node) for node in joined)
        ready = {node.name for node in nodes}
        for name in self._nodes:
            if name in ready and name in self._down:
                self._down.discard(name)
                self.scheduler.node_up(name)
            elif name not in ready and name not in self._down:
                self._down.add(name)
                self.scheduler.node_down(name)  # its pods are lost with it as taint-based eviction decides
                cluster = self.scheduler.cluster
                self.scheduler.observations.node_failed(cluster.index[name], now_s, len(cluster))

    def _rebuild(self, nodes: list[Node], profile: Profile) -> None:
        """A new Scheduler; the old one's credit and what its plugins learned (if any) carried into it."""
        if self.loop is not None:
            self.carried = {**self.carried, **credit_of(self.scheduler)}
            self.carried_plugins = plugins_kept(self.scheduler) or self.carried_plugins
        self.loop = WorldLoop(Scheduler(ClusterState(nodes), profile), self.actuator, explains=True)
        keep_plugins_on(self.scheduler, self.carried_plugins)
        self._profile, self._nodes, self._down = profile, {node.name: node for node in nodes}, set()
        self.pods_of, self.nominated, self.evicting, self._orphans = {}, {}, {}, {}
        self.rebuilds += 1

    # ------------------------------------------------------------------------------------------------ running

    def _expire(self, snap: Snapshot, now_s: float) -> None:
        """Victims' pods that are gone are no longer evicting; a start whose victims outstay NOMINATED_S goes back
        to the queue, and its victims' pods are booked again."""
        if self.evicting:
            bound = {job.id[BOUND:] for job, _, _ in snap.holding}
            self.evicting = {uid: v for uid, v in self.evicting.items() if uid in bound}
        for job_id, (nodes, since) in list(self.nominated.items()):
            if now_s - since > NOMINATED_S:
                log.warning("job %s: its victims are still on %s after %.0f s; back to the queue", job_id,
                            sorted(set(nodes)), NOMINATED_S)
                del self.nominated[job_id]
                self.scheduler.stopped(job_id, now_s, JobState.PENDING, executed_s=0.0)
                self.evicting = {uid: v for uid, v in self.evicting.items() if v[0] not in nodes}

    def ready_to_bind(self) -> list[tuple[str, list[str]]]:
        """The nominated starts whose nodes no victim's pod holds any more: (job id, node names), no longer
        nominated."""
        blocked = {node for node, _ in self.evicting.values()}
        ready = [(job_id, nodes) for job_id, (nodes, _) in self.nominated.items() if blocked.isdisjoint(nodes)]
        for job_id, _ in ready:
            del self.nominated[job_id]
        return ready

    def _sync_running(self, snap: Snapshot, now_s: float) -> None:
        """The bound pods, grouped by job: a job the scheduler does not run is adopted; a running job none of whose
        pods is bound any more has ended (completed if one of them Succeeded; else it waits, held, for its pods
        to come back)."""
        scheduler = self.scheduler
        groups: dict[str, list[Holding]] = {}
        evicting, job_of_pod, owner_of = self.evicting, self.job_of_pod, snap.owner_of
        for held in snap.holding:
            job_id = held[0].id
            uid = job_id[BOUND:]
            if uid not in evicting:
                owner = job_of_pod.get(uid) or owner_of.get(job_id) or job_id
                group = groups.get(owner)
                if group is None:
                    groups[owner] = [held]
                else:
                    group.append(held)
        succeeded: dict[str, float] = {}  # job -> the longest run of its pods that Succeeded
        for job, run_s in snap.completed:
            owner = self.job_of_pod.get(job.id[BOUND:], job.id)
            succeeded[owner] = max(succeeded.get(owner, 0.0), run_s)
        for job_id in [j for j in scheduler.running if j not in groups and j not in self.nominated]:
            self._ended(job_id, succeeded.get(job_id), now_s)
        state, rows_before, self._rows_of = scheduler.state, self._rows_of, groups
        for owner, pods in groups.items():
            if state.get(owner) is not JobState.RUNNING:
                self._adopt(owner, pods)
            if rows_before.get(owner) != pods or owner not in self.pods_of:
                self.pods_of[owner] = [(job.id[BOUND:], node) for job, node, _ in pods]
        self.job_of_pod = {uid: job_id for job_id, pods in self.pods_of.items() if job_id in scheduler.running
                           for uid, _ in pods}

    def _ended(self, job_id: str, run_s: float | None, now_s: float) -> None:
        """A running job whose pods are all gone: completed after `run_s` if one of them Succeeded."""
        scheduler = self.scheduler
        self.pods_of.pop(job_id, None)
        if run_s is not None:
            scheduler.stopped(job_id, now_s, JobState.COMPLETED, executed_s=run_s)
        elif job_id.startswith("bound:"):  # a pod of another scheduler's, or one that is no job of ours
            scheduler.stopped(job_id, now_s, JobState.CANCELLED)
        else:
            scheduler.stopped(job_id, now_s, JobState.PENDING, enqueue=False)
            self._orphans[job_id] = now_s
            return
        scheduler.forget(job_id)

    def _adopt(self, owner: str, pods: list[Holding]) -> None:
        """Bound pods the scheduler does not run: one job of them all (a gang's members, read back after a
        restart), or each pod on its own (another scheduler's pods, or members that ask differently)."""
        if owner.startswith("bound:") or len({job.task for job, _, _ in pods}) > 1:
            for held in pods:
                self._adopt_one(held[0].id, [held])
        else:
            self._adopt_one(owner, pods)

    def _adopt_one(self, job_id: str, pods: list[Holding]) -> None:
        scheduler = self.scheduler
        state = scheduler.state.get(job_id)
        if state is not None and state.terminal:
            scheduler.forget(job_id)
        first = pods[0][0]
        known = scheduler.jobs.get(job_id)
        job = known if known is not None and known.tasks == len(pods) and known.task == first.task else Job(
            job_id, min(start for _, _, start in pods), len(pods), first.task, tenant=first.tenant,
            priority=first.priority, duration_s=first.duration_s)
        attained_gpu_s, executed_s = self.carried.get(job_id, (0.0, 0.0))
        counts: dict[int, int] = {}
        for _, node, _ in pods:
            index = scheduler.cluster.index[node]
            counts[index] = counts.get(index, 0) + 1
        order = sorted(counts)
        alloc = Allocation(np.array(order), np.array([counts[i] for i in order], dtype=np.int64), first.task)
        try:
            scheduler.adopt(job, alloc, min(start for _, _, start in pods), executed_s=executed_s,
                            attained_gpu_s=scheduler.prior_attained_gpu_s.get(job_id, attained_gpu_s))
        except ValueError as exc:  # beyond what trimtab models on its nodes (another scheduler's overcommit)
            log.debug("not adopting %s: %s", job_id, exc)
            return
        self._orphans.pop(job_id, None)
        self.carried.pop(job_id, None)

    # ------------------------------------------------------------------------------------------------ pending

    def _sync_pending(self, snap: Snapshot, now_s: float) -> None:
        """Each pending job of the snapshot queued as it reads now (keeping its first submit time and its credit);
        a queued job whose pods are gone is held, then forgotten after ORPHAN_S unless its owner stands."""
        scheduler = self.scheduler
        seen: set[str] = set()
        for i, job in enumerate(snap.pending):
            state = scheduler.state.get(job.id)
            if state is JobState.RUNNING and job.id not in self.nominated:  # the rest of a gang partly bound
                job = snap.pending[i] = dataclasses.replace(job, id=f"{job.id}{REST}")
                snap.pods_of[job.id] = snap.pods_of.pop(job.id.removesuffix(REST))
                state = scheduler.state.get(job.id)
            seen.add(job.id)
            if state is None:
                scheduler.submit(job, now_s)
                if (credit := self.carried.pop(job.id, None)) is not None:
                    scheduler.credit(job.id, credit[1], credit[0])
            elif state.terminal:
                scheduler.forget(job.id)
                scheduler.submit(job, now_s)
            elif state is JobState.PENDING:
                known = scheduler.jobs[job.id]
                job = dataclasses.replace(job, submit_s=known.submit_s)
                if self._orphans.pop(job.id, None) is not None or job != known:
                    scheduler.replace(job, now_s)
        for job_id in [j for j, state in scheduler.state.items() if state is JobState.PENDING and j not in seen]:
            since = self._orphans.get(job_id)
            if since is None:
                scheduler.hold(job_id)
                self._orphans[job_id] = now_s
            elif now_s - since > ORPHAN_S and job_id not in snap.owner_gangs:
                del self._orphans[job_id]
                scheduler.forget(job_id)
