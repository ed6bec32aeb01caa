"""The live scheduler of a Kubernetes cluster: informers -> snapshot -> the Scheduler's cycle -> the API.

Owns KubeScheduler. Each cycle reads a Snapshot, brings the one Scheduler it keeps while leading up to it
(kube/books.py), runs the same world loop as simulation and serve (world.py), and applies the Decision as
Kubernetes expects of a scheduler: pods/binding for starts (a gang all or nothing: a bind that fails midway evicts
the members already bound and the gang is tried again), the Eviction API for preemption victims (the preemptor
waits, nominated, until they are gone), and PodScheduled=False / Unschedulable with an Event naming what blocked
each pod it cannot place. Events are best effort (events.py): dropped, never waited for, when more are queued than
the API takes."""

from __future__ import annotations

import functools
import gc
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from trimtab.cluster import Allocation
from trimtab.formats.k8s import Manifests
from trimtab.formats.k8s.dra import Inventory
from trimtab.kube.api import KINDS, KubeApi
from trimtab.kube.binder import GangBinder
from trimtab.kube.books import LiveBooks
from trimtab.kube.claims import ClaimKeeper, ClaimWrite
from trimtab.kube.credit import CreditKeeper
from trimtab.kube.events import EventRecorder
from trimtab.kube.informer import Informer
from trimtab.kube.leader import LeaderElector
from trimtab.kube.owners import OWNER_INFORMERS
from trimtab.kube.queue_status import QueueStatus
from trimtab.kube.snapshot import Snapshot, SnapshotReader, pod_key
from trimtab.model import Job, JobState
from trimtab.profile import Profile, profile_for_manifests
from trimtab.scheduler import Scheduler
from trimtab.world import Actuator

log = logging.getLogger(__name__)

ASSUME_S = 30.0  # a binding not yet seen by the pod informer counts as bound this long
WRITERS = 16  # bindings in flight at once (kube-scheduler binds in goroutines, not one by one)
REPORTERS = 4  # Unschedulable conditions in flight at once, on threads of their own: bindings never wait behind them
FULL_GC_S = 300.0  # a full garbage collection (it scans every object the informers hold) at most this often
Obj = dict[str, Any]


@dataclass(slots=True)
class CycleReport:
    """One cycle, for observers (metrics): its wall time; jobs bound whole and rolled back (the bindings that
    ended since the last cycle: they run on while the next cycles decide), left pending (with the reason written
    on their pods); pending jobs per namespace; GPUs per Ready node, and those held by bound
    pods at the start of the cycle."""

    seconds: float = 0.0
    read_s: float = 0.0  # of `seconds`: reading the snapshot
    write_s: float = 0.0  # of `seconds`: the API writes it waited for
    binding: int = 0  # jobs whose bindings this cycle started (`scheduled` counts them once all are bound)
    scheduled: int = 0
    unschedulable: int = 0
    errors: int = 0
    pending_by_tenant: dict[str, int] = field(default_factory=dict)
    gpus_total: dict[str, int] = field(default_factory=dict)
    gpus_allocated: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class Counters:
    """What the scheduler has done since it started."""

    cycles: int = 0
    bound: int = 0
    unschedulable: int = 0
    gang_rollbacks: int = 0
    evicted: int = 0


class KubeScheduler(Actuator):
    """Schedules the pods whose spec.schedulerName is the API's scheduler name. `run(stop)` blocks until `stop`
    is set; `cycle(now_s)` runs one cycle on the informers' current objects (tests call it directly). It keeps
    one Scheduler for as long as it leads (`books`, kube/books.py) and is its world loop's actuator: it cannot
    resize running pods or load data (`cannot`).

    The API writes of a cycle run on writer threads while the next cycles decide, as kube-scheduler binds
    asynchronously: a pod being bound is assumed bound (it holds its node's GPUs) until the informer shows it, or
    forgotten if its gang's binding fails. Each write's outcome is booked on the cycle's thread, at the start of
    the next cycle (`_settle`); Events go out on a thread of their own, best effort (`events`)."""

    cannot = frozenset({"resizes", "prefetches"})

    def __init__(self, api: KubeApi, profile: Profile, *, resync_s: float = 5.0, batch_s: float = 0.05,
                 credit_at: tuple[str, str] | None = None) -> None:
        self.api = api
        self.profile = profile
        self.resync_s = resync_s
        self.batch_s = batch_s
        self.counters = Counters()
        self.cycle_observers: list[Callable[[CycleReport], None]] = []
        self.ready = threading.Event()  # set once every informer has listed
        self.reader = SnapshotReader(api.scheduler_name)
        self.claims = ClaimKeeper(api)  # DRA: the claims a binding allocates and reserves first (kube/claims.py)
        self._inventory = Inventory(live=True)  # the current cycle's DRA objects
        self._wake = threading.Event()
        self.informers = {name: Informer(api, kind, self._wake.set) for name, kind in KINDS.items()}
        # pod key -> (node, when its binding landed; inf while it is in flight: assumed until it lands, however long
        # the writes queue, or its GPUs would look free and be given twice)
        self._assumed: dict[str, tuple[str, float]] = {}
        self._unanswered: set[str] = set()  # pods whose failed binding could not be read back (writer threads add)
        self.binder = GangBinder(api, self.claims, self._record, self._unanswered)
        self._now_s = 0.0  # the current cycle's time
        self._reported: dict[str, str] = {}  # pod uid -> the Unschedulable message last written
        self._composed, self._composed_key = profile, ("", False, False)
        # the one Scheduler, kept while this replica leads; its world loop acts through this class (the Actuator)
        self.books = LiveBooks(self)
        self._wake_at_s = math.inf  # the loop's next wake-up (`wake_at`)
        self._cycle: tuple[Snapshot, CycleReport] | None = None  # the snapshot and report of the cycle acting
        self._writes = ThreadPoolExecutor(WRITERS, thread_name_prefix="trimtab-kube-write")
        self._reports = ThreadPoolExecutor(REPORTERS, thread_name_prefix="trimtab-kube-report")
        # the jobs' credit kept in ConfigMap credit_at (namespace, name), for the next leader (kube/credit.py)
        self.credit = CreditKeeper(api, *credit_at, self._reports) if credit_at is not None else None
        self.events = EventRecorder(api.record_event)
        self.queue_status = QueueStatus(api, self._reports)  # each Volcano Queue's status.allocated
        self._inflight: list[tuple[Future[bool], Callable[[bool, CycleReport], None]]] = []  # see `_settle`
        self._reporting: dict[str, Future[bool]] = {}  # pod uid -> its Unschedulable write in flight
        self._last_cycle_s = batch_s  # how long the loop waits for a burst (`_loop`)
        self._full_gc_at = time.monotonic()  # see `_collect`

    def run(self, stop: threading.Event, leader: LeaderElector | None = None) -> None:
        """Watch and schedule until `stop` is set. With a `leader`, cycles run only while it leads (the
        informers of a standby stay warm, so it takes over with a current view)."""
        for informer in self.informers.values():
            informer.start()
        for informer in self.informers.values():
            while not informer.synced.wait(0.5):
                if stop.is_set():
                    return
        self.ready.set()
        gc.disable()  # collected between cycles instead (`_collect`)
        try:
            self._loop(stop, leader)
        finally:
            gc.enable()
        self._settle(CycleReport(), wait=True)
        for informer in self.informers.values():
            informer.stop()

    def _loop(self, stop: threading.Event, leader: LeaderElector | None) -> None:
        while not stop.is_set():
            self._collect()
            if leader is not None and not leader.leading.wait(1.0):
                self._assumed.clear()  # a new term starts from what the cluster shows
                self.books.drop()
                continue
            self._wake.wait(min(self.resync_s, max(self._wake_at_s - time.time(), 0.0)))
            if stop.is_set() or (leader is not None and not leader.leading.is_set()):
                continue
            # let a burst of events arrive before reading them, for as long as a cycle takes (at most batch_s):
            # reading costs a cycle at most half the time, and a pod waits at most about two cycles
            time.sleep(min(self.batch_s, self._last_cycle_s))
            self._wake.clear()
            try:
                self._last_cycle_s = self.cycle(time.time(), wait=False).seconds
            except Exception:  # one bad cycle must not stop the scheduler; the next reads afresh
                log.exception("scheduling cycle failed")
                self.books.drop()

    def _collect(self) -> None:
        """Python's cyclic garbage collection, between cycles rather than whenever allocations trigger it. Left to
        itself it ran a full collection every few seconds of a burst, each scanning every object the informers
        hold (0.1-0.26 s at 2,000 pods on the development machine): stalls that set the p99 of binding. Here:
        the young generations (what was allocated since the last call, and the objects the watches added, which
        live on in the oldest generation), and a full collection every FULL_GC_S."""
        gc.collect(1)
        if time.monotonic() - self._full_gc_at >= FULL_GC_S:
            gc.collect()
            self._full_gc_at = time.monotonic()

    @property
    def history(self) -> list[tuple[Job, float]]:
        """The jobs completed while this replica led, and their run times (what the policies learn from)."""
        return self.books.scheduler.history if self.books.loop is not None else []

    def cycle(self, now_s: float, wait: bool = True) -> CycleReport:
        """One cycle. With `wait`, it returns once its writes are done and booked (in its report); without, they
        go on while the next cycle decides (`run`)."""
        started = time.perf_counter()
        report = CycleReport()
        self._now_s = now_s  # when the bindings `_settle` books landed, at the latest
        self._settle(report, wait=False)
        items = {name: informer.items() for name, informer in self.informers.items()}
        self._expire_assumed(now_s)
        self._inventory = self.claims.inventory(items["deviceclasses"], items["resourceslices"],
                                                items["resourceclaims"])
        snap = self.reader.read(items["nodes"], items["pods"], items["podgroups"] + items["volcanopodgroups"],
                                items["priorityclasses"], items["namespaces"], items["resourcequotas"],
                                {k: node for k, (node, _) in self._assumed.items()}, now_s,
                                [o for kind in OWNER_INFORMERS for o in items[kind]], self._inventory,
                                items["volcanoqueues"])
        self._forget_reports(snap)
        self.queue_status.update(items["volcanoqueues"], snap.holding)
        report.gpus_total = {n.name: n.capacity.gpus for n in snap.nodes}
        report.read_s = time.perf_counter() - started
        for job, node, _ in snap.holding:
            report.gpus_allocated[node] = report.gpus_allocated.get(node, 0) + job.gpus
        for job in snap.pending:
            report.pending_by_tenant[job.tenant] = report.pending_by_tenant.get(job.tenant, 0) + 1
        reports = list(snap.unreadable)  # (pod, why it waits) to write, as the cycle finds them
        for gang, pods in snap.broken_gangs.items():
            self._restart_gang(gang, pods)
        self._schedule(snap, now_s, report, reports)
        written = time.perf_counter()
        self._report_all(reports)
        if wait:
            self._settle(report, wait=True)
        self.counters.cycles += 1
        report.seconds = time.perf_counter() - started
        report.write_s += report.seconds - (written - started)
        if snap.pending:
            log.info("cycle: %d pending jobs, binding %d, %d unschedulable in %.3f s (read %.3f s, writes %.3f s); "
                     "%d writes in flight", len(snap.pending), report.binding, report.unschedulable, report.seconds,
                     report.read_s, report.write_s, len(self._inflight))
        for observe in self.cycle_observers:
            observe(report)
        return report

    # ------------------------------------------------------------------------------------------- one cycle

    def _schedule(self, snap: Snapshot, now_s: float, report: CycleReport, reports: list[tuple[Obj, str]]) -> None:
        if not snap.nodes:
            reports += [(pod, "0/0 nodes are available: the cluster has no Ready node")
                        for job in snap.pending for pod in snap.pods_of[job.id]]
            report.unschedulable = len(snap.pending)
            return
        if self.books.loop is None and self.credit is not None:  # a term begins: go on from the last one's credit
            self.books.carried, self.books.carried_plugins = self.credit.load()
        loop = self.books.sync(snap, self._profile_for(snap), now_s)
        wrote = time.perf_counter()
        self._cycle = (snap, report)
        try:
            self._place([(loop.scheduler.jobs[job_id], nodes) for job_id, nodes in self.books.ready_to_bind()],
                        now_s, nominate=False)
            self._wake_at_s = math.inf
            loop.cycle(now_s)
        finally:
            self._cycle = None
        if self.credit is not None:
            self.credit.save(loop.scheduler)
        report.write_s = time.perf_counter() - wrote
        assert loop.reasons is not None
        state = loop.scheduler.state
        for job in snap.pending:
            if state.get(job.id) is JobState.PENDING:
                report.unschedulable += 1
                reports += [(pod, loop.reasons.latest(job.id).reason) for pod in snap.pods_of[job.id]]

    # ------------------------------------------------------------------------------- the loop's actuator

    def wake_at(self, time_s: float) -> None:
        self._wake_at_s = min(self._wake_at_s, time_s)
        if time_s <= time.time():
            self._wake.set()

    def preempt(self, victims: list[str], now_s: float) -> None:
        """Evict every bound pod of each victim through the Eviction API (a pod of another scheduler's: that pod).
        Their pods are `evicting` until gone: the GPUs are the preemptor's, which waits for them, nominated."""
        by_uid = {pod["metadata"]["uid"]: pod for pod in self.informers["pods"].items()}
        books = self.books
        for job_id in victims:
            for uid, node in books.pods_of.pop(job_id, []):
                books.evicting[uid] = (node, now_s)
                pod = by_uid.get(uid)
                if pod is not None and self._try(self.api.evict, pod["metadata"]["namespace"],
                                                 pod["metadata"]["name"]):
                    self.counters.evicted += 1
                    self._record(pod, "Preempted", "trimtab: preempted by a higher-priority job", True)
            if job_id.startswith("bound:"):
                books.scheduler.forget(job_id)  # not a job of ours: nothing of it comes back to the queue

    def start(self, starts: list[tuple[Job, Allocation]], now_s: float) -> None:
        """Bind each start's pods to the nodes of its allocation, or nominate them where a victim's pod is still
        going."""
        scheduler = self.books.scheduler
        self._place([(job, self._nodes_of(scheduler, alloc)) for job, alloc in starts], now_s, nominate=True)

    def _place(self, starts: list[tuple[Job, list[str]]], now_s: float, nominate: bool) -> None:
        """Bind (or, with `nominate`, nominate where a victim's pod is still going) each job's pods to its nodes,
        in task order; a job whose pods are not all in the cycle's snapshot goes back to the queue."""
        assert self._cycle is not None
        snap, report = self._cycle
        books = self.books
        blocked = {node for node, _ in books.evicting.values()} if nominate else set()
        binds: list[tuple[Job, list[str]]] = []
        for job, nodes in starts:
            pods = snap.pods_of.get(job.id, [])
            if len(pods) != len(nodes):
                books.nominated.pop(job.id, None)
                books.scheduler.stopped(job.id, now_s, JobState.PENDING)
                continue
            books.pods_of[job.id] = [(pod["metadata"]["uid"], node) for pod, node in zip(pods, nodes, strict=True)]
            books.job_of_pod.update((pod["metadata"]["uid"], job.id) for pod in pods)
            if blocked.intersection(nodes):
                books.nominated[job.id] = (nodes, now_s)
                for pod, node in zip(pods, nodes, strict=True):
                    self._try(self.api.nominate, pod["metadata"]["namespace"], pod["metadata"]["name"], node)
            else:
                binds.append((job, nodes))
        self._bind_all(snap, binds, report)

    @staticmethod
    def _nodes_of(scheduler: Scheduler, alloc: Allocation) -> list[str]:
        return [scheduler.cluster.nodes[int(i)].name for i, c in zip(alloc.nodes, alloc.counts, strict=True)
                for _ in range(int(c))]

    def _profile_for(self, snap: Snapshot) -> Profile:
        """The profile with the cluster's policy objects composed onto it, as `simulate --manifests` composes
        them (quotas and Volcano Queues as admission, the min-member rule of gangs with followers,
        PreferNoSchedule taints scored); composed again only when what it depends on changes (a new profile
        rebuilds the Scheduler, so the min-member rule, once needed, stays: it holds nothing back when no gang has
        followers)."""
        followers = self._composed_key[1] or any(job.after for job in snap.pending)
        key = (repr([q.as_args() for q in snap.quotas] + [q.as_args() for q in snap.queues]), followers,
               any(t.effect == "PreferNoSchedule" for node in snap.nodes for t in node.taints))
        if key != self._composed_key:
            manifests = Manifests(nodes=snap.nodes, jobs=snap.pending, quotas=snap.quotas, queues=snap.queues,
                                  launches=snap.launches)
            self._composed, warnings = profile_for_manifests(self.profile, manifests)
            if followers and "min-member" not in self._composed.enabled("admit"):
                self._composed = self._composed.with_admission("min-member", {})
            self._composed_key = key
            for warning in warnings:
                log.warning("%s", warning)
        return self._composed

    def _bind_all(self, snap: Snapshot, binds: list[tuple[Job, list[str]]], report: CycleReport) -> None:
        """Start binding a cycle's starts, WRITERS jobs at a time (each job's pods in order, all or none:
        `_bind_gang`); their pods are assumed bound meanwhile."""
        for job, nodes in binds:
            pods = snap.pods_of[job.id]
            writes = self.claims.plan(self._inventory, pods, nodes) \
                if self._inventory.classes or any(p["spec"].get("resourceClaims") for p in pods) else []
            if isinstance(writes, str):  # the model's devices fit, the allocator's do not: back to the queue
                log.info("job %s: its ResourceClaims cannot be allocated: %s", job.id, writes)
                self._record(pods[0], "FailedScheduling", f"trimtab: {writes}", True)
                self._bound(job.id, pods, False, report)
                continue
            for pod, node in zip(pods, nodes, strict=True):
                self._assumed[pod_key(pod)] = (node, math.inf)
                self._reported.pop(pod["metadata"]["uid"], None)
            reporting = [f for pod in pods if (f := self._reporting.get(pod["metadata"]["uid"])) is not None]
            self._submit(self._writes, functools.partial(self._bind_gang, pods, job, nodes, reporting, writes),
                         functools.partial(self._bound, job.id, pods))
        report.binding += len(binds)

    def _bound(self, job_id: str, pods: list[Obj], bound: bool, report: CycleReport) -> None:
        """Book a gang's binding: all its pods bound, or none (they are no longer assumed, and the job is back in
        the queue: the next cycle reads its pods pending again)."""
        if bound:
            report.scheduled += 1
            self.counters.bound += len(pods)
            for pod in pods:
                if (assumed := self._assumed.get(pod_key(pod))) is not None:
                    self._assumed[pod_key(pod)] = (assumed[0], self._now_s)
            return
        report.errors += 1
        self.counters.gang_rollbacks += 1
        for pod in pods:
            key = pod_key(pod)
            assumed = self._assumed.pop(key, None)
            if key in self._unanswered and assumed is not None:  # it may be bound: held until the informer tells
                self._assumed[key] = (assumed[0], self._now_s)
            self._unanswered.discard(key)
        if self.books.loop is not None and job_id in self.books.scheduler.running:
            self.books.pods_of.pop(job_id, None)
            self.books.scheduler.stopped(job_id, self._now_s, JobState.PENDING)

    def _submit(self, pool: ThreadPoolExecutor, write: Callable[[], bool],
                book: Callable[[bool, CycleReport], None]) -> Future[bool]:
        """Run `write` on a thread of `pool`; `book(its answer, the report of the cycle that settles it)` runs on the
        cycle's thread once it is done."""
        future = pool.submit(write)
        self._inflight.append((future, book))
        return future

    def _settle(self, report: CycleReport, wait: bool) -> None:
        """Book the writes that are done (with `wait`: all of them, once done, and the Events queued so far)."""
        if wait:
            futures.wait([future for future, _ in self._inflight])
        still: list[tuple[Future[bool], Callable[[bool, CycleReport], None]]] = []
        for future, book in self._inflight:
            if future.done():
                book(future.result(), report)
            else:
                still.append((future, book))
        self._inflight = still
        if wait:
            self.events.flush()

    def _bind_gang(self, pods: list[Obj], job: Job, nodes: list[str], reporting: list[Future[bool]],
                   writes: list[ClaimWrite]) -> bool:
        """`GangBinder.bind` on a writer thread, once the `reporting` writes of an earlier cycle are done (a pod's
        Unschedulable condition written after its binding would contradict it; they run on their own threads)."""
        futures.wait(reporting)
        return self.binder.bind(pods, job, nodes, writes)

    def _restart_gang(self, gang: str, pods: list[dict[str, Any]]) -> None:
        """A gang that lost a member with its node: evict every member, so its controller recreates the gang
        and it starts again whole (a gang's members run together or not at all)."""
        log.warning("gang %s lost a member with its node; evicting its %d members", gang, len(pods))
        for pod in pods:
            if self._try(self.api.evict, pod["metadata"]["namespace"], pod["metadata"]["name"]):
                self.counters.evicted += 1
                self._record(pod, "GangRestarted", f"trimtab: gang {gang} lost a member with its node "
                             f"({pod['spec'].get('nodeName')}), restarted whole", True)

    # ------------------------------------------------------------------------------------------- reports

    def _report_all(self, reports: list[tuple[Obj, str]]) -> None:
        """PodScheduled=False / Unschedulable with each message, and a FailedScheduling Event, once per message
        (a pod whose message has not changed is not written again; one whose write failed is, next cycle)."""
        for pod, message in reports:
            uid = pod["metadata"]["uid"]
            if self._reported.get(uid) != message:
                self._reported[uid] = message
                self._reporting[uid] = self._submit(self._reports, functools.partial(self._write_report, pod, message),
                                                    functools.partial(self._reported_back, uid, message))

    def _write_report(self, pod: Obj, message: str) -> bool:
        meta = pod["metadata"]
        if not self._try(self.api.mark_unschedulable, meta["namespace"], meta["name"], message):
            return False
        self._record(pod, "FailedScheduling", message, True)
        return True

    def _reported_back(self, uid: str, message: str, written: bool, report: CycleReport) -> None:
        if self._reporting.get(uid) is not None and self._reporting[uid].done():
            del self._reporting[uid]
        if written:
            self.counters.unschedulable += 1
        elif self._reported.get(uid) == message:
            del self._reported[uid]

    def _record(self, pod: Obj, reason: str, message: str, warning: bool = False) -> None:
        """An Event about `pod`, queued for the Event thread, or dropped when its queue is full."""
        self.events.record(pod, reason, message, warning)

    def _expire_assumed(self, now_s: float) -> None:
        """Forget assumed bindings the informer now shows bound (or gone), or that landed too long ago."""
        pods = self.informers["pods"]
        self._assumed = {k: v for k, v in self._assumed.items() if now_s - v[1] < ASSUME_S
                         and (pod := pods.get(k)) is not None and not pod["spec"].get("nodeName")}

    def _forget_reports(self, snap: Snapshot) -> None:
        """Forget the messages written on pods no longer waiting (gone, bound, or being bound)."""
        waiting = {pod["metadata"]["uid"] for pods in snap.pods_of.values() for pod in pods}
        waiting.update(pod["metadata"]["uid"] for pod, _ in snap.unreadable)
        self._reported = {uid: m for uid, m in self._reported.items() if uid in waiting}

    @staticmethod
    def _try(call: Any, *args: Any, **kwargs: Any) -> bool:
        """A write whose failure is logged, not raised (the next cycle sees the cluster as it is)."""
        try:
            call(*args, **kwargs)
            return True
        except Exception as exc:
            log.warning("%s failed: %s", getattr(call, "__name__", call), exc)
            return False

