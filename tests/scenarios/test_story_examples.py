"""Story: the manifests users already write for Kubernetes load as written and are scheduled as Kubernetes would.

The documents are the issue's examples, unchanged, plus three Node manifests (tests/scenarios/examples/)."""

from pathlib import Path

from trimtab.cluster import ClusterState
from trimtab.formats.k8s import load_manifests
from trimtab.model import Job, Resources
from trimtab.scheduler import Scheduler

EXAMPLES = Path(__file__).parent / "examples"


def started_on(scheduler: Scheduler, now_s: float) -> dict[str, list[str]]:
    decision = scheduler.cycle(now_s)
    return {job.id: [scheduler.cluster.nodes[int(i)].name for i in alloc.nodes] for job, alloc in decision.starts}


def test_the_examples_load_with_their_kubernetes_meaning():
    """The quota binds my-namespace only, the priority class is known, requests default to limits, and the
    PodGroup no pod names is reported, not silently dropped."""
    m = load_manifests(EXAMPLES)
    (quota,) = m.quotas
    assert (quota.namespace, quota.pods, quota.gpus) == ("my-namespace", 10, 2)
    assert (quota.cpu_milli, quota.mem_mib, quota.limit_cpu_milli, quota.limit_mem_mib) == (4000, 4096, 8000, 8192)
    assert m.priority_classes["high-priority"].value == 1_000_000
    jobs = {j.id: j for j in m.jobs}
    assert set(jobs) == {"default/my-pod", "default/gpu-pod"}
    gpu_pod = jobs["default/gpu-pod"]
    assert gpu_pod.task.gpus == 1, "a GPU limit without a request is also the request"
    assert gpu_pod.node_selector == {"gpu-present": "true"}
    assert jobs["default/my-pod"].node_affinity == ((("gpu-type", "In", ("nvidia-tesla-v100",)),),)
    assert jobs["default/my-pod"].gpus == 0
    assert any("PodGroup my-gang-job" in w and "no pod names" in w for w in m.warnings)
    assert {n.name: n.capacity.gpus for n in m.nodes} == {"v100-node": 8, "a100-node": 8, "cpu-node": 0}
    a100 = next(n for n in m.nodes if n.name == "a100-node")
    assert a100.capacity.cpu_milli == 63_500, "allocatable, not capacity, is what pods may use"


def test_each_pod_lands_only_where_its_selector_and_affinity_allow():
    """my-pod needs a v100 node; gpu-pod needs gpu-present=true. Whatever else is free, nothing else will do."""
    m = load_manifests(EXAMPLES)
    for _ in range(3):  # same answer however often it is asked
        scheduler = Scheduler(ClusterState(m.nodes), "tenants")
        for job in m.jobs:
            scheduler.submit(job, 0.0)
        assert started_on(scheduler, 0.0) == {"default/my-pod": ["v100-node"], "default/gpu-pod": ["a100-node"]}


def test_gpu_pod_waits_while_the_only_matching_node_is_full():
    """With the one gpu-present node full, gpu-pod waits although eight v100 GPUs are free."""
    m = load_manifests(EXAMPLES)
    scheduler = Scheduler(ClusterState(m.nodes), "tenants")
    filler = Job("filler", 0.0, 8, Resources(gpus=1), 100.0, node_selector={"gpu-present": "true"})
    scheduler.submit(filler, 0.0)
    assert started_on(scheduler, 0.0) == {"filler": ["a100-node"]}
    gpu_pod = next(j for j in m.jobs if j.id == "default/gpu-pod")
    scheduler.submit(gpu_pod, 1.0)
    assert started_on(scheduler, 1.0) == {}
    scheduler.stopped("filler", 100.0, scheduler.state["filler"].COMPLETED)
    assert started_on(scheduler, 100.0) == {"default/gpu-pod": ["a100-node"]}
