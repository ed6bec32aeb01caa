"""The workloads of a manifest set: Pod, batch/v1 Job, Volcano Job, and PodGroup (coscheduling, Volcano, or the
Workload API's) with its pods, as model Jobs.

Owns the pod spec reader (requests and limits, constraints, what each container runs) and the gang rules that
turn one or more pods into one Job, with a Launch beside it for the live service."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trimtab.formats.k8s.affinity import NodeTerm, Toleration, read_affinity, read_tolerations
from trimtab.formats.k8s.documents import (
    Doc,
    annotation_seconds,
    int_field,
    list_field,
    str_map,
)
from trimtab.formats.k8s.dra import Inventory
from trimtab.formats.k8s.dra_extended import pod_devices
from trimtab.formats.k8s.job_backoff import BACKOFF_LIMIT, pod_backoff
from trimtab.formats.k8s.operators import job_gang_size, operator_gangs
from trimtab.formats.k8s.pod_claims import pod_claims, restrict
from trimtab.formats.k8s.policy_objects import SYSTEM_CLASSES, PriorityClass
from trimtab.formats.k8s.resources import pod_resources
from trimtab.model import Elastic, Job, PodAffinity, PodBackoff, Resources, parse_gpu_range

DURATION = "trimtab.io/duration"
SUBMIT = "trimtab.io/submit-time"
GPU_RANGE = "trimtab.io/gpus"  # an elastic gang's GPU range, e.g. "2-8" (docs/elastic.md)
VOLCANO_GROUP = "scheduling.k8s.io/group-name"  # pod annotation naming its Volcano PodGroup
COSCHED_GROUP = "scheduling.x-k8s.io/pod-group"  # pod label naming its coscheduling PodGroup
QUEUE = "scheduling.volcano.sh/queue-name"  # pod annotation naming its Volcano Queue (when its workload names none)
GANG = "trimtab.io/gang"  # "false" on a Job or its pod template: its pods are scheduled one by one
MAX_PODS = 100_000  # pods of one workload; more is refused before anything is built for them

_POD_SPEC_KEYS = (
    "containers", "initContainers", "nodeSelector", "affinity", "tolerations", "priorityClassName", "priority",
    "schedulerName", "restartPolicy", "volumes", "serviceAccountName", "serviceAccount",
    "terminationGracePeriodSeconds", "hostNetwork", "hostIPC", "hostPID", "dnsPolicy", "imagePullSecrets",
    "securityContext", "preemptionPolicy", "nodeName", "runtimeClassName", "shareProcessNamespace",
    "enableServiceLinks", "automountServiceAccountToken", "hostname", "subdomain", "activeDeadlineSeconds",
    "schedulingGroup", "resourceClaims",
)
_SCHEDULING_GROUP_KEYS = ("parentCompositePodGroupName", "workloadRef", "schedulingPolicy", "schedulingConstraints",
                          "resourceClaims", "disruptionMode", "priorityClassName", "priority", "preemptionPolicy")
_CONTAINER_KEYS = (
    "name", "image", "command", "args", "env", "envFrom", "ports", "volumeMounts", "resources", "workingDir",
    "imagePullPolicy", "securityContext", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle", "stdin",
    "tty", "terminationMessagePath", "terminationMessagePolicy",
)
_VCJOB_KEYS = ("tasks", "minAvailable", "queue", "priorityClassName", "schedulerName", "policies", "plugins",
               "maxRetry", "ttlSecondsAfterFinished", "volumes", "minSuccess", "runningEstimate", "networkTopology")
_BATCH_JOB_KEYS = ("template", "parallelism", "completions", "backoffLimit", "completionMode",
                   "ttlSecondsAfterFinished", "activeDeadlineSeconds", "suspend", "selector", "manualSelector",
                   "podFailurePolicy", "backoffLimitPerIndex", "maxFailedIndexes", "podReplacementPolicy",
                   "successPolicy", "managedBy")


@dataclass(frozen=True, slots=True)
class Container:
    """What one container runs. The simulator does not use it; the live service runs it."""

    path: str  # its document path, e.g. "spec.containers[0]"
    argv: tuple[str, ...]  # command, then args
    env: tuple[tuple[str, str | None], ...]  # (name, literal value); None: the value comes from valueFrom
    workdir: str | None


@dataclass(frozen=True, slots=True)
class PodRun:
    """One pod of a workload as the live service runs it: its document, pod spec path, containers, annotations."""

    source: str
    path: str  # "spec", "spec.template.spec", "spec.tasks[1].template.spec"
    containers: tuple[Container, ...]
    annotations: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Launch:
    """What the live service needs beside the model Job to run one workload: the workload's document and kind,
    its namespace as written (None when left out: the submitter's own), the pods in task order, and the
    annotations (the workload document's over its first pod's)."""

    source: str
    kind: str
    namespace: str | None
    pods: tuple[PodRun, ...]
    annotations: Mapping[str, str]


@dataclass(slots=True)
class _PodSpec:
    task: Resources
    limits: Resources
    specified: dict[str, bool]
    node_selector: dict[str, str]
    node_affinity: tuple[NodeTerm, ...]
    node_preferences: tuple[tuple[int, NodeTerm], ...]
    labels: dict[str, str]
    pod_affinity: PodAffinity | None
    tolerations: tuple[Toleration, ...]
    priority_class: str
    duration_s: float | None
    submit_s: float | None
    group: str | None
    scheduling_group: str | None  # the Workload API PodGroup the pod names (spec.schedulingGroup.podGroupName)
    run: PodRun


class WorkloadReader:
    """Reads the workload documents of one manifest set into `jobs`, once its priority classes (`classes`, with
    the global default `default_class`) and namespaces (name -> labels, for namespaceSelector) are known, with
    the DRA `inventory` its pods' ResourceClaims draw on (pod_claims.py).

    For each job it records `launches[job.id]`, `sources[job.id]` (its document) and `specified[job.id]` (which
    of requests.cpu / requests.memory / limits.cpu / limits.memory every container states, for quota checks)."""

    def __init__(self, classes: Mapping[str, PriorityClass], default_class: PriorityClass | None,
                 namespaces: Mapping[str, Mapping[str, str]], inventory: Inventory | None = None) -> None:
        self.classes = classes
        self.inventory = inventory or Inventory()
        self.default_class = default_class
        self.namespaces = namespaces
        self.jobs: list[Job] = []
        self.launches: dict[str, Launch] = {}
        self.sources: dict[str, str] = {}
        self.specified: dict[str, dict[str, bool]] = {}

    def read_pods_and_groups(self, pod_docs: list[Doc], group_docs: list[Doc],
                             scheduling_docs: Sequence[Doc] = ()) -> None:
        """A pod that names no PodGroup is a job of one task; the pods naming a PodGroup are its gang (and its
        followers, beyond minMember). A pod's coscheduling or Volcano PodGroup (label, annotation) comes before the
        Workload API's PodGroup (`scheduling_docs`) it names in `spec.schedulingGroup`."""
        known = {False: {(d.namespace, d.name): d for d in group_docs},
                 True: {(d.namespace, d.name): d for d in scheduling_docs}}
        members: dict[tuple[bool, str, str], list[tuple[Doc, _PodSpec]]] = {}
        for doc in pod_docs:
            pod = self._pod(doc, doc.data.get("spec"), "spec", doc.data.get("metadata") or {})
            upstream, name = (False, pod.group) if pod.group else (True, pod.scheduling_group)
            if name is None:
                self._job(doc, [pod], pod.priority_class, "", 1)
                continue
            if (doc.namespace, name) not in known[upstream]:
                path = "spec.schedulingGroup.podGroupName" if upstream else "metadata.annotations"
                raise doc.error(path, f"the pod names PodGroup {name!r} in namespace {doc.namespace}, which no "
                                "document defines; it would stay pending forever")
            members.setdefault((upstream, doc.namespace, name), []).append((doc, pod))
        for upstream, groups in known.items():
            for (namespace, name), gdoc in groups.items():
                named = members.get((upstream, namespace, name), [])
                (self._scheduling_group if upstream else self._group)(gdoc, named)

    def read_batch_job(self, doc: Doc) -> None:
        """A batch/v1 Job: the pods the Job controller runs at once (`job_gang_size`) of its template, started
        together, or one by one (`name-i`) when the Job or its template opts out (`trimtab.io/gang: "false"`);
        `backoffLimit` (default 6) retries, and its evicted pods come back as the Job controller brings them
        (job_backoff.py)."""
        spec = doc.data.get("spec")
        if not isinstance(spec, dict):
            raise doc.error("spec", "a Job needs a spec mapping")
        doc.check_keys(spec, "spec", _BATCH_JOB_KEYS)
        template = spec.get("template")
        if not isinstance(template, dict):
            raise doc.error("spec.template", "a Job needs a pod template")
        doc.check_keys(template, "spec.template", ("metadata", "spec"))
        _count(doc, spec.get("parallelism", 1), "spec.parallelism", 1)
        if spec.get("completions") is not None:
            _count(doc, spec["completions"], "spec.completions", 1)
        size = job_gang_size(spec)
        retries = int_field(doc, spec.get("backoffLimit", BACKOFF_LIMIT), "spec.backoffLimit", 0)
        pod = self._pod(doc, template.get("spec"), "spec.template.spec", template.get("metadata") or {})
        own, backoff = _own_annotations(doc), pod_backoff(doc, spec)
        if str(own.get(GANG, pod.run.annotations.get(GANG, ""))).lower() != "false":
            self._job(doc, [pod] * size, "", "", size, own, max_retries=retries, backoff=backoff)
            return
        for i in range(size):
            self._job(dataclasses.replace(doc, name=f"{doc.name}-{i}"), [pod], "", "", 1, own, max_retries=retries,
                      backoff=backoff)

    def read_operator(self, doc: Doc) -> None:
        """A PyTorchJob, RayCluster, RayJob or LeaderWorkerSet: each of its gangs (operators.py) as one, or its pods
        one by one when the workload opts out (`trimtab.io/gang: "false"`)."""
        own = _own_annotations(doc)
        for gang in operator_gangs(doc):
            pods = [self._pod(doc, t["spec"], f"{path}.spec", t.get("metadata") or {}) for path, t, _ in gang.pods]
            names = [name for _, _, name in gang.pods]
            if str(own.get(GANG, "")).lower() == "false":
                for pod, name in zip(pods, names, strict=True):
                    self._job(dataclasses.replace(doc, name=name), [pod], gang.priority_class, gang.queue, 1, own)
            elif pods:
                self._job(dataclasses.replace(doc, name=gang.name), pods, gang.priority_class, gang.queue, gang.size,
                          own, names=names)

    def read_volcano_job(self, doc: Doc) -> None:
        """A Volcano Job: the replicas of every task in task order, a gang of the first `minAvailable` and
        followers beyond it, each named as Volcano names its pod (`job-task-index`)."""
        spec = doc.data.get("spec")
        if not isinstance(spec, dict):
            raise doc.error("spec", "a Volcano Job needs a spec mapping")
        doc.check_keys(spec, "spec", _VCJOB_KEYS)
        tasks = spec.get("tasks")
        if not isinstance(tasks, list) or not tasks:
            raise doc.error("spec.tasks", "a Volcano Job needs at least one task")
        pods: list[_PodSpec] = []
        names: list[str] = []
        for i, t in enumerate(tasks):
            path = f"spec.tasks[{i}]"
            if not isinstance(t, dict):
                raise doc.error(path, "a task must be a mapping")
            doc.check_keys(t, path, ("name", "replicas", "template", "minAvailable", "policies", "maxRetry",
                                     "dependsOn", "topologyPolicy"))
            replicas = _count(doc, t.get("replicas", 1), f"{path}.replicas", 0, len(pods))
            template = t.get("template")
            if not isinstance(template, dict):
                raise doc.error(f"{path}.template", "a task needs a pod template")
            pod = self._pod(doc, template.get("spec"), f"{path}.template.spec", template.get("metadata") or {})
            pods += [pod] * replicas
            task_name = t.get("name") or f"default{i}"  # Volcano's name for an unnamed task
            names += [f"{doc.name}-{task_name}-{k}" for k in range(replicas)]
        if not pods:
            raise doc.error("spec.tasks", "the job has no replicas")
        min_available = int_field(doc, spec.get("minAvailable", len(pods)), "spec.minAvailable", 0)
        if min_available > len(pods):
            raise doc.error("spec.minAvailable", f"minAvailable {min_available} exceeds the {len(pods)} replicas; "
                            "the job could never start")
        self._job(doc, pods, str(spec.get("priorityClassName") or ""), str(spec.get("queue") or "default"),
                  min_available or len(pods), _own_annotations(doc), names=names)

    def _group(self, doc: Doc, named: list[tuple[Doc, _PodSpec]]) -> None:
        pods, names = [pod for _, pod in named], [pdoc.name for pdoc, _ in named]
        spec = doc.data.get("spec") or {}
        if not isinstance(spec, dict):
            raise doc.error("spec", "must be a mapping")
        doc.check_keys(spec, "spec", ("minMember", "minResources", "priorityClassName", "queue",
                                      "scheduleTimeoutSeconds", "minTaskMember"))
        min_member = int_field(doc, spec.get("minMember", 1), "spec.minMember", 1)
        if not pods:
            doc.warn("spec", "no pod names this PodGroup; nothing to schedule")
            return
        if len(pods) < min_member:
            raise doc.error("spec.minMember", f"minMember is {min_member} but only {len(pods)} pods name this "
                            "PodGroup; the gang could never start")
        self._job(doc, pods, str(spec.get("priorityClassName") or ""), str(spec.get("queue") or ""), min_member,
                  _own_annotations(doc), names=names)

    def _scheduling_group(self, doc: Doc, named: list[tuple[Doc, _PodSpec]]) -> None:
        """A PodGroup of the Workload API (scheduling.k8s.io/v1beta1): its `gang` policy makes the pods naming it
        a gang of `minCount`; the `basic` policy schedules each of them on its own."""
        spec = doc.data.get("spec")
        if not isinstance(spec, dict):
            raise doc.error("spec", "a PodGroup needs a spec mapping")
        doc.check_keys(spec, "spec", _SCHEDULING_GROUP_KEYS)
        policy = spec.get("schedulingPolicy")
        if not isinstance(policy, dict) or sum(policy.get(k) is not None for k in ("basic", "gang")) != 1:
            raise doc.error("spec.schedulingPolicy", "exactly one of basic and gang is required")
        doc.check_keys(policy, "spec.schedulingPolicy", ("basic", "gang"))
        if not named:
            doc.warn("spec", "no pod names this PodGroup; nothing to schedule")
            return
        gang = policy.get("gang")
        if gang is None:
            for pdoc, pod in named:
                self._job(pdoc, [pod], pod.priority_class, "", 1)
            return
        if not isinstance(gang, dict):
            raise doc.error("spec.schedulingPolicy.gang", "must be a mapping")
        doc.check_keys(gang, "spec.schedulingPolicy.gang", ("minCount",))
        min_count = int_field(doc, gang.get("minCount"), "spec.schedulingPolicy.gang.minCount", 1)
        if len(named) < min_count:
            raise doc.error("spec.schedulingPolicy.gang.minCount", f"minCount is {min_count} but only {len(named)} "
                            "pods name this PodGroup; the gang could never start")
        self._job(doc, [pod for _, pod in named], str(spec.get("priorityClassName") or ""), "", min_count,
                  _own_annotations(doc), names=[pdoc.name for pdoc, _ in named])

    def _pod(self, doc: Doc, spec: Any, path: str, meta: Mapping[str, Any]) -> _PodSpec:
        if not isinstance(spec, dict):
            raise doc.error(path, "a pod spec mapping is required")
        doc.check_keys(spec, path, _POD_SPEC_KEYS)
        if "nodeName" in spec:
            doc.warn(f"{path}.nodeName", "a pod bound by name skips the scheduler; trimtab schedules it anyway")
        containers = spec.get("containers")
        if not isinstance(containers, list) or not containers:
            raise doc.error(f"{path}.containers", "a pod needs at least one container")
        runs = tuple(_container(doc, c, f"{path}.containers[{i}]") for i, c in enumerate(containers))
        req, lim, specified = pod_resources(doc, spec, path)
        annotations = str_map(doc, meta.get("annotations"), "metadata.annotations")
        labels = str_map(doc, meta.get("labels"), "metadata.labels")
        affinity = read_affinity(doc, spec.get("affinity"), f"{path}.affinity", labels, self.namespaces)
        claims = pod_claims(doc, spec, (doc.data.get("status") or {}) if self.inventory.live and path == "spec"
                            else None, path, self.inventory) if spec.get("resourceClaims") else None
        devices, nodes = pod_devices(doc, spec, path, self.inventory, claims, int(req[0]))
        return _PodSpec(
            task=Resources(gpus=int(req[0]) + devices, cpu_milli=math.ceil(req[1] * 1000),
                           mem_mib=math.ceil(req[2] / 2**20)),
            limits=Resources(gpus=int(lim[0]) + devices, cpu_milli=math.ceil(lim[1] * 1000),
                             mem_mib=math.ceil(lim[2] / 2**20)),
            specified=specified,
            node_selector=str_map(doc, spec.get("nodeSelector"), f"{path}.nodeSelector"),
            node_affinity=restrict(affinity.node_required, nodes),
            node_preferences=affinity.node_preferred,
            labels=labels,
            pod_affinity=affinity.pods,
            tolerations=read_tolerations(doc, spec.get("tolerations"), f"{path}.tolerations"),
            priority_class=str(spec.get("priorityClassName") or ""),
            duration_s=annotation_seconds(doc, annotations, DURATION),
            submit_s=annotation_seconds(doc, annotations, SUBMIT),
            group=annotations.get(VOLCANO_GROUP) or labels.get(COSCHED_GROUP) or None,
            scheduling_group=_scheduling_group_name(doc, spec.get("schedulingGroup"), f"{path}.schedulingGroup"),
            run=PodRun(doc.source, path, runs, annotations),
        )

    def _job(self, doc: Doc, pods: list[_PodSpec], class_name: str, queue: str, min_available: int,
             own: Mapping[str, str] | None = None, max_retries: int | None = None, names: Sequence[str] = (),
             backoff: PodBackoff | None = None) -> None:
        """The Jobs of one workload: its first `min_available` pods as one gang named `namespace/name` of `doc`
        (identical tasks of the largest request, constrained like the first pod), and each pod beyond them as a
        one-pod Job named `namespace/` + its name in `names`, which follows the gang (`Job.after`: it starts only
        once the gang has started). `own` are the workload document's annotations (duration, submit time);
        `backoff`, how its controller recreates evicted pods (None: they are queued again at once). A workload that
        names no queue is in the one its first pod's `scheduling.volcano.sh/queue-name` annotation names."""
        own = own or {}
        queue = queue or own.get(QUEUE, "") or (pods[0].run.annotations.get(QUEUE, "") if pods else "")
        duration = annotation_seconds(doc, own, DURATION)
        if duration is None:
            duration = max((p.duration_s for p in pods if p.duration_s is not None), default=None)
        submit = annotation_seconds(doc, own, SUBMIT)
        if submit is None:
            submit = max((p.submit_s for p in pods if p.submit_s is not None), default=0.0)
        pc = self._priority_class(doc, class_name, pods)
        gang_id = f"{doc.namespace}/{doc.name}"
        common = dict(submit_s=submit, duration_s=duration, tenant=doc.namespace, priority=pc.value if pc else 0,
                      queue=queue, priority_class=pc.name if pc else "",
                      preemption_policy=pc.preemption_policy if pc else "PreemptLowerPriority",
                      max_retries=max_retries, pod_backoff=backoff)
        _warn_if_pods_differ(doc, pods[:min_available])
        self._add(doc, gang_id, pods[:min_available], own, common)
        for name, pod in zip(names[min_available:], pods[min_available:], strict=True):
            self._add(doc, f"{doc.namespace}/{name}", [pod], own, {**common, "after": gang_id})

    def _add(self, doc: Doc, job_id: str, pods: list[_PodSpec], own: Mapping[str, str],
             common: Mapping[str, Any]) -> None:
        """One Job of `pods` (see `_job`), with its launch, source and specified requests and limits."""
        first = pods[0]
        task = Resources(max(p.task.gpus for p in pods), max(p.task.cpu_milli for p in pods),
                         max(p.task.mem_mib for p in pods))
        limits = Resources(max(p.limits.gpus for p in pods), max(p.limits.cpu_milli for p in pods),
                           max(p.limits.mem_mib for p in pods))
        self.specified[job_id] = {k: all(p.specified[k] for p in pods) for k in first.specified}
        self.sources[job_id] = doc.source
        namespace = (doc.data.get("metadata") or {}).get("namespace")
        self.launches[job_id] = Launch(doc.source, doc.kind, str(namespace) if namespace else None,
                                       tuple(p.run for p in pods), {**first.run.annotations, **own})
        self.jobs.append(Job(
            id=job_id, tasks=len(pods), task=task, node_selector=first.node_selector,
            task_limits=limits if limits != task else None, tolerations=first.tolerations,
            node_affinity=first.node_affinity, labels=first.labels, pod_affinity=first.pod_affinity,
            node_preferences=first.node_preferences, elastic=_elastic(doc, own, len(pods), task), **common))

    def _priority_class(self, doc: Doc, class_name: str, pods: list[_PodSpec]) -> PriorityClass | None:
        """The workload's class (its own name, else the highest its pods name, else the global default)."""
        names = [class_name] if class_name else [p.priority_class for p in pods if p.priority_class]
        classes = [self._class(doc, n) for n in names] or ([self.default_class] if self.default_class else [])
        return max(classes, key=lambda c: c.value) if classes else None

    def _class(self, doc: Doc, name: str) -> PriorityClass:
        if name in SYSTEM_CLASSES:
            return PriorityClass(name, SYSTEM_CLASSES[name])
        pc = self.classes.get(name)
        if pc is None:
            raise doc.error("spec.priorityClassName", f"unknown priority class: no PriorityClass with name {name} "
                            "was found")
        return pc


def _elastic(doc: Doc, own: Mapping[str, str], tasks: int, task: Resources) -> Elastic | None:
    """The elastic range the workload's `trimtab.io/gpus` annotation gives its gang (None without one): GPUs of
    the whole gang, whole multiples of a pod's GPUs, around the pods it has."""
    text = own.get(GPU_RANGE)
    if text is None:
        return None
    field = f"metadata.annotations[{GPU_RANGE}]"
    try:
        low, high = parse_gpu_range(text)
    except ValueError as exc:
        raise doc.error(field, str(exc)) from None
    per_pod = task.gpus
    if per_pod < 1 or low % per_pod or high % per_pod or not low <= tasks * per_pod <= high:
        raise doc.error(field, f"range {text} must hold the gang's {tasks * per_pod} GPUs in whole pods of "
                        f"{per_pod} GPU(s)")
    return Elastic(low // per_pod, high // per_pod)


def _scheduling_group_name(doc: Doc, value: Any, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise doc.error(path, "must be a mapping")
    doc.check_keys(value, path, ("podGroupName",))
    name = value.get("podGroupName")
    if name is not None and not isinstance(name, str):
        raise doc.error(f"{path}.podGroupName", "must be a string")
    return name or None


def _own_annotations(doc: Doc) -> dict[str, str]:
    return str_map(doc, (doc.data.get("metadata") or {}).get("annotations"), "metadata.annotations")


def _count(doc: Doc, value: object, path: str, minimum: int, before: int = 0) -> int:
    """A number of pods, refused when the workload would pass MAX_PODS with the `before` it already has."""
    number = int_field(doc, value, path, minimum)
    if before + number > MAX_PODS:
        raise doc.error(path, f"at most {MAX_PODS} pods per workload, got {before + number}")
    return number


def _warn_if_pods_differ(doc: Doc, pods: list[_PodSpec]) -> None:
    first = pods[0]
    if any(p.task != first.task or p.node_selector != first.node_selector
           or p.node_affinity != first.node_affinity or p.tolerations != first.tolerations for p in pods[1:]):
        doc.warn("spec", "the gang's pods differ; trimtab models them as identical tasks of the largest "
                 "request, constrained like the first pod")
    elif any(p.node_preferences != first.node_preferences or p.pod_affinity != first.pod_affinity
             for p in pods[1:]):
        doc.warn("spec", "the gang's pods state different affinities; trimtab gives all of them the first pod's")
    if any(p.labels != first.labels for p in pods[1:]):
        doc.warn("spec", "the gang's pods have different labels; for inter-pod affinity trimtab gives all of "
                 "them the first pod's")


def _container(doc: Doc, container: Any, path: str) -> Container:
    """What a container runs: command + args, literal env entries, workingDir."""
    if not isinstance(container, dict):
        raise doc.error(path, "a container must be a mapping")
    doc.check_keys(container, path, _CONTAINER_KEYS)
    argv = [*_strings(doc, container.get("command"), f"{path}.command"),
            *_strings(doc, container.get("args"), f"{path}.args")]
    env = []
    for i, entry in enumerate(list_field(doc, container.get("env"), f"{path}.env")):
        if not isinstance(entry, dict) or not entry.get("name"):
            raise doc.error(f"{path}.env[{i}]", "each entry needs a name (and a value or valueFrom)")
        env.append((str(entry["name"]), None if "valueFrom" in entry else str(entry.get("value", ""))))
    workdir = container.get("workingDir")
    return Container(path, tuple(argv), tuple(env), None if workdir is None else str(workdir))


def _strings(doc: Doc, value: Any, path: str) -> list[str]:
    if not all(isinstance(v, str | int | float) for v in list_field(doc, value, path)):
        raise doc.error(path, "expected a list of strings")
    return [str(v) for v in value or ()]
