"""The twin: a live cluster read once (list, no watch) and turned into a simulation's input, so its pending work can
be replayed under any policy (`trimtab simulate --from-cluster`): the what-if a platform team asks before it
switches schedulers.

Owns read_cluster and cluster_twin. The cluster is read with the same SnapshotReader as `trimtab kube` (so the
twin sees what the live scheduler sees: Ready nodes, the pods holding capacity, pending pods grouped into gangs by
their PodGroups, quotas and priority classes), with the pending pods of every scheduler. Time 0 of the replay is
the snapshot: each running pod is a job submitted at 0, pinned to its node, for what is left of its run; the
pending jobs arrive just after, in creation order."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from trimtab.formats.k8s import Manifests
from trimtab.formats.k8s.workloads import DURATION
from trimtab.kube.api import KINDS, KubeApi, status_code
from trimtab.kube.claims import live_inventory
from trimtab.kube.owners import OWNER_INFORMERS
from trimtab.kube.snapshot import SnapshotReader, pod_key
from trimtab.model import Job, Node
from trimtab.units import parse_duration_s

Obj = dict[str, Any]
DRA_INFORMERS = ("deviceclasses", "resourceslices", "resourceclaims")
PENDING_AT_S = 1.0  # pending jobs arrive after the running ones have been placed back on their nodes
_ARRIVAL_STEP_S = 0.001  # keeps the pending jobs' creation order in the replay's submit times
_TOLERATE_ALL = (("", "Exists", "", ""),)  # a running pod stays where it is, whatever the node's taints say now


@dataclass(slots=True)
class ClusterTwin:
    """The replay's input. `jobs`: the running pods (ids `namespace/name`, submit 0, pinned), then the pending
    jobs (a pod's id is its `namespace/name`, a gang's `namespace/podgroup`); `pods_of[job.id]` the pod keys a
    pending job stands for; `manifests` what the profile is composed with (quotas, gangs' followers, launches);
    `not_replayed` the pending pods not replayed, with why (the reader refused them, or they ask for more GPUs than
    the cluster has)."""

    nodes: list[Node]
    jobs: list[Job]
    running: int
    pods_of: dict[str, list[str]]
    manifests: Manifests
    not_replayed: list[tuple[str, str]]


def read_cluster(api: KubeApi) -> dict[str, list[Obj]]:
    """Every object of each kind `trimtab kube` watches, by kind name; a kind the cluster does not serve (a
    PodGroup CRD not installed) reads as empty."""
    out: dict[str, list[Obj]] = {}
    for name, kind in KINDS.items():
        try:
            out[name] = api.list(kind)[0]
        except Exception as exc:
            if status_code(exc) != 404:
                raise
            out[name] = []
    return out


def cluster_twin(objects: dict[str, list[Obj]], now_s: float, pod_duration_s: float) -> ClusterTwin:
    """The twin of the cluster `objects` (read_cluster's answer) at `now_s` (epoch seconds). A pod's run time is
    its `trimtab.io/duration` annotation, else `pod_duration_s`; a running pod runs for what is left of it (at
    least a second)."""
    snap = SnapshotReader(None).read(objects["nodes"], objects["pods"],
                                     objects["podgroups"] + objects["volcanopodgroups"], objects["priorityclasses"],
                                     objects["namespaces"], objects["resourcequotas"], {}, now_s,
                                     [o for kind in OWNER_INFORMERS for o in objects.get(kind, [])],
                                     live_inventory(*(objects.get(kind, []) for kind in DRA_INFORMERS)),
                                     objects.get("volcanoqueues", []))
    pods_by_uid = {pod["metadata"]["uid"]: pod for pod in objects["pods"]}
    jobs: list[Job] = []
    for job, node, start_s in snap.holding:
        pod = pods_by_uid[job.id.removeprefix("bound:")]
        left_s = max(_duration_s(pod, pod_duration_s) - (now_s - start_s), 1.0)
        jobs.append(dataclasses.replace(job, id=pod_key(pod), submit_s=0.0, duration_s=left_s,
                                        node_affinity=(((("field:metadata.name", "In", (node,)),),)),
                                        tolerations=_TOLERATE_ALL))
    running = len(jobs)
    not_replayed = [(pod_key(pod), message) for pod, message in snap.unreadable]
    total_gpus = sum(node.capacity.gpus for node in snap.nodes)
    pending = []
    for job in sorted(snap.pending, key=lambda j: (j.submit_s, j.id)):
        if job.gpus > total_gpus:  # it waits for ever live too; a replay of it would say nothing more
            not_replayed += [(pod_key(p), f"asks for {job.gpus} GPUs; the Ready nodes have {total_gpus}")
                           for p in snap.pods_of[job.id]]
        else:
            pending.append(job)
    for rank, job in enumerate(pending):
        duration_s = job.duration_s if job.duration_s is not None else pod_duration_s
        jobs.append(dataclasses.replace(job, submit_s=PENDING_AT_S + rank * _ARRIVAL_STEP_S, duration_s=duration_s))
    manifests = Manifests(nodes=snap.nodes, jobs=jobs[running:], quotas=snap.quotas, queues=snap.queues,
                          launches=snap.launches)
    return ClusterTwin(snap.nodes, jobs, running, {j: [pod_key(p) for p in pods] for j, pods in snap.pods_of.items()},
                       manifests, not_replayed)


def _duration_s(pod: Obj, default_s: float) -> float:
    """A pod's run time by its annotation; `default_s` when it has none (or one no duration parser accepts: the
    API server took the pod, the twin still replays it)."""
    value = (pod["metadata"].get("annotations") or {}).get(DURATION)
    try:
        duration_s = parse_duration_s(value) if value is not None else default_s
    except ValueError:
        return default_s
    return duration_s if math.isfinite(duration_s) else default_s
