"""The gangs of the workloads users submit, as their controllers create the pods: batch/v1 Job's size
(job_gang_size), JobSet (a TrainJob runs as one), Kubeflow's PyTorchJob, KubeRay's RayCluster and RayJob, and
LeaderWorkerSet.

Owns OPERATORS (apiVersion, kind -> how to read one) and operator_gangs: each gang's name, size and pod
templates. The live snapshot groups pods by the same rules (kube/owners.py), so simulation and live agree;
docs/kubernetes.md has the table."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trimtab.formats.k8s.documents import Doc, int_field, list_field, mapping

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"  # the labels LeaderWorkerSet gives each pod of a group
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"  # the labels a JobSet gives its Jobs' pod templates
JOBSET_RJOB = "jobset.sigs.k8s.io/replicatedjob-name"


@dataclass(frozen=True, slots=True)
class Gang:
    """One gang of a workload: its name, its size, and its pods as (template path, template, pod name) in order.
    `priority_class` and `queue` as the workload states them."""

    name: str
    size: int
    pods: list[tuple[str, Mapping[str, Any], str]] = field(default_factory=list)
    priority_class: str = ""
    queue: str = ""


def _template(doc: Doc, value: Any, path: str) -> Mapping[str, Any]:
    template = mapping(doc, value, path)
    if not isinstance(template.get("spec"), dict):
        raise doc.error(f"{path}.spec", "a pod template needs a spec")
    return template


def job_gang_size(spec: Mapping[str, Any], succeeded: int = 0, suspended: bool = False) -> int:
    """How many pods of a batch/v1 Job run at once, as the Job controller keeps them: `parallelism` (default 1),
    no more than the completions still to come (`completions - succeeded`) when `completions` is set; 0 while
    suspended. Its gang, in simulation and live."""
    if suspended:
        return 0
    size = int(spec["parallelism"]) if spec.get("parallelism") is not None else 1
    if spec.get("completions") is not None:
        size = min(size, int(spec["completions"]) - succeeded)
    return max(size, 0)


def jobset(doc: Doc, spec: Mapping[str, Any]) -> list[Gang]:
    """JobSet (jobset.x-k8s.io/v1alpha2): each replicated job's `replicas` Jobs (`<jobset>-<rjob>-<i>`), each of
    `job_gang_size` pods (`<job>-<k>`). The Jobs its controller creates at once form one gang, named after the
    JobSet; under `startupPolicy.startupPolicyOrder: InOrder`, or with any `dependsOn`, a replicated job starts only
    once another is ready, so each replicated job is a gang of its own (`<jobset>-<rjob>`). None while suspended."""
    rjobs = list_field(doc, spec.get("replicatedJobs"), "spec.replicatedJobs")
    if not rjobs:
        raise doc.error("spec.replicatedJobs", "a JobSet needs at least one replicated job")
    order = mapping(doc, spec.get("startupPolicy"), "spec.startupPolicy").get("startupPolicyOrder", "AnyOrder")
    split = order == "InOrder" or any(isinstance(r, dict) and r.get("dependsOn") for r in rjobs)
    gangs = []
    for i, rjob in enumerate(rjobs):
        path = f"spec.replicatedJobs[{i}]"
        rjob = mapping(doc, rjob, path)
        name = rjob.get("name")
        if not isinstance(name, str) or not name:
            raise doc.error(f"{path}.name", "a replicated job needs a name")
        job = mapping(doc, mapping(doc, rjob.get("template"), f"{path}.template").get("spec"), f"{path}.template.spec")
        template = _template(doc, job.get("template"), f"{path}.template.spec.template")
        for key in ("parallelism", "completions"):
            if job.get(key) is not None:
                int_field(doc, job[key], f"{path}.template.spec.{key}", 1)
        size = job_gang_size(job, suspended=bool(spec.get("suspend")))
        pods = [(f"{path}.template.spec.template", template, f"{doc.name}-{name}-{j}-{k}")
                for j in range(int_field(doc, rjob.get("replicas", 1), f"{path}.replicas", 0)) for k in range(size)]
        gangs.append(Gang(f"{doc.name}-{name}", len(pods), pods))
    if split:
        return [g for g in gangs if g.pods]
    pods = [p for g in gangs for p in g.pods]
    return [Gang(doc.name, len(pods), pods)] if pods else []


def pytorch_job(doc: Doc, spec: Mapping[str, Any]) -> list[Gang]:
    """Kubeflow PyTorchJob (kubeflow.org/v1): every replica of `pytorchReplicaSpecs` (Master first), one gang of
    `runPolicy.schedulingPolicy.minAvailable`, else all of them (the training operator's PodGroup rule). Pods are
    named `<job>-<type>-<index>`, as the operator names them."""
    replicas = mapping(doc, spec.get("pytorchReplicaSpecs"), "spec.pytorchReplicaSpecs")
    if not replicas:
        raise doc.error("spec.pytorchReplicaSpecs", "a PyTorchJob needs at least one replica spec")
    pods = []
    for kind in sorted(replicas, key=lambda k: (k != "Master", k)):
        path = f"spec.pytorchReplicaSpecs.{kind}"
        rspec = mapping(doc, replicas[kind], path)
        count = int_field(doc, rspec.get("replicas", 1), f"{path}.replicas", 0)
        template = _template(doc, rspec.get("template"), f"{path}.template")
        pods += [(f"{path}.template", template, f"{doc.name}-{kind.lower()}-{i}") for i in range(count)]
    policy = mapping(doc, mapping(doc, spec.get("runPolicy"), "spec.runPolicy").get("schedulingPolicy"),
                     "spec.runPolicy.schedulingPolicy")
    size = int_field(doc, policy.get("minAvailable", len(pods)), "spec.runPolicy.schedulingPolicy.minAvailable", 1)
    return [Gang(doc.name, min(size, len(pods)), pods, str(policy.get("priorityClass") or ""),
                 str(policy.get("queue") or ""))]


def ray_cluster(doc: Doc, spec: Mapping[str, Any]) -> list[Gang]:
    """KubeRay RayCluster (ray.io/v1), or a RayJob's `rayClusterSpec`: the head and every worker the controller
    creates (each group's `replicas`, default its `minReplicas`, times `numOfHosts`), one gang of all of them."""
    head = mapping(doc, spec.get("headGroupSpec"), "spec.headGroupSpec")
    pods = [("spec.headGroupSpec.template", _template(doc, head.get("template"), "spec.headGroupSpec.template"),
             f"{doc.name}-head")]
    for i, group in enumerate(spec.get("workerGroupSpecs") or []):
        path = f"spec.workerGroupSpecs[{i}]"
        group = mapping(doc, group, path)
        count = int_field(doc, group.get("replicas", group.get("minReplicas", 0)), f"{path}.replicas", 0)
        hosts = int_field(doc, group.get("numOfHosts", 1), f"{path}.numOfHosts", 1)
        template = _template(doc, group.get("template"), f"{path}.template")
        name = group.get("groupName") or f"group{i}"
        pods += [(f"{path}.template", template, f"{doc.name}-{name}-worker-{k}") for k in range(count * hosts)]
    return [Gang(doc.name, len(pods), pods)]


def ray_job(doc: Doc, spec: Mapping[str, Any]) -> list[Gang]:
    """KubeRay RayJob: the RayCluster of its `rayClusterSpec` (its submitter pod is not modelled)."""
    cluster = mapping(doc, spec.get("rayClusterSpec"), "spec.rayClusterSpec")
    if not cluster:
        doc.warn("spec.rayClusterSpec", "a RayJob on an existing cluster (clusterSelector) adds no pods")
        return []
    return ray_cluster(doc, cluster)


def leader_worker_set(doc: Doc, spec: Mapping[str, Any]) -> list[Gang]:
    """LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): `replicas` groups, each a gang of `leaderWorkerTemplate.size`
    pods: the leader (`leaderTemplate`, else the worker template) named `<lws>-<group>`, and its workers
    `<lws>-<group>-<index>`, as the controller names them."""
    template = mapping(doc, spec.get("leaderWorkerTemplate"), "spec.leaderWorkerTemplate")
    size = int_field(doc, template.get("size", 1), "spec.leaderWorkerTemplate.size", 1)
    worker = _template(doc, template.get("workerTemplate"), "spec.leaderWorkerTemplate.workerTemplate")
    leader_path = "spec.leaderWorkerTemplate.leaderTemplate"
    leader = _template(doc, template["leaderTemplate"], leader_path) if template.get("leaderTemplate") else worker
    if leader is worker:
        leader_path = "spec.leaderWorkerTemplate.workerTemplate"
    gangs = []
    for g in range(int_field(doc, spec.get("replicas", 1), "spec.replicas", 0)):
        pods = [(leader_path, leader, f"{doc.name}-{g}")]
        pods += [("spec.leaderWorkerTemplate.workerTemplate", worker, f"{doc.name}-{g}-{i}") for i in range(1, size)]
        gangs.append(Gang(f"{doc.name}-{g}", size, pods))
    return gangs


OPERATORS: dict[tuple[str, str], Callable[[Doc, Mapping[str, Any]], list[Gang]]] = {
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): jobset,
    ("kubeflow.org/v1", "PyTorchJob"): pytorch_job,
    ("ray.io/v1", "RayCluster"): ray_cluster,
    ("ray.io/v1", "RayJob"): ray_job,
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): leader_worker_set,
}


def operator_gangs(doc: Doc) -> list[Gang]:
    """The gangs of one operator workload document."""
    return OPERATORS[(doc.api, doc.kind)](doc, mapping(doc, doc.data.get("spec"), "spec"))
