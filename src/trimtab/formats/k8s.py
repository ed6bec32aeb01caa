"""Kubernetes manifests as users write them for the default scheduler, Volcano and the coscheduling plugin.

Owns the reader (`load_manifests`) that turns Node, Pod, PodGroup, Volcano Job and Queue, ResourceQuota,
PriorityClass and trimtab Reservation documents into nodes, jobs and the policy settings of a cluster."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from trimtab.formats import FormatError
from trimtab.model import Job, LabelSelector, Node, PodAffinity, PodAffinityTerm, Resources, Taint

GPU = "nvidia.com/gpu"
DURATION = "trimtab.io/duration"
SUBMIT = "trimtab.io/submit-time"
VOLCANO_GROUP = "scheduling.k8s.io/group-name"  # pod annotation naming its Volcano PodGroup
COSCHED_GROUP = "scheduling.x-k8s.io/pod-group"  # pod label naming its coscheduling PodGroup
NAMESPACE_NAME = "kubernetes.io/metadata.name"  # the label every namespace carries (its own name)
SYSTEM_CLASSES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}
MAX_USER_PRIORITY = 1_000_000_000
QUOTA_KEYS = {  # ResourceQuota hard key -> (dimension, meaning of the request it counts)
    "pods": "pods", "cpu": "requests.cpu", "requests.cpu": "requests.cpu", "memory": "requests.memory",
    "requests.memory": "requests.memory", "limits.cpu": "limits.cpu", "limits.memory": "limits.memory",
    f"requests.{GPU}": f"requests.{GPU}",
}

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))([eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX = {"": Fraction(1), "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
           "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
           "P": Fraction(10**15), "E": Fraction(10**18), "Ki": Fraction(2**10), "Mi": Fraction(2**20),
           "Gi": Fraction(2**30), "Ti": Fraction(2**40), "Pi": Fraction(2**50), "Ei": Fraction(2**60)}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)")
_DURATION_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_quantity(value: object) -> Fraction:
    """A Kubernetes quantity (`4Gi`, `500m`, `1.5`, `2e3`, or a YAML number) as an exact fraction."""
    text = str(value).strip() if not isinstance(value, bool) else "?"
    m = _QUANTITY.match(text)
    if m is None:
        raise ValueError(f"quantity {value!r} does not parse (expected e.g. 4Gi, 500m, 2)")
    number, suffix = Fraction(m.group(1)), m.group(2) or ""
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return number * Fraction(10) ** int(suffix[1:])
    return number * _SUFFIX[suffix]


def parse_duration_s(value: object) -> float:
    """Seconds from a duration like `2h`, `1h30m`, `90s`, or a plain number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip()
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION_PART.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise ValueError(f"duration {value!r} does not parse (expected e.g. 2h, 1h30m, 90s, 3600)") from None
            seconds = sum(float(n) * _DURATION_UNIT_S[u] for n, u in parts)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"duration {value!r} must be a non-negative finite time")
    return seconds


# --------------------------------------------------------------------------------------------- policy objects


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    global_default: bool = False
    preemption_policy: str = "PreemptLowerPriority"


@dataclass(frozen=True, slots=True)
class Quota:
    """One ResourceQuota's hard limits in a namespace (None: not limited). CPU in millicores, memory in MiB."""

    namespace: str
    name: str
    pods: int | None = None
    gpus: int | None = None
    cpu_milli: int | None = None
    mem_mib: int | None = None
    limit_cpu_milli: int | None = None
    limit_mem_mib: int | None = None

    def as_args(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A Volcano Queue: its share weight, a hard cap (`capability_gpus`, None: none) and whether jobs it runs on
    borrowed capacity may be reclaimed."""

    name: str
    weight: int = 1
    capability_gpus: int | None = None
    reclaimable: bool = True

    def as_args(self) -> dict[str, Any]:
        return {"name": self.name, "weight": self.weight, "capability_gpus": self.capability_gpus,
                "reclaimable": self.reclaimable}


@dataclass(frozen=True, slots=True)
class ReservationSpec:
    """An operator's reservation: `gpus` GPUs (of `gpu_model`, or on `nodes`) for `tenant` (or one `job`) from
    `start_s` to `end_s`."""

    name: str
    gpus: int
    start_s: float
    end_s: float
    tenant: str = ""
    job: str = ""
    gpu_model: str = ""
    nodes: tuple[str, ...] = ()

    def as_args(self) -> dict[str, Any]:
        return {"name": self.name, "gpus": self.gpus, "start_s": self.start_s, "end_s": self.end_s,
                "tenant": self.tenant, "job": self.job, "gpu_model": self.gpu_model, "nodes": list(self.nodes)}


@dataclass(slots=True)
class Manifests:
    """Everything a set of manifests describes. `profile_args()` gives the arguments of the tenancy plugins."""

    nodes: list[Node] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    quotas: list[Quota] = field(default_factory=list)
    queues: list[QueueSpec] = field(default_factory=list)
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    reservations: list[ReservationSpec] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def profile_args(self) -> dict[str, dict[str, Any]]:
        """Plugin arguments by plugin name, to merge into a Profile's `args`."""
        quotas = [q.as_args() for q in self.quotas]
        queues = [q.as_args() for q in self.queues]
        return {"quota": {"quotas": quotas, "queues": queues},
                "drf": {"weights": {q.name: q.weight for q in self.queues}},
                "reservation": {"reservations": [r.as_args() for r in self.reservations]}}


# --------------------------------------------------------------------------------------------- reading


@dataclass(slots=True)
class _Doc:
    source: str  # "file document 3 (Pod default/x)"
    data: dict[str, Any]
    kind: str
    api: str
    name: str
    namespace: str
    warnings: list[str]

    def error(self, field_path: str, problem: str) -> FormatError:
        return FormatError(self.source, problem, field=field_path)

    def warn(self, field_path: str, problem: str) -> None:
        self.warnings.append(f"{self.source}, field {field_path}: {problem}")

    def check_keys(self, mapping: Mapping[str, Any], path: str, known: Iterable[str]) -> None:
        known_set = set(known)
        for key in mapping:
            if key not in known_set:
                self.warn(f"{path}.{key}" if path else key, "unknown field, ignored")


def _documents(path: Path) -> Iterable[tuple[str, dict[str, Any]]]:
    files = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
    if path.is_dir() and not files:
        raise FormatError(str(path), "no .yaml or .yml files in this folder")
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise FormatError(str(file), f"cannot read: {exc.strerror or exc}") from None
        yield from _documents_of_text(text, str(file))


def _documents_of_text(text: str, source: str) -> Iterable[tuple[str, dict[str, Any]]]:
    loader = yaml.SafeLoader(text)
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            index += 1
            line = node.start_mark.line + 1 if node is not None else 0
            data = loader.construct_document(node) if node is not None else None
            if data is None:
                continue
            if not isinstance(data, dict):
                raise FormatError(source, f"document {index} is not a mapping", line=line)
            yield f"{source} document {index} (line {line})", data
    except yaml.YAMLError as exc:
        raise FormatError(source, f"not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def load_manifests(path_or_text: str | Path, *, text: bool = False) -> Manifests:
    """Read every document of a file, of every .yaml/.yml file under a folder, or of `path_or_text` itself when
    `text` is True. Unknown fields become warnings (`Manifests.warnings`); invalid values, a missing
    PriorityClass, a gang that is never defined or can never start, and a pod no quota can ever admit raise
    FormatError naming the document and field, as the API server or scheduler would refuse them."""
    if text:
        docs = list(_documents_of_text(str(path_or_text), "<manifests>"))
    else:
        path = Path(path_or_text)
        if not path.exists():
            raise FormatError(str(path), "no such file or folder")
        docs = list(_documents(path))
    return _Reader(docs).read()


class _Reader:
    def __init__(self, docs: list[tuple[str, dict[str, Any]]]) -> None:
        self.out = Manifests()
        self.specified: dict[str, dict[str, bool]] = {}  # job id -> which requests/limits every pod states
        self.sources: dict[str, str] = {}  # job id -> the document it came from
        self.default_class: PriorityClass | None = None
        self.docs: list[_Doc] = []
        # namespace -> labels, for namespaceSelector: Namespace documents plus every namespace a document names
        self.namespaces: dict[str, dict[str, str]] = {}
        for source, data in docs:
            kind, api = data.get("kind"), data.get("apiVersion")
            meta = data.get("metadata") or {}
            if not isinstance(kind, str) or not isinstance(api, str):
                raise FormatError(source, "a manifest needs string fields apiVersion and kind")
            if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
                raise FormatError(source, "metadata.name is required", field="metadata.name")
            ns = meta.get("namespace") or "default"
            self.docs.append(_Doc(f"{source} {kind} {meta['name']}", data, kind, api, meta["name"], str(ns),
                                  self.out.warnings))

    def read(self) -> Manifests:
        out = self.out
        by_kind: dict[str, list[_Doc]] = {}
        for doc in self.docs:
            by_kind.setdefault(_kind_key(doc), []).append(doc)
        for doc in by_kind.pop("PriorityClass", []):
            pc = _priority_class(doc)
            if pc.name in out.priority_classes:
                raise doc.error("metadata.name", f"PriorityClass {pc.name} is defined twice")
            out.priority_classes[pc.name] = pc
        defaults = [pc for pc in out.priority_classes.values() if pc.global_default]
        if len(defaults) > 1:
            raise FormatError("manifests", "more than one PriorityClass has globalDefault: true: "
                            + ", ".join(pc.name for pc in defaults))
        self.default_class = defaults[0] if defaults else None
        for doc in self.docs:
            if doc.kind != "Namespace":
                self.namespaces.setdefault(doc.namespace, {NAMESPACE_NAME: doc.namespace})
        for doc in by_kind.pop("Namespace", []):
            labels = _str_map(doc, (doc.data.get("metadata") or {}).get("labels"), "metadata.labels")
            self.namespaces[doc.name] = {**labels, NAMESPACE_NAME: doc.name}
        for doc in by_kind.pop("Node", []):
            out.nodes.append(_node(doc))
        for doc in by_kind.pop("ResourceQuota", []):
            quota = _quota(doc)
            if quota is not None:
                out.quotas.append(quota)
        for doc in by_kind.pop("Queue", []):
            out.queues.append(_queue(doc))
        for doc in by_kind.pop("Reservation", []):
            out.reservations.append(_reservation(doc))
        groups = {(d.namespace, d.name): d for d in by_kind.pop("PodGroup", [])}
        members: dict[tuple[str, str], list[tuple[_Doc, _PodSpec]]] = {}
        for doc in by_kind.pop("Pod", []):
            pod = self._pod(doc, doc.data.get("spec"), "spec", doc.data.get("metadata") or {})
            group = pod.group
            if group is None:
                out.jobs.append(self._job(doc, f"{doc.namespace}/{doc.name}", [pod], pod.priority_class, "", 1))
                continue
            if (doc.namespace, group) not in groups:
                raise doc.error("metadata.annotations", f"the pod names PodGroup {group!r} in namespace "
                                f"{doc.namespace}, which no document defines; it would stay pending forever")
            members.setdefault((doc.namespace, group), []).append((doc, pod))
        for key, gdoc in groups.items():
            self._group(gdoc, members.get(key, []))
        for doc in by_kind.pop("VolcanoJob", []):
            self._volcano_job(doc)
        for kind, rest in by_kind.items():
            for doc in rest:
                doc.warn("kind", f"kind {kind} ({doc.api}) is not used by trimtab, ignored")
        self._check_quotas()
        names = [j.id for j in out.jobs]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise FormatError("manifests", f"workloads defined twice: {', '.join(dup[:3])}")
        out.jobs.sort(key=lambda j: (j.submit_s, j.id))
        return out

    # ------------------------------------------------------------------------------------------ workloads

    def _pod(self, doc: _Doc, spec: Any, path: str, meta: Mapping[str, Any]) -> _PodSpec:
        if not isinstance(spec, dict):
            raise doc.error(path, "a pod spec mapping is required")
        doc.check_keys(spec, path, _POD_SPEC_KEYS)
        if "nodeName" in spec:
            doc.warn(f"{path}.nodeName", "a pod bound by name skips the scheduler; trimtab schedules it anyway")
        containers = spec.get("containers")
        if not isinstance(containers, list) or not containers:
            raise doc.error(f"{path}.containers", "a pod needs at least one container")
        req = [Fraction(0)] * 3  # gpus, cpu, memory (bytes)
        lim = [Fraction(0)] * 3
        specified = {"requests.cpu": True, "requests.memory": True, "limits.cpu": True, "limits.memory": True}
        for i, c in enumerate(containers):
            cpath = f"{path}.containers[{i}]"
            if not isinstance(c, dict):
                raise doc.error(cpath, "a container must be a mapping")
            doc.check_keys(c, cpath, _CONTAINER_KEYS)
            r, lm, has = _container_resources(doc, c.get("resources") or {}, f"{cpath}.resources")
            req = [a + b for a, b in zip(req, r, strict=True)]
            lim = [a + b for a, b in zip(lim, lm, strict=True)]
            for k in specified:
                specified[k] = specified[k] and has[k]
        for i, c in enumerate(spec.get("initContainers") or []):
            r, lm, _ = _container_resources(doc, (c or {}).get("resources") or {},
                                            f"{path}.initContainers[{i}].resources")
            req = [max(a, b) for a, b in zip(req, r, strict=True)]
            lim = [max(a, b) for a, b in zip(lim, lm, strict=True)]
        annotations = _str_map(doc, meta.get("annotations"), "metadata.annotations")
        labels = _str_map(doc, meta.get("labels"), "metadata.labels")
        group = annotations.get(VOLCANO_GROUP) or labels.get(COSCHED_GROUP) or None
        pc_name = spec.get("priorityClassName") or ""
        affinity = _affinity(doc, spec.get("affinity"), f"{path}.affinity", labels, self.namespaces)
        return _PodSpec(
            task=Resources(gpus=int(req[0]), cpu_milli=math.ceil(req[1] * 1000), mem_mib=math.ceil(req[2] / 2**20)),
            limits=Resources(gpus=int(lim[0]), cpu_milli=math.ceil(lim[1] * 1000),
                             mem_mib=math.ceil(lim[2] / 2**20)),
            specified=specified,
            node_selector=_str_map(doc, spec.get("nodeSelector"), f"{path}.nodeSelector"),
            node_affinity=affinity.node_required,
            node_preferences=affinity.node_preferred,
            labels=labels,
            pod_affinity=affinity.pods,
            tolerations=_tolerations(doc, spec.get("tolerations"), f"{path}.tolerations"),
            priority_class=str(pc_name),
            duration_s=_annotation_time(doc, annotations, DURATION),
            submit_s=_annotation_time(doc, annotations, SUBMIT),
            group=group,
            source=doc.source,
        )

    def _job(self, doc: _Doc, job_id: str, pods: list[_PodSpec], class_name: str, queue: str,
             min_available: int, annotations: Mapping[str, str] | None = None) -> Job:
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
        task = Resources(max(p.task.gpus for p in pods), max(p.task.cpu_milli for p in pods),
                         max(p.task.mem_mib for p in pods))
        limits = Resources(max(p.limits.gpus for p in pods), max(p.limits.cpu_milli for p in pods),
                           max(p.limits.mem_mib for p in pods))
        if min_available < len(pods):
            doc.warn("spec", f"minimum {min_available} of {len(pods)} pods: trimtab starts all {len(pods)} "
                     "together (an elastic gang is not modelled)")
        own = annotations or {}
        duration = _annotation_time(doc, own, DURATION) if DURATION in own else None
        durations = [p.duration_s for p in pods if p.duration_s is not None]
        if duration is None and durations:
            duration = max(durations)
        submit = _annotation_time(doc, own, SUBMIT) if SUBMIT in own else None
        if submit is None:
            submit = max((p.submit_s for p in pods if p.submit_s is not None), default=0.0)
        names = [class_name] if class_name else [p.priority_class for p in pods if p.priority_class]
        classes = [self._class(doc, n) for n in names] or ([self.default_class] if self.default_class else [])
        pc = max(classes, key=lambda c: c.value) if classes else None
        self.specified[job_id] = {k: all(p.specified[k] for p in pods) for k in first.specified}
        self.sources[job_id] = doc.source
        return Job(id=job_id, submit_s=submit, tasks=len(pods), task=task, duration_s=duration,
                   tenant=doc.namespace, priority=pc.value if pc else 0,
                   node_selector=first.node_selector, queue=queue,
                   priority_class=pc.name if pc else "",
                   preemption_policy=pc.preemption_policy if pc else "PreemptLowerPriority",
                   task_limits=limits if limits != task else None, tolerations=first.tolerations,
                   node_affinity=first.node_affinity, labels=first.labels, pod_affinity=first.pod_affinity,
                   node_preferences=first.node_preferences)

    def _class(self, doc: _Doc, name: str) -> PriorityClass:
        if name in SYSTEM_CLASSES:
            return PriorityClass(name, SYSTEM_CLASSES[name])
        pc = self.out.priority_classes.get(name)
        if pc is None:
            raise doc.error("spec.priorityClassName", f"no PriorityClass with name {name} was found")
        return pc

    def _group(self, doc: _Doc, pods: list[tuple[_Doc, _PodSpec]]) -> None:
        spec = doc.data.get("spec") or {}
        if not isinstance(spec, dict):
            raise doc.error("spec", "must be a mapping")
        doc.check_keys(spec, "spec", ("minMember", "minResources", "priorityClassName", "queue",
                                      "scheduleTimeoutSeconds", "minTaskMember"))
        min_member = _int(doc, spec.get("minMember", 1), "spec.minMember", 1)
        if not pods:
            doc.warn("spec", "no pod names this PodGroup; nothing to schedule")
            return
        if len(pods) < min_member:
            raise doc.error("spec.minMember", f"minMember is {min_member} but only {len(pods)} pods name this "
                            "PodGroup; the gang could never start")
        meta = doc.data.get("metadata") or {}
        self.out.jobs.append(self._job(doc, f"{doc.namespace}/{doc.name}", [p for _, p in pods],
                                       str(spec.get("priorityClassName") or ""), str(spec.get("queue") or ""),
                                       min_member, _str_map(doc, meta.get("annotations"), "metadata.annotations")))

    def _volcano_job(self, doc: _Doc) -> None:
        spec = doc.data.get("spec")
        if not isinstance(spec, dict):
            raise doc.error("spec", "a Volcano Job needs a spec mapping")
        doc.check_keys(spec, "spec", _VCJOB_KEYS)
        tasks = spec.get("tasks")
        if not isinstance(tasks, list) or not tasks:
            raise doc.error("spec.tasks", "a Volcano Job needs at least one task")
        pods: list[_PodSpec] = []
        for i, t in enumerate(tasks):
            path = f"spec.tasks[{i}]"
            if not isinstance(t, dict):
                raise doc.error(path, "a task must be a mapping")
            doc.check_keys(t, path, ("name", "replicas", "template", "minAvailable", "policies", "maxRetry",
                                     "dependsOn", "topologyPolicy"))
            replicas = _int(doc, t.get("replicas", 1), f"{path}.replicas", 0)
            template = t.get("template")
            if not isinstance(template, dict):
                raise doc.error(f"{path}.template", "a task needs a pod template")
            pod = self._pod(doc, template.get("spec"), f"{path}.template.spec", template.get("metadata") or {})
            pods += [pod] * replicas
        if not pods:
            raise doc.error("spec.tasks", "the job has no replicas")
        min_available = _int(doc, spec.get("minAvailable", len(pods)), "spec.minAvailable", 0)
        if min_available > len(pods):
            raise doc.error("spec.minAvailable", f"minAvailable {min_available} exceeds the {len(pods)} replicas; "
                            "the job could never start")
        meta = doc.data.get("metadata") or {}
        self.out.jobs.append(self._job(doc, f"{doc.namespace}/{doc.name}", pods,
                                       str(spec.get("priorityClassName") or ""), str(spec.get("queue") or "default"),
                                       min_available or len(pods),
                                       _str_map(doc, meta.get("annotations"), "metadata.annotations")))

    def _check_quotas(self) -> None:
        """What the ResourceQuota admission plugin refuses: a pod in a namespace whose quota tracks cpu or memory
        that does not say that request or limit, and a workload that exceeds a hard limit on its own."""
        by_ns: dict[str, list[Quota]] = {}
        for q in self.out.quotas:
            by_ns.setdefault(q.namespace, []).append(q)
        specified = self.specified
        for job in self.out.jobs:
            source = self.sources[job.id]
            for q in by_ns.get(job.tenant, []):
                tracked = {"requests.cpu": q.cpu_milli, "requests.memory": q.mem_mib,
                           "limits.cpu": q.limit_cpu_milli, "limits.memory": q.limit_mem_mib}
                for key, hard in tracked.items():
                    if hard is not None and not specified.get(job.id, {}).get(key, True):
                        raise FormatError(source, f"forbidden by ResourceQuota {q.namespace}/{q.name}: must "
                                        f"specify {key} for every container", field=key)
                limits = job.task_limits or job.task
                need = {"pods": (q.pods, job.tasks), f"requests.{GPU}": (q.gpus, job.gpus),
                        "requests.cpu": (q.cpu_milli, job.tasks * job.task.cpu_milli),
                        "requests.memory": (q.mem_mib, job.tasks * job.task.mem_mib),
                        "limits.cpu": (q.limit_cpu_milli, job.tasks * limits.cpu_milli),
                        "limits.memory": (q.limit_mem_mib, job.tasks * limits.mem_mib)}
                for key, (hard, asked) in need.items():
                    if hard is not None and asked > hard:
                        raise FormatError(source, f"exceeds ResourceQuota {q.namespace}/{q.name} on its own: "
                                        f"{key} asked {asked}, hard limit {hard}; it could never be admitted",
                                        field=key)


@dataclass(slots=True)
class _PodSpec:
    task: Resources
    limits: Resources
    specified: dict[str, bool]
    node_selector: dict[str, str]
    node_affinity: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...]
    node_preferences: tuple[tuple[int, tuple[tuple[str, str, tuple[str, ...]], ...]], ...]
    labels: dict[str, str]
    pod_affinity: PodAffinity | None
    tolerations: tuple[tuple[str, str, str, str], ...]
    priority_class: str
    duration_s: float | None
    submit_s: float | None
    group: str | None
    source: str


_POD_SPEC_KEYS = (
    "containers", "initContainers", "nodeSelector", "affinity", "tolerations", "priorityClassName", "priority",
    "schedulerName", "restartPolicy", "volumes", "serviceAccountName", "serviceAccount",
    "terminationGracePeriodSeconds", "hostNetwork", "hostIPC", "hostPID", "dnsPolicy", "imagePullSecrets",
    "securityContext", "preemptionPolicy", "nodeName", "runtimeClassName", "shareProcessNamespace",
    "enableServiceLinks", "automountServiceAccountToken", "hostname", "subdomain", "activeDeadlineSeconds",
)
_CONTAINER_KEYS = (
    "name", "image", "command", "args", "env", "envFrom", "ports", "volumeMounts", "resources", "workingDir",
    "imagePullPolicy", "securityContext", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle", "stdin",
    "tty", "terminationMessagePath", "terminationMessagePolicy",
)
_VCJOB_KEYS = ("tasks", "minAvailable", "queue", "priorityClassName", "schedulerName", "policies", "plugins",
               "maxRetry", "ttlSecondsAfterFinished", "volumes", "minSuccess", "runningEstimate", "networkTopology")


def _kind_key(doc: _Doc) -> str:
    group = doc.api.split("/")[0] if "/" in doc.api else ""
    if doc.kind == "Job" and group == "batch.volcano.sh":
        return "VolcanoJob"
    if doc.kind == "PodGroup" and group not in ("scheduling.volcano.sh", "scheduling.x-k8s.io",
                                                "scheduling.sigs.k8s.io"):
        return f"PodGroup of {doc.api}"
    if doc.kind == "Queue" and group != "scheduling.volcano.sh":
        return f"Queue of {doc.api}"
    if doc.kind == "Reservation" and doc.api != "trimtab.io/v1":
        return f"Reservation of {doc.api}"
    if doc.kind in ("Node", "Pod", "ResourceQuota", "Namespace") and doc.api != "v1":
        return f"{doc.kind} of {doc.api}"
    if doc.kind == "PriorityClass" and group != "scheduling.k8s.io":
        return f"PriorityClass of {doc.api}"
    return doc.kind


def _int(doc: _Doc, value: object, path: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise doc.error(path, f"expected an integer >= {minimum}, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise doc.error(path, f"expected an integer >= {minimum}, got {value!r}") from None
    if number < minimum:
        raise doc.error(path, f"expected an integer >= {minimum}, got {value!r}")
    return number


def _str_map(doc: _Doc, value: object, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise doc.error(path, "must be a mapping of strings")
    return {str(k): "" if v is None else str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


def _quantity(doc: _Doc, value: object, path: str) -> Fraction:
    try:
        q = parse_quantity(value)
    except ValueError as exc:
        raise doc.error(path, str(exc)) from None
    if q < 0:
        raise doc.error(path, f"quantity {value!r} must not be negative")
    return q


def _gpus(doc: _Doc, value: object, path: str) -> int:
    q = _quantity(doc, value, path)
    if q.denominator != 1:
        raise doc.error(path, f"{GPU} must be a whole number of GPUs, got {value!r}")
    return int(q)


def _container_resources(doc: _Doc, res: Any, path: str) -> tuple[list[Fraction], list[Fraction], dict[str, bool]]:
    """Requests and limits [gpus, cpu cores, memory bytes] of one container. As the API server defaults them, a
    request left out equals the limit; an extended resource's request must equal its limit."""
    if not isinstance(res, dict):
        raise doc.error(path, "must be a mapping")
    doc.check_keys(res, path, ("requests", "limits", "claims"))
    out: dict[str, dict[str, Fraction]] = {}
    for part in ("requests", "limits"):
        values = res.get(part) or {}
        if not isinstance(values, dict):
            raise doc.error(f"{path}.{part}", "must be a mapping of resource names to quantities")
        parsed: dict[str, Fraction] = {}
        for name, value in values.items():
            fpath = f"{path}.{part}.{name}"
            if name == GPU:
                parsed[name] = Fraction(_gpus(doc, value, fpath))
            elif name in ("cpu", "memory"):
                parsed[name] = _quantity(doc, value, fpath)
            else:
                _quantity(doc, value, fpath)
                doc.warn(fpath, f"resource {name} is not modelled, ignored")
        out[part] = parsed
    req, lim = out["requests"], out["limits"]
    for name in ("cpu", "memory", GPU):
        if name in lim and name not in req:
            req[name] = lim[name]
        if name in req and name in lim and req[name] > lim[name]:
            raise doc.error(f"{path}.requests.{name}", f"request {req[name]} must be less than or equal to the "
                            f"limit {lim[name]}")
    if GPU in req and req[GPU] != lim.get(GPU, req[GPU]):
        raise doc.error(f"{path}.requests.{GPU}", "an extended resource's request must equal its limit")
    if GPU in req and GPU not in lim:
        raise doc.error(f"{path}.limits.{GPU}", "an extended resource needs a limit (requests alone are refused)")
    has = {"requests.cpu": "cpu" in req, "requests.memory": "memory" in req,
           "limits.cpu": "cpu" in lim, "limits.memory": "memory" in lim}
    requests = [req.get(GPU, Fraction(0)), req.get("cpu", Fraction(0)), req.get("memory", Fraction(0))]
    # a limit left out is unbounded for quota purposes; count it as the request
    limits = [lim.get(GPU, requests[0]), lim.get("cpu", requests[1]), lim.get("memory", requests[2])]
    return requests, limits, has


def _annotation_time(doc: _Doc, annotations: Mapping[str, str], key: str) -> float | None:
    if key not in annotations:
        return None
    try:
        return parse_duration_s(annotations[key])
    except ValueError as exc:
        raise doc.error(f"metadata.annotations[{key}]", str(exc)) from None


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
NodeTerm = tuple[tuple[str, str, tuple[str, ...]], ...]


@dataclass(frozen=True, slots=True)
class _Affinity:
    node_required: tuple[NodeTerm, ...] = ()
    node_preferred: tuple[tuple[int, NodeTerm], ...] = ()
    pods: PodAffinity | None = None


def _affinity(doc: _Doc, affinity: Any, path: str, labels: Mapping[str, str],
              namespaces: Mapping[str, Mapping[str, str]]) -> _Affinity:
    """A pod spec's `affinity`: required and preferred node affinity, and inter-pod affinity and anti-affinity
    (`labels` are the pod's own, for matchLabelKeys; `namespaces` the known namespaces and their labels, for
    namespaceSelector)."""
    if affinity is None:
        return _Affinity()
    if not isinstance(affinity, dict):
        raise doc.error(path, "must be a mapping")
    doc.check_keys(affinity, path, ("nodeAffinity", "podAffinity", "podAntiAffinity"))
    na = _mapping(doc, affinity.get("nodeAffinity"), f"{path}.nodeAffinity")
    doc.check_keys(na, f"{path}.nodeAffinity", (_REQUIRED, _PREFERRED))
    required = _required_node_affinity(doc, na.get(_REQUIRED), f"{path}.nodeAffinity.{_REQUIRED}")
    preferred = []
    for i, p in enumerate(_list(doc, na.get(_PREFERRED), f"{path}.nodeAffinity.{_PREFERRED}")):
        ppath = f"{path}.nodeAffinity.{_PREFERRED}[{i}]"
        if not isinstance(p, dict):
            raise doc.error(ppath, "must be a mapping with weight and preference")
        doc.check_keys(p, ppath, ("weight", "preference"))
        weight = _weight(doc, p.get("weight"), f"{ppath}.weight")
        if not isinstance(p.get("preference"), dict):
            raise doc.error(f"{ppath}.preference", "a preferred scheduling term needs a preference mapping")
        term = _node_selector_term(doc, p["preference"], f"{ppath}.preference")
        if term:  # an empty preference matches no node: it changes no score
            preferred.append((weight, term))
    pods: dict[str, list[PodAffinityTerm]] = {"required": [], "preferred": [], "required_anti": [],
                                              "preferred_anti": []}
    for kind, suffix in (("podAffinity", ""), ("podAntiAffinity", "_anti")):
        section = _mapping(doc, affinity.get(kind), f"{path}.{kind}")
        doc.check_keys(section, f"{path}.{kind}", (_REQUIRED, _PREFERRED))
        for i, t in enumerate(_list(doc, section.get(_REQUIRED), f"{path}.{kind}.{_REQUIRED}")):
            pods["required" + suffix].append(_pod_affinity_term(doc, t, f"{path}.{kind}.{_REQUIRED}[{i}]", 0,
                                                                labels, namespaces))
        for i, w in enumerate(_list(doc, section.get(_PREFERRED), f"{path}.{kind}.{_PREFERRED}")):
            wpath = f"{path}.{kind}.{_PREFERRED}[{i}]"
            if not isinstance(w, dict):
                raise doc.error(wpath, "must be a mapping with weight and podAffinityTerm")
            doc.check_keys(w, wpath, ("weight", "podAffinityTerm"))
            weight = _weight(doc, w.get("weight"), f"{wpath}.weight")
            pods["preferred" + suffix].append(_pod_affinity_term(doc, w.get("podAffinityTerm"),
                                                                 f"{wpath}.podAffinityTerm", weight, labels,
                                                                 namespaces))
    pod_affinity = PodAffinity(**{k: tuple(v) for k, v in pods.items()}) if any(pods.values()) else None
    return _Affinity(required, tuple(preferred), pod_affinity)


def _mapping(doc: _Doc, value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise doc.error(path, "must be a mapping")
    return value


def _list(doc: _Doc, value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise doc.error(path, "must be a list")
    return value


def _weight(doc: _Doc, value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise doc.error(path, f"must be an integer in the range 1-100, got {value!r}")
    return value


def _required_node_affinity(doc: _Doc, required: Any, path: str) -> tuple[NodeTerm, ...]:
    if not required:
        return ()
    rpath = f"{path}.nodeSelectorTerms"
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    if not isinstance(terms, list) or not terms:
        raise doc.error(rpath, "required node affinity needs at least one nodeSelectorTerm")
    out = []
    for i, term in enumerate(terms):
        if not isinstance(term, dict):
            raise doc.error(f"{rpath}[{i}]", "must be a mapping")
        exprs = _node_selector_term(doc, term, f"{rpath}[{i}]")
        if not exprs:
            continue  # an empty term matches no node (Kubernetes); kept out so it cannot widen the OR
        out.append(exprs)
    if not out:
        raise doc.error(rpath, "every nodeSelectorTerm is empty; no node could match")
    return tuple(out)


def _node_selector_term(doc: _Doc, term: dict[str, Any], path: str) -> NodeTerm:
    """The ANDed expressions of one node selector term; `matchFields` keys are prefixed `field:`."""
    doc.check_keys(term, path, ("matchExpressions", "matchFields"))
    exprs: list[tuple[str, str, tuple[str, ...]]] = []
    for part, prefix in (("matchExpressions", ""), ("matchFields", "field:")):
        for j, e in enumerate(_list(doc, term.get(part), f"{path}.{part}")):
            epath = f"{path}.{part}[{j}]"
            if not isinstance(e, dict) or "key" not in e or e.get("operator") not in _OPERATORS:
                raise doc.error(epath, f"needs key and an operator of {', '.join(_OPERATORS)}")
            values = tuple(str(v) for v in (e.get("values") or []))
            op = e["operator"]
            if op in ("In", "NotIn") and not values:
                raise doc.error(f"{epath}.values", f"operator {op} needs at least one value")
            if op in ("Exists", "DoesNotExist") and values:
                raise doc.error(f"{epath}.values", f"operator {op} takes no values")
            if op in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
                raise doc.error(f"{epath}.values", f"operator {op} needs exactly one integer value")
            exprs.append((prefix + str(e["key"]), op, values))
    return tuple(exprs)


def _label_selector(doc: _Doc, value: Any, path: str) -> LabelSelector | None:
    """A label selector (None when absent: it then selects nothing, as Kubernetes reads a null selector)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise doc.error(path, "must be a mapping with matchLabels and/or matchExpressions")
    doc.check_keys(value, path, ("matchLabels", "matchExpressions"))
    labels = _str_map(doc, value.get("matchLabels"), f"{path}.matchLabels")
    exprs = []
    for j, e in enumerate(_list(doc, value.get("matchExpressions"), f"{path}.matchExpressions")):
        epath = f"{path}.matchExpressions[{j}]"
        if not isinstance(e, dict) or not e.get("key") or e.get("operator") not in _SELECTOR_OPERATORS:
            raise doc.error(epath, f"needs key and an operator of {', '.join(_SELECTOR_OPERATORS)}")
        doc.check_keys(e, epath, ("key", "operator", "values"))
        op = e["operator"]
        values = tuple(str(v) for v in _list(doc, e.get("values"), f"{epath}.values"))
        if op in ("In", "NotIn") and not values:
            raise doc.error(f"{epath}.values", f"operator {op} needs at least one value")
        if op in ("Exists", "DoesNotExist") and values:
            raise doc.error(f"{epath}.values", f"operator {op} takes no values")
        exprs.append((str(e["key"]), op, values))
    return LabelSelector(tuple(sorted(labels.items())), tuple(exprs))


def _pod_affinity_term(doc: _Doc, term: Any, path: str, weight: int, labels: Mapping[str, str],
                       namespaces: Mapping[str, Mapping[str, str]]) -> PodAffinityTerm:
    """One PodAffinityTerm. matchLabelKeys / mismatchLabelKeys are merged into the selector with the pod's own
    label values (key In / NotIn (value)); a namespaceSelector is resolved against the known namespaces ({} means
    every namespace, also ones no document names)."""
    if not isinstance(term, dict):
        raise doc.error(path, "a pod affinity term must be a mapping")
    doc.check_keys(term, path, ("labelSelector", "namespaces", "namespaceSelector", "topologyKey",
                                "matchLabelKeys", "mismatchLabelKeys"))
    key = term.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise doc.error(f"{path}.topologyKey", "is required: the node label that defines the topology domain "
                        "(e.g. kubernetes.io/hostname, topology.kubernetes.io/zone)")
    selector = _label_selector(doc, term.get("labelSelector"), f"{path}.labelSelector")
    extra: list[tuple[str, str, tuple[str, ...]]] = []
    for field_name, op in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn")):
        keys = [str(k) for k in _list(doc, term.get(field_name), f"{path}.{field_name}")]
        if keys and selector is None:
            raise doc.error(f"{path}.{field_name}", f"{field_name} cannot be set when labelSelector isn't set")
        taken = {k for k, _ in selector.match_labels} | {k for k, _, _ in selector.match_expressions} \
            if selector is not None else set()
        for k in keys:
            if k in taken:
                raise doc.error(f"{path}.{field_name}", f"key {k!r} is also in labelSelector; the same key may "
                                "not be in both")
            if k in labels:  # a key the pod does not carry is ignored, as Kubernetes does
                extra.append((k, op, (labels[k],)))
    if extra and selector is not None:
        selector = LabelSelector(selector.match_labels, selector.match_expressions + tuple(extra))
    listed = tuple(str(n) for n in _list(doc, term.get("namespaces"), f"{path}.namespaces"))
    ns_selector = _label_selector(doc, term.get("namespaceSelector"), f"{path}.namespaceSelector")
    if ns_selector is None:
        return PodAffinityTerm(selector, key, listed or None, weight=weight)
    if ns_selector == LabelSelector():
        return PodAffinityTerm(selector, key, None, all_namespaces=True, weight=weight)
    chosen = set(listed) | {ns for ns, ns_labels in namespaces.items() if ns_selector.matches(ns_labels)}
    return PodAffinityTerm(selector, key, tuple(sorted(chosen)), weight=weight)


def _tolerations(doc: _Doc, value: Any, path: str) -> tuple[tuple[str, str, str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise doc.error(path, "must be a list")
    out = []
    for i, t in enumerate(value):
        tpath = f"{path}[{i}]"
        if not isinstance(t, dict):
            raise doc.error(tpath, "must be a mapping")
        doc.check_keys(t, tpath, ("key", "operator", "value", "effect", "tolerationSeconds"))
        op = t.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            raise doc.error(f"{tpath}.operator", f"must be Equal or Exists, got {op!r}")
        key, val, effect = str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or "")
        if op == "Exists" and val:
            raise doc.error(f"{tpath}.value", "a toleration with operator Exists takes no value")
        if not key and op != "Exists":
            raise doc.error(f"{tpath}.key", "an empty key needs operator Exists")
        if effect not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise doc.error(f"{tpath}.effect", f"unknown effect {effect!r}")
        out.append((key, op, val, effect))
    return tuple(out)


# --------------------------------------------------------------------------------------------- other kinds


def _priority_class(doc: _Doc) -> PriorityClass:
    data = doc.data
    doc.check_keys(data, "", ("apiVersion", "kind", "metadata", "value", "globalDefault", "description",
                              "preemptionPolicy"))
    value = data.get("value")
    if isinstance(value, bool) or not isinstance(value, int):
        raise doc.error("value", f"expected an integer, got {value!r}")
    if value > MAX_USER_PRIORITY and doc.name not in SYSTEM_CLASSES:
        raise doc.error("value", f"must be no greater than {MAX_USER_PRIORITY} (larger values are reserved "
                        "for system classes)")
    policy = data.get("preemptionPolicy", "PreemptLowerPriority")
    if policy not in ("PreemptLowerPriority", "Never"):
        raise doc.error("preemptionPolicy", f"must be PreemptLowerPriority or Never, got {policy!r}")
    default = data.get("globalDefault", False)
    if not isinstance(default, bool):
        raise doc.error("globalDefault", f"expected true or false, got {default!r}")
    return PriorityClass(doc.name, value, default, policy)


def _node(doc: _Doc) -> Node:
    data = doc.data
    status = data.get("status") or {}
    spec = data.get("spec") or {}
    doc.check_keys(spec, "spec", ("taints", "unschedulable", "podCIDR", "podCIDRs", "providerID"))
    source = status.get("allocatable") or status.get("capacity")
    where = "status.allocatable" if status.get("allocatable") else "status.capacity"
    if not isinstance(source, dict):
        raise doc.error("status", "a Node needs status.capacity or status.allocatable")
    gpus, cpu, mem = 0, Fraction(0), Fraction(0)
    for name, value in source.items():
        fpath = f"{where}.{name}"
        if name == GPU:
            gpus = _gpus(doc, value, fpath)
        elif name == "cpu":
            cpu = _quantity(doc, value, fpath)
        elif name == "memory":
            mem = _quantity(doc, value, fpath)
        elif name.startswith("nvidia.com/mig-"):
            doc.warn(fpath, "MIG slices are not modelled, ignored")
        else:
            _quantity(doc, value, fpath)
    meta = data.get("metadata") or {}
    labels = _str_map(doc, meta.get("labels"), "metadata.labels")
    taints = []
    for i, t in enumerate(spec.get("taints") or []):
        tpath = f"spec.taints[{i}]"
        if not isinstance(t, dict) or not t.get("key"):
            raise doc.error(tpath, "a taint needs a key")
        effect = t.get("effect", "")
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise doc.error(f"{tpath}.effect", f"must be NoSchedule, PreferNoSchedule or NoExecute, got {effect!r}")
        taints.append(Taint(str(t["key"]), str(t.get("value") or ""), effect))
    if spec.get("unschedulable"):
        taints.append(Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"))
    model = labels.get("nvidia.com/gpu.product") or labels.get("gpu-type") or ""
    rack = labels.get("trimtab.io/rack") or labels.get("topology.kubernetes.io/zone") or "rack-0"
    return Node(doc.name, Resources(gpus, int(cpu * 1000), int(mem / 2**20)), gpu_model=model, rack=rack,
                labels=labels, taints=tuple(taints))


def _quota(doc: _Doc) -> Quota | None:
    spec = doc.data.get("spec") or {}
    doc.check_keys(spec, "spec", ("hard", "scopes", "scopeSelector"))
    if spec.get("scopes") or spec.get("scopeSelector"):
        doc.warn("spec.scopes", "scoped quotas are not modelled; this ResourceQuota is ignored")
        return None
    hard = spec.get("hard") or {}
    if not isinstance(hard, dict):
        raise doc.error("spec.hard", "must be a mapping")
    values: dict[str, int] = {}
    for key, value in hard.items():
        fpath = f"spec.hard.{key}"
        meaning = QUOTA_KEYS.get(key)
        if meaning is None:
            _quantity(doc, value, fpath)
            doc.warn(fpath, f"quota on {key} is not modelled, ignored")
            continue
        q = _quantity(doc, value, fpath)
        if meaning in ("pods", f"requests.{GPU}"):
            if q.denominator != 1:
                raise doc.error(fpath, f"must be a whole number, got {value!r}")
            number = int(q)
        elif meaning.endswith(".cpu"):
            number = math.floor(q * 1000)
        else:
            number = math.floor(q / 2**20)
        values[meaning] = min(values.get(meaning, number), number)
    return Quota(doc.namespace, doc.name, pods=values.get("pods"), gpus=values.get(f"requests.{GPU}"),
                 cpu_milli=values.get("requests.cpu"), mem_mib=values.get("requests.memory"),
                 limit_cpu_milli=values.get("limits.cpu"), limit_mem_mib=values.get("limits.memory"))


def _queue(doc: _Doc) -> QueueSpec:
    spec = doc.data.get("spec") or {}
    doc.check_keys(spec, "spec", ("weight", "capability", "reclaimable", "deserved", "guarantee", "parent"))
    weight = _int(doc, spec.get("weight", 1), "spec.weight", 1)
    cap = spec.get("capability") or {}
    if not isinstance(cap, dict):
        raise doc.error("spec.capability", "must be a mapping of resource names to quantities")
    capability = _gpus(doc, cap[GPU], f"spec.capability.{GPU}") if GPU in cap else None
    reclaimable = spec.get("reclaimable", True)
    if not isinstance(reclaimable, bool):
        raise doc.error("spec.reclaimable", f"expected true or false, got {reclaimable!r}")
    return QueueSpec(doc.name, weight, capability, reclaimable)


def _reservation(doc: _Doc) -> ReservationSpec:
    spec = doc.data.get("spec")
    if not isinstance(spec, dict):
        raise doc.error("spec", "a Reservation needs a spec mapping")
    doc.check_keys(spec, "spec", ("gpus", "gpuModel", "nodes", "owner", "start", "end"))
    owner = spec.get("owner") or {}
    if not isinstance(owner, dict) or not (owner.get("namespace") or owner.get("job")):
        raise doc.error("spec.owner", "a Reservation needs an owner: {namespace: ...} or {job: ns/name}")
    nodes = tuple(str(n) for n in spec.get("nodes") or ())
    gpus = _int(doc, spec.get("gpus", 0), "spec.gpus", 0)
    if gpus == 0 and not nodes:
        raise doc.error("spec.gpus", "reserve at least one GPU or name nodes")
    try:
        start = parse_duration_s(spec.get("start", 0))
        end = parse_duration_s(spec["end"]) if "end" in spec else math.inf
    except ValueError as exc:
        raise doc.error("spec.start", str(exc)) from None
    if end <= start:
        raise doc.error("spec.end", "the window must end after it starts")
    return ReservationSpec(doc.name, gpus, start, end, str(owner.get("namespace") or ""), str(owner.get("job") or ""),
                           str(spec.get("gpuModel") or ""), nodes)


__all__ = [
    "Manifests",
    "PriorityClass",
    "QueueSpec",
    "Quota",
    "ReservationSpec",
    "load_manifests",
    "parse_duration_s",
    "parse_quantity",
]
