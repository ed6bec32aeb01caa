"""What the cluster looks like to the scheduler at one instant, read from the informers' objects with the one
Kubernetes reader (trimtab.formats.k8s): Ready nodes, the pods that hold capacity, and the pending pods this
scheduler owns grouped into jobs (a pod alone, or a gang and its followers: the pods naming a PodGroup, or those
of one batch/v1 Job, owners.py).

Owns Snapshot and SnapshotReader. Each pending unit is read on its own, so one invalid pod or PodGroup is
reported (its pods get the reader's message) without holding up the rest."""

from __future__ import annotations

import calendar
import dataclasses
import functools
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trimtab.formats import FormatError
from trimtab.formats.k8s import Launch, Manifests, PriorityClass, QueueSpec, Quota, read_documents
from trimtab.formats.k8s.dra import Inventory
from trimtab.formats.k8s.pod_claims import with_devices
from trimtab.formats.k8s.workloads import COSCHED_GROUP, DURATION, QUEUE, VOLCANO_GROUP
from trimtab.kube.claims import claims_state, holding_devices
from trimtab.kube.owners import owner_groups, owner_names, owner_sizes
from trimtab.model import Job, Node, Resources
from trimtab.units import parse_duration_s

Obj = dict[str, Any]
# what `_read_bound` reads of a pod: its uid, key, phase, node, whether it is terminating, whether this scheduler
# owns it, the PodGroup it names (namespace, name), its start time, and its owners' gangs (owners.py)
PodFacts = tuple[str, str, str | None, str | None, bool, bool, tuple[str, str] | None, str | None, tuple[str, ...]]
_TERMINAL = ("Succeeded", "Failed")
HOLDING_TASKS = 4096  # distinct sets of container requests remembered (_holding_task)
TERMINATING_PRIORITY = 2**31  # above every PriorityClass (at most 2e9): a terminating pod is never a victim


@dataclass(slots=True)
class Snapshot:
    """`nodes` (Ready ones, in name order); `holding[i]` = (one-pod Job, node name, start time in epoch seconds)
    for every pod bound to a Ready node and not finished; `pending` the jobs to schedule, with `pods_of[job.id]`
    their pods in task order; `unreadable` the pending pods the reader refused, with its message."""

    nodes: list[Node] = field(default_factory=list)
    holding: list[tuple[Job, str, float]] = field(default_factory=list)
    pending: list[Job] = field(default_factory=list)
    pods_of: dict[str, list[Obj]] = field(default_factory=dict)
    unreadable: list[tuple[Obj, str]] = field(default_factory=list)
    quotas: list[Quota] = field(default_factory=list)
    queues: list[QueueSpec] = field(default_factory=list)  # the cluster's Volcano Queues
    launches: dict[str, Launch] = field(default_factory=dict)  # the reader's, by job id (for profile warnings)
    # PodGroups of this scheduler with a member lost with its node (`member_lost`): every live member, to restart
    # whole
    broken_gangs: dict[str, list[Obj]] = field(default_factory=dict)
    # pods that held capacity in the previous snapshot, or this scheduler's bound pods not seen Succeeded in it,
    # that have Succeeded since: (one-pod Job, run seconds)
    completed: list[tuple[Job, float]] = field(default_factory=list)
    # this scheduler's pods in `holding`: one-pod Job id -> the id of the job they were pending as (the gang's
    # "namespace/name", or the pod's own key)
    owner_of: dict[str, str] = field(default_factory=dict)
    # the gangs ("namespace/name") of the controllers' workloads that stand (a Job, an operator's): their pods,
    # evicted, are made again, after the controller's backoff (up to 10 min for a Job)
    owner_gangs: set[str] = field(default_factory=set)


def pod_key(obj: Obj) -> str:
    """`namespace/name` of a namespaced object."""
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


@functools.lru_cache(maxsize=65536)
def _stamp_s(stamp: str) -> float:
    return float(calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")))


def epoch_s(stamp: str | None) -> float:
    """An RFC 3339 timestamp as the API server writes it ("2026-12-02T01:19:27Z"), in epoch seconds."""
    return _stamp_s(stamp) if stamp else time.time()


def pod_group(pod: Obj) -> str | None:
    """The PodGroup a pod names (Volcano's annotation or the coscheduling label), as the reader reads it."""
    meta = pod["metadata"]
    return (meta.get("annotations") or {}).get(VOLCANO_GROUP) or (meta.get("labels") or {}).get(COSCHED_GROUP)


def member_lost(pod: Obj, node: Obj | None, now_s: float) -> bool:
    """Whether a bound pod is lost with its node, as Kubernetes's taint-based eviction decides it: the node is
    gone, or it carries a NoExecute taint (the node lifecycle controller's `node.kubernetes.io/not-ready` and
    `unreachable` among them) that the pod does not tolerate, or the least `tolerationSeconds` of the tolerations
    it uses has run out since the first such taint's `timeAdded` (tolerations without seconds tolerate for ever).
    Pods admitted with DefaultTolerationSeconds tolerate both node taints for 300 s, so a node that flaps back to
    Ready within that time costs no gang its run."""
    if node is None:
        return True
    taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoExecute"]
    seconds: list[int] = []
    for taint in taints:
        used = [t for t in pod["spec"].get("tolerations") or [] if _tolerates(t, taint)]
        if not used:
            return True
        seconds += [int(t["tolerationSeconds"]) for t in used if t.get("tolerationSeconds") is not None]
    if not seconds:
        return False
    return now_s >= min(epoch_s(t.get("timeAdded")) for t in taints) + max(0, min(seconds))


def _members_to_restart(bound: list[tuple[Obj, bool]]) -> list[Obj]:
    """The members of one gang to evict, given its bound members and whether each is lost with its node: every
    member not already terminating that ran beside a lost one. A lost member the taint eviction controller (or
    anyone) is already deleting still breaks the run it belonged to, the members created before its deletion;
    members created since are the gang's next run, beside the old run's pods that linger on the dead node."""
    lost_at = [math.inf if not pod["metadata"].get("deletionTimestamp")
               else epoch_s(pod["metadata"]["deletionTimestamp"]) for pod, lost in bound if lost]
    if not lost_at:
        return []
    cutoff_s = max(lost_at)
    return [pod for pod, _ in bound if not pod["metadata"].get("deletionTimestamp")
            and epoch_s(pod["metadata"].get("creationTimestamp")) < cutoff_s]


def _tolerates(toleration: Obj, taint: Obj) -> bool:
    if toleration.get("effect") not in (None, "", taint.get("effect")):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration.get("key") == taint.get("key")
    return toleration.get("key") == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def node_ready(node: Obj) -> bool:
    """Whether a node takes new pods: its Ready condition is True and none of the node lifecycle controller's
    taints (not-ready, unreachable) is on it; they can linger a moment after Ready is True again. trimtab places
    nothing on such a node, even for a pod that tolerates the taints."""
    conditions = (node.get("status") or {}).get("conditions") or []
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return False
    return not any(t.get("key") in LIFECYCLE_TAINTS for t in (node.get("spec") or {}).get("taints") or [])


class SnapshotReader:
    """Reads snapshots for scheduler `scheduler_name` (None: the pending pods of every scheduler, as the twin
    replays them). Keeps the one-pod Jobs of bound pods by uid between
    snapshots (a bound pod's requests do not change), so a snapshot reads only what is new."""

    def __init__(self, scheduler_name: str | None) -> None:
        self._gangs: set[tuple[str, str]] = set()  # (namespace, name) of every gang this snapshot knows
        self._owners_read: set[tuple[str, str]] = set()  # (namespace, name) of every owner read (owners.py)
        self.scheduler_name = scheduler_name
        self._holding_jobs: dict[str, Job] = {}
        self._succeeded: set[str] = set()  # the uids of the Succeeded pods of the last snapshot
        self._holding_tasks: dict[str, Resources] = {}  # a bound pod's task by its containers' requests
        # each pod's facts by the id of its dict, the dict kept with them (so the id is not reused meanwhile)
        # (and its row of `holding`, once it is bound to a node and started: `_read_bound`)
        self._facts: dict[int, list[Any]] = {}
        self._owner_docs: dict[int, tuple[Obj, list[Obj]]] = {}  # an owner's version -> its gang's PodGroup doc
        # the same of pending pods: `_pod_version`
        self._pending_versions: dict[int, tuple[Obj, str]] = {}
        # the reads of the last snapshot's pending units, by the versions of their documents: most cycles see the
        # same pending pods, and reading one costs far more than comparing versions
        self._unit_reads: dict[tuple[Any, ...], Manifests | str] = {}
        # the same of Ready nodes, by what the reader reads of them (a node's heartbeats change its version only)
        self._node_reads: dict[str, Node | None] = {}
        self._node_versions: dict[int, tuple[Obj, Node | None]] = {}  # the same by the id of each node's dict
        self._inventory = Inventory(live=True)  # the DRA objects of the snapshot being read
        self._group_queues: dict[tuple[str, str], str] = {}  # PodGroup (namespace, name) -> its spec.queue

    def read(self, nodes: Iterable[Obj], pods: Iterable[Obj], groups: Iterable[Obj], classes: Iterable[Obj],
             namespaces: Iterable[Obj], quotas: Iterable[Obj], assumed: Mapping[str, str], now_s: float,
             owners: Iterable[Obj] = (), inventory: Inventory | None = None, queues: Iterable[Obj] = ()) -> Snapshot:
        """`assumed`: pod key -> node for pods this scheduler bound that the informer has not shown bound yet;
        `now_s` (epoch seconds) decides which gang members the taints of their nodes have evicted by now;
        `owners` the batch/v1 Jobs and upstream PodGroups, whose pods form a gang each (owners.py; a PodGroup of
        `groups` of the same name is that gang); `inventory` the cluster's DRA objects (kube/claims.py); `queues`
        its Volcano Queues."""
        out = Snapshot()
        self._inventory = inventory if inventory is not None else Inventory(live=True)
        owners = list(owners)
        groups = list(groups)
        named = {(g["metadata"]["namespace"], g["metadata"]["name"]) for g in groups}
        owned = self._owner_groups(owners)
        out.owner_gangs = {f"{g['metadata']['namespace']}/{g['metadata']['name']}" for g in owned}
        groups += [g for g in owned if (g["metadata"]["namespace"], g["metadata"]["name"]) not in named]
        self._gangs = {(g["metadata"]["namespace"], g["metadata"]["name"]) for g in groups}
        self._owners_read = {(o["metadata"]["namespace"], name) for o in owners for name, _ in owner_sizes(o)}
        for doc in quotas:
            try:
                out.quotas += read_documents([(f"ResourceQuota {pod_key(doc)}", doc)]).quotas
            except FormatError:
                continue  # a quota on resources trimtab does not model holds nothing it schedules
        for doc in queues:
            try:
                out.queues += read_documents([(f"Queue {doc['metadata']['name']}", doc)]).queues
            except FormatError:
                continue  # the API server took it; a field trimtab cannot read: its jobs share as if it had none
        self._group_queues = {(g["metadata"]["namespace"], g["metadata"]["name"]): str(q) for g in groups
                              if (q := (g.get("spec") or {}).get("queue"))}
        nodes = sorted(nodes, key=lambda n: n["metadata"]["name"])
        out.nodes = [with_devices(node, self._inventory) for node in self._read_nodes(nodes)]
        mine, bound_in_group = self._read_bound(out, pods, assumed, {n["metadata"]["name"]: n for n in nodes}, now_s)
        self._read_pending(out, mine, groups, self._classes(classes),
                           {n["metadata"]["name"]: n for n in namespaces}, bound_in_group)
        return out

    def _read_nodes(self, nodes: list[Obj]) -> list[Node]:
        """The Ready nodes the reader can model, each version (dict) of a node read once: a heartbeat makes a new
        version, which is read again only if what the reader reads of it changed (`_node_doc`)."""
        if len(self._node_reads) > 2 * len(nodes) + 64:  # reads of node versions long gone
            self._node_reads = {}
        by_doc, self._node_versions = self._node_versions, {}
        out: list[Node] = []
        for doc in nodes:
            known = by_doc.get(id(doc))
            if known is None:
                node = None
                if node_ready(doc):
                    read = _node_doc(doc)
                    key = repr(read)
                    node = self._node_reads[key] if key in self._node_reads else _read_node(read)
                    self._node_reads[key] = node
                known = (doc, node)
            self._node_versions[id(doc)] = known
            if known[1] is not None:
                out.append(known[1])
        return out

    def _read_bound(self, out: Snapshot, pods: Iterable[Obj], assumed: Mapping[str, str], node_docs: Mapping[str, Obj],
                    now_s: float) -> tuple[list[Obj], dict[tuple[str, str], int]]:
        """Fills `out.holding` and `out.broken_gangs`; returns this scheduler's pending pods and the bound members
        of each PodGroup (namespace, name)."""
        ready = {n.name for n in out.nodes}
        bound_in_group: dict[tuple[str, str], int] = {}
        members: dict[tuple[str, str], list[tuple[Obj, bool]]] = {}  # our gangs' bound members, lost with their node?
        mine: list[Obj] = []
        kept: dict[str, Job] = {}  # the one-pod Jobs of the bound pods seen (`_holding_jobs` next)
        facts_cache, self._facts = self._facts, {}
        done_before, done = self._succeeded, set()
        for pod in pods:
            entry = facts_cache.get(id(pod)) or [pod, self._pod_facts(pod), None]
            self._facts[id(pod)] = entry
            uid, key, phase, node, deleting, ours, group, started, owners = entry[1]
            if group is None and owners:  # the first of its owners' gangs; none (not read yet, or no gang): alone
                group = next((g for name in owners if (g := (key.split("/")[0], name)) in self._gangs), None)
            node = node or assumed.get(key)
            if phase in _TERMINAL or (deleting and not node):
                if phase == "Succeeded":
                    done.add(uid)
                    if uid in self._holding_jobs or (ours and node and uid not in done_before):
                        out.completed.append((self._holding_job(pod), _run_s(pod)))
                continue
            if not node:
                if ours:
                    mine.append(pod)
                continue
            if group:
                if not deleting:  # a member on its way out (a restarted gang's, on a dead node) is not a member
                    bound_in_group[group] = bound_in_group.get(group, 0) + 1
                if ours:
                    members.setdefault(group, []).append((pod, member_lost(pod, node_docs.get(node), now_s)))
            if node not in ready:
                if uid in self._holding_jobs:
                    kept[uid] = self._holding_jobs[uid]
                continue
            row = entry[2]
            if row is None or row[1] != node:
                row = (self._holding_job(pod), node, epoch_s(started))
                if started and node == entry[1][3] and not pod["spec"].get("resourceClaims"):
                    entry[2] = row  # the same for as long as this version of the pod is bound there
            out.holding.append(row)
            kept[uid] = row[0]
            if ours:
                out.owner_of[row[0].id] = f"{group[0]}/{group[1]}" if group else key
        self._holding_jobs = kept
        self._succeeded = done
        for (ns, group), bound in members.items():
            restart = _members_to_restart(bound)
            if restart:
                out.broken_gangs[f"{ns}/{group}"] = restart
        return mine, bound_in_group

    def _owner_groups(self, owners: list[Obj]) -> list[Obj]:
        """`owner_groups` of `owners`, computed once per version (dict) of each owner, as `_pod_facts` is."""
        cache, self._owner_docs = self._owner_docs, {}
        out: list[Obj] = []
        for owner in owners:
            known = cache.get(id(owner)) or (owner, owner_groups([owner]))
            self._owner_docs[id(owner)] = known
            out += known[1]
        return out

    def _pod_facts(self, pod: Obj) -> PodFacts:
        """What `_read_bound` reads of one version of a pod (an informer replaces a pod's dict when it changes)."""
        meta, spec = pod["metadata"], pod["spec"]
        named = pod_group(pod)
        return (meta["uid"], pod_key(pod), (pod.get("status") or {}).get("phase"), spec.get("nodeName"),
                bool(meta.get("deletionTimestamp")),
                self.scheduler_name is None or spec.get("schedulerName") == self.scheduler_name,
                (meta["namespace"], named) if named else None, (pod.get("status") or {}).get("startTime"),
                () if named else owner_names(pod))

    def _pod_version(self, pod: Obj, before: Mapping[int, tuple[Obj, str]]) -> str:
        """What the reader reads of a pending pod (its metadata and spec), as a key: a write to its status (the
        Unschedulable condition this scheduler writes) or the metadata the API server bumps with every write does
        not make it read again. Computed once per version (dict) of the pod (`before`: the last snapshot's)."""
        known = before.get(id(pod))
        if known is None:
            meta = {k: v for k, v in pod["metadata"].items() if k not in ("resourceVersion", "managedFields")}
            known = (pod, repr((meta, pod["spec"])))
        self._pending_versions[id(pod)] = known
        return known[1]

    def _classes(self, classes: Iterable[Obj]) -> list[PriorityClass]:
        docs = [(f"PriorityClass {c['metadata']['name']}", c) for c in classes]
        try:
            return list(read_documents(docs).priority_classes.values())
        except FormatError:
            return []

    def _holding_job(self, pod: Obj) -> Job:
        """A bound pod as a one-task Job of its requests, priority and stated duration (what it holds, what evicting
        it costs, when it is expected to end). A pod already terminating holds its resources until it is gone but
        is no one's victim again: it counts as of the highest priority."""
        uid = pod["metadata"]["uid"]
        terminating = bool(pod["metadata"].get("deletionTimestamp"))
        job = self._holding_jobs.get(uid)
        claims = bool(pod["spec"].get("resourceClaims"))
        if job is None or claims or (terminating and job.priority != TERMINATING_PRIORITY):
            task = self._holding_task(pod)
            if claims:  # what its claims hold may show after the pod does: read again each snapshot
                task = dataclasses.replace(task, gpus=task.gpus + holding_devices(pod, self._inventory))
            priority = TERMINATING_PRIORITY if terminating else int(pod["spec"].get("priority") or 0)
            job = Job(f"bound:{uid}", 0.0, 1, task, tenant=pod["metadata"]["namespace"], priority=priority,
                      duration_s=_stated_duration_s(pod), queue=self._queue_of(pod))
            self._holding_jobs[uid] = job
        return job

    def _queue_of(self, pod: Obj) -> str:
        """A bound pod's Volcano Queue: its PodGroup's `spec.queue`, else its annotation; "" (its namespace)."""
        meta = pod["metadata"]
        group = pod_group(pod)
        return (self._group_queues.get((meta["namespace"], group), "") if group else "") \
            or str((meta.get("annotations") or {}).get(QUEUE, ""))

    def _holding_task(self, pod: Obj) -> Resources:
        """What a bound pod holds: the reader's task of its containers' requests, read once per distinct set of
        requests (a bound pod is read afresh otherwise, and most pods of a cluster ask alike)."""
        containers = [{"name": c.get("name", "c"), "resources": c.get("resources") or {}}
                      for c in pod["spec"].get("containers") or []]
        inits = [{"name": c.get("name", "c"), "resources": c.get("resources") or {}}
                 for c in pod["spec"].get("initContainers") or []]
        key = repr(([c["resources"] for c in containers], [c["resources"] for c in inits]))
        task = self._holding_tasks.get(key)
        if task is None:
            doc = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"]},
                   "spec": {"containers": containers, "initContainers": inits}}
            try:
                task = read_documents([(pod_key(pod), doc)]).jobs[0].task
            except FormatError:  # the API server took it; it holds nothing trimtab models
                task = Resources()
            if len(self._holding_tasks) >= HOLDING_TASKS:
                self._holding_tasks.clear()
            self._holding_tasks[key] = task
        return task

    def _read_pending(self, out: Snapshot, mine: list[Obj], groups: list[Obj], classes: list[PriorityClass],
                      namespaces: Mapping[str, Obj], bound_in_group: Mapping[tuple[str, str], int]) -> None:
        """Read each pending unit (a pod alone, or the pending pods of one gang with it) into `out`. The pods of an
        owner not read yet wait for it: read alone, they could be bound in part."""
        group_docs = {(g["metadata"]["namespace"], g["metadata"]["name"]): g for g in groups}
        units: dict[tuple[str, str], list[Obj]] = {}
        owned: set[str] = set()  # pods in a gang of their owner's, which the reader learns of through the label
        for pod in sorted(mine, key=lambda p: (epoch_s(p["metadata"].get("creationTimestamp")), pod_key(p))):
            ns = pod["metadata"]["namespace"]
            group = pod_group(pod)
            if group is None and (owners := owner_names(pod)):
                group = next((name for name in owners if (ns, name) in group_docs), None)
                if group is not None:
                    owned.add(pod_key(pod))
                elif not any((ns, name) in self._owners_read for name in owners):
                    continue
            units.setdefault((ns, group) if group else (ns, "pod:" + pod["metadata"]["name"]), []).append(pod)
        classes_key = tuple(sorted((c.name, c.value, c.global_default) for c in classes))
        cache, self._unit_reads = self._unit_reads, {}
        inv = self._inventory  # where GPU pods may go depends on the devices and the nodes' own GPUs
        dra_key = (inv.devices_key, tuple(sorted(inv.own_gpus.items()))) if inv.devices else None
        versions_before, self._pending_versions = self._pending_versions, {}
        for (ns, name), pods in units.items():
            docs: list[tuple[str, Obj]] = [(pod_key(p), _pod_doc(p, name if pod_key(p) in owned else None))
                                           for p in pods]
            gang = not name.startswith("pod:")
            if gang and (ns, name) in group_docs:
                docs.append((f"{ns}/{name}", _group_doc(group_docs[(ns, name)], bound_in_group.get((ns, name), 0))))
            if ns in namespaces:
                docs.append((f"Namespace {ns}", namespaces[ns]))
            key = (tuple(self._pod_version(p, versions_before) for p in pods),
                   tuple(_version(data) for _, data in docs[len(pods):]), classes_key,
                   tuple(claims_state(p, self._inventory) for p in pods if p["spec"].get("resourceClaims")),
                   dra_key)
            read = cache[key] if key in cache else _read_unit(docs, classes, self._inventory)
            self._unit_reads[key] = read
            if isinstance(read, str):
                out.unreadable += [(p, read) for p in pods]
                continue
            out.launches.update(read.launches)
            self._add_unit(out, pods, read.jobs, f"{ns}/{name}" if gang else None,
                           bound_in_group.get((ns, name), 0) if gang else 0)

    @staticmethod
    def _add_unit(out: Snapshot, pods: list[Obj], jobs: list[Job], gang_id: str | None, bound: int) -> None:
        """Pair the reader's jobs with the pods they stand for: a gang's job takes the first pods in order, each
        follower the pod of its name. A follower of a gang already running needs no longer wait for it."""
        created = epoch_s(pods[0]["metadata"].get("creationTimestamp"))
        by_key = {pod_key(p): p for p in pods}
        taken = 0
        for job in jobs:
            if job.id == gang_id:
                members = pods[taken:taken + job.tasks]
                taken += job.tasks
            else:
                members = [by_key[job.id]]
            after = None if bound and job.after == gang_id else job.after
            job = dataclasses.replace(job, submit_s=created, after=after)
            out.pending.append(job)
            out.pods_of[job.id] = members


def _run_s(pod: Obj) -> float:
    """How long a finished pod ran: from its start to its last container's end (now when no end is shown)."""
    status = pod.get("status") or {}
    ends = [epoch_s(c["state"]["terminated"].get("finishedAt")) for c in status.get("containerStatuses") or []
            if (c.get("state") or {}).get("terminated")]
    return max((max(ends) if ends else time.time()) - epoch_s(status.get("startTime")), 0.0)


def _read_node(doc: Obj) -> Node | None:
    """The model Node of a Node object as `_node_doc` gives it; None for one the reader cannot model (it takes no
    work from trimtab)."""
    try:
        return read_documents([(f"Node {doc['metadata']['name']}", doc)]).nodes[0]
    except FormatError:
        return None


def _read_unit(docs: list[tuple[str, Obj]], classes: list[PriorityClass], inventory: Inventory) -> Manifests | str:
    """The reader's Manifests of one pending unit, or its message when it refuses the unit."""
    try:
        return read_documents(docs, classes=classes, inventory=inventory)
    except FormatError as exc:
        return str(exc)


def _version(data: Obj) -> tuple[str, str, str]:
    """What identifies a version of an object: its uid and resourceVersion (and a PodGroup's minMember as this
    snapshot counts it)."""
    meta = data["metadata"]
    return meta.get("uid", ""), meta.get("resourceVersion", ""), str((data.get("spec") or {}).get("minMember", ""))


def _node_doc(node: Obj) -> Obj:
    """The fields of a Node the reader models (the rest would only be warned about, or change with every
    heartbeat)."""
    spec, meta = node.get("spec") or {}, node["metadata"]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {k: meta[k] for k in ("name", "labels") if k in meta},
            "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
            "status": {k: v for k, v in (node.get("status") or {}).items() if k in ("allocatable", "capacity")}}


def _pod_doc(pod: Obj, gang: str | None = None) -> Obj:
    """The pod as the reader reads it; a member of its owner's `gang` labelled as a member of that PodGroup. Its
    scheduling group is left out: the snapshot resolved it already (kube/owners.py), into `gang` or into none."""
    meta, spec = pod["metadata"], pod["spec"]
    if gang is not None:
        meta = {**meta, "labels": {**(meta.get("labels") or {}), COSCHED_GROUP: gang}}
    if "schedulingGroup" in spec:
        spec = {k: v for k, v in spec.items() if k != "schedulingGroup"}
    claims = (pod.get("status") or {}).get("resourceClaimStatuses")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            **({"status": {"resourceClaimStatuses": claims}} if claims else {})}


def _group_doc(group: Obj, bound: int) -> Obj:
    """A PodGroup as its pending pods see it: members already bound count toward minMember."""
    spec = dict(group.get("spec") or {})
    spec["minMember"] = max(1, int(spec.get("minMember", 1)) - bound)
    return {"apiVersion": group["apiVersion"], "kind": "PodGroup", "metadata": group["metadata"], "spec": spec}


def _stated_duration_s(pod: Obj) -> float | None:
    """A pod's `trimtab.io/duration` in seconds (None: absent, or not a duration; the reader told the user so
    when the pod was pending)."""
    value = (pod["metadata"].get("annotations") or {}).get(DURATION)
    try:
        return parse_duration_s(str(value)) if value is not None else None
    except ValueError:
        return None
