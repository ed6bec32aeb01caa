"""JobSet gangs with no PodGroup written: the Jobs a JobSet starts at once are one gang (under InOrder or
dependsOn, each replicated job is one), in manifests (the simulator) and live against a fake API, from the pods
as the Job controller creates them (owned by their Job, labelled by the JobSet controller). Without the JobSet
(its CRD absent), each Job is a gang of its own."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the kube extra (lightkube) is not installed")

from kube_objects import gpu_node, gpu_pod
from test_kube_cycle import FakeApi

from trimtab.formats import FormatError
from trimtab.formats.k8s import read_documents
from trimtab.kube.live import KubeScheduler
from trimtab.profile import Profile

Obj = dict[str, Any]


def rjob(name: str, replicas: int, parallelism: int, gpus: int, **extra: Any) -> Obj:
    pod = {"spec": {"containers": [{"name": "main", "image": "i",
                                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}
    return {"name": name, "replicas": replicas, **extra,
            "template": {"spec": {"parallelism": parallelism, "completions": parallelism, "template": pod}}}


def jobset(name: str, rjobs: list[Obj], order: str | None = None, **spec: Any) -> Obj:
    if order:
        spec["startupPolicy"] = {"startupPolicyOrder": order}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "spec": {"replicatedJobs": rjobs, **spec},
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"}}


def children(js: Obj, second: int = 0) -> tuple[list[Obj], list[Obj]]:
    """The Jobs the JobSet controller creates (`<jobset>-<rjob>-<i>`, owned by the JobSet) and the pods the Job
    controller creates for them (owned by their Job, with the JobSet's labels), created from `second` on."""
    jobs, pods = [], []
    name = js["metadata"]["name"]
    for r in js["spec"]["replicatedJobs"]:
        spec = r["template"]["spec"]
        gpus = int(spec["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        for i in range(r["replicas"]):
            job = f"{name}-{r['name']}-{i}"
            jobs.append({"apiVersion": "batch/v1", "kind": "Job", "spec": spec,
                         "metadata": {"name": job, "namespace": "default", "uid": f"uid-{job}",
                                      "resourceVersion": "1", "ownerReferences": [
                                          {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                           "name": name, "uid": js["metadata"]["uid"], "controller": True}]}})
            for k in range(spec["parallelism"]):
                pod = gpu_pod(f"{job}-{k}", gpus, created=f"2026-12-01T10:00:{second + len(pods):02d}Z")
                pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                                       "uid": f"uid-{job}", "controller": True}]
                pod["metadata"]["labels"].update({"jobset.sigs.k8s.io/jobset-name": name,
                                                  "jobset.sigs.k8s.io/replicatedjob-name": r["name"]})
                pods.append(pod)
    return jobs, pods


def bound(jobsets: list[Obj], informed: bool = True, nodes: int = 2) -> list[str]:
    """The pods one fifo cycle binds on `nodes` x 8 GPUs, the JobSets' pods interleaved in creation order;
    `informed`: the JobSet informer shows the JobSets (else their kind is not served)."""
    api = FakeApi()
    sched = KubeScheduler(api, Profile.load("fifo"))  # type: ignore[arg-type]
    sched.informers["nodes"].load([gpu_node(f"n{i}") for i in range(nodes)])
    made = [children(js, second=n) for n, js in enumerate(jobsets)]
    pods = sorted((p for _, ps in made for p in ps), key=lambda p: p["metadata"]["creationTimestamp"])
    sched.informers["pods"].load(pods)
    sched.informers["jobs"].load([j for js, _ in made for j in js])
    sched.informers["jobsets"].load(jobsets if informed else [])
    sched.cycle(1e9)
    return sorted(k.split("/")[1] for k in api.bound)


def test_the_jobs_a_jobset_starts_at_once_are_one_gang() -> None:
    """Each JobSet: a driver Job of 1 x 4 GPUs and a worker Job of 2 x 4 GPUs, on 2 x 8. Job by Job, both drivers
    and a's workers fit and b's driver holds 4 GPUs for nothing; as JobSets, a binds whole and b waits whole."""
    sets = [jobset(n, [rjob("driver", 1, 1, 4), rjob("workers", 1, 2, 4)]) for n in ("a", "b")]
    assert bound(sets) == ["a-driver-0-0", "a-workers-0-0", "a-workers-0-1"]
    assert bound(sets, informed=False) == ["a-driver-0-0", "a-workers-0-0", "a-workers-0-1", "b-driver-0-0"]


def test_in_order_or_depends_on_makes_each_replicated_job_a_gang() -> None:
    """A driver of 4 GPUs and 2 worker Jobs of 1 x 8 GPUs on 2 x 8: as one gang (20 GPUs) nothing fits; in
    order, the driver starts alone and the workers (16 GPUs, 12 free) wait together, not one of them."""
    rjobs = [rjob("driver", 1, 1, 4), rjob("workers", 2, 1, 8)]
    assert bound([jobset("a", rjobs)]) == []
    assert bound([jobset("a", rjobs, "InOrder")]) == ["a-driver-0-0"]
    depends = [rjobs[0], {**rjobs[1], "dependsOn": [{"name": "driver", "status": "Ready"}]}]
    assert bound([jobset("a", depends)]) == ["a-driver-0-0"]


def test_manifests_read_the_same_gangs() -> None:
    rjobs = [rjob("driver", 1, 1, 4), rjob("workers", 2, 2, 4)]
    docs = [jobset("whole", rjobs), jobset("ordered", rjobs, "InOrder"), jobset("held", rjobs, suspend=True)]
    jobs = read_documents([(d["metadata"]["name"], d) for d in docs]).jobs
    assert {j.id: j.tasks for j in jobs} == {"default/whole": 5, "default/ordered-driver": 1,
                                             "default/ordered-workers": 4}


@pytest.mark.parametrize(("field", "value", "path"), [
    ("replicatedJobs", [], "spec.replicatedJobs"),
    ("replicatedJobs", [{"replicas": 1}], "spec.replicatedJobs[0].name"),
    ("replicatedJobs", [rjob("w", 1, 0, 4)], "spec.replicatedJobs[0].template.spec.parallelism"),
])
def test_a_bad_jobset_is_refused_naming_the_field(field: str, value: Any, path: str) -> None:
    doc = jobset("bad", [rjob("w", 1, 1, 4)])
    doc["spec"][field] = value
    with pytest.raises(FormatError, match=path.replace("[", r"\[").replace("]", r"\]")):
        read_documents([("jobset.yaml", doc)])
