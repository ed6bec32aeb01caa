"""The submission readers: a JSON job, and Kubernetes manifests read by the one Kubernetes reader (Pod, batch/v1
Job, Volcano Job, PodGroup with its pods), each error naming its document and field; table-driven."""

from __future__ import annotations

import pytest

from trimtab.serve.intake.submission import SubmissionError, parse_body, read_manifest

POD = """apiVersion: v1
kind: Pod
metadata:
  name: train
  namespace: vision
  annotations: {trimtab.io/retries: "2"}
spec:
  priorityClassName: high
  nodeSelector: {zone: a}
  containers:
  - name: main
    image: pytorch:latest
    command: [python, train.py]
    args: [--epochs, 3]
    workingDir: /srv
    env: [{name: LR, value: "0.1"}]
    resources:
      requests: {cpu: "1", memory: 512Mi}
      limits: {nvidia.com/gpu: 2, cpu: 1500m, memory: 2Gi}
"""


def test_a_pod_becomes_one_task_with_its_command_resources_and_tenant() -> None:
    """The job reserves the pod's requests, as Kubernetes schedules by them; a request left out is its limit."""
    spec = read_manifest(POD)
    assert spec.command == ["python", "train.py", "--epochs", "3"]
    assert (spec.tasks, spec.gpus, spec.cpu_milli, spec.mem_mib) == (1, 2, 1000, 512)
    assert (spec.tenant, spec.priority_class, spec.priority, spec.retries) == ("vision", "high", 100, 2)
    assert (spec.name, spec.workdir, spec.env, spec.node_selector) == ("train", "/srv", {"LR": "0.1"}, {"zone": "a"})


def test_a_batch_job_becomes_a_gang_of_parallelism_tasks() -> None:
    text = """apiVersion: batch/v1
kind: Job
metadata: {name: ddp}
spec:
  parallelism: 4
  backoffLimit: 3
  template:
    spec:
      containers: [{name: m, command: [torchrun, x.py], resources: {limits: {nvidia.com/gpu: 1}}}]
"""
    spec = read_manifest(text)
    assert (spec.tasks, spec.gpus, spec.retries, spec.tenant) == (4, 1, 3, None)


def test_a_trimtab_job_may_be_written_in_yaml_too() -> None:
    assert read_manifest("command: [sleep, 1]\ngpus: 2\n").gpus == 2


ERRORS = [
    ("kind: Pod\nspec: {containers: [", 400, ""),
    ("- a\n- b\n", 422, ""),
    (POD.replace("kind: Pod", "kind: Deployment"), 422, "kind"),
    (POD.replace("nvidia.com/gpu: 2", "nvidia.com/gpu: two"), 422, "spec.containers[0].resources.nvidia.com/gpu"),
    (POD.replace("cpu: 1500m", "cpu: lots"), 422, "spec.containers[0].resources.cpu"),
    (POD.replace("memory: 2Gi", "memory: 2Gb"), 422, "spec.containers[0].resources.memory"),
    (POD.replace("workingDir", "workDir"), 422, "spec.containers[0].workDir"),
    (POD.replace("nodeSelector", "nodeSelect"), 422, "spec.nodeSelect"),
    (POD.replace("namespace: vision", "namespace: 'bad name'"), 422, "metadata.namespace"),
    (POD.replace('"2"}', '"-1"}'), 422, "metadata.annotations.trimtab.io/retries"),
    (POD.replace("    command: [python, train.py]\n    args: [--epochs, 3]\n", ""), 422,
     "spec.containers[0].command"),
    (POD.replace("env: [{name: LR, value: \"0.1\"}]", "env: [{value: x}]"), 422, "spec.containers[0].env[0]"),
]


@pytest.mark.parametrize(("text", "status", "field"), ERRORS, ids=[e[2] or str(e[1]) for e in ERRORS])
def test_each_manifest_error_names_its_field(text: str, status: int, field: str) -> None:
    with pytest.raises(SubmissionError) as err:
        read_manifest(text)
    assert (err.value.status, err.value.field) == (status, field), str(err.value)


def test_json_bodies_are_checked_field_by_field() -> None:
    assert parse_body(b'{"command": ["true"], "tasks": 2}', "application/json").tasks == 2
    for body, field in ((b'{"command": ["true"], "tasks": 0}', "tasks"), (b'{"command": ["true"], "x": 1}', "x"),
                        (b'{"command": ["", "a"]}', "command"), (b'[1]', "")):
        with pytest.raises(SubmissionError) as err:
            parse_body(body, "application/json")
        assert err.value.field == field
    with pytest.raises(SubmissionError) as err:
        parse_body(b"\xff\xfe", "application/json")
    assert err.value.status == 400


@pytest.mark.parametrize(("body", "gpus", "gpu_milli", "field"), [
    (b'{"command": ["true"], "gpu_milli": 500}', 0, 500, None),
    (b'{"command": ["true"], "gpu_milli": 250, "gpus": 0}', 0, 250, None),
    (b'{"command": ["true"], "gpu_milli": 500, "gpus": 1}', None, None, "gpu_milli"),
    (b'{"command": ["true"], "gpu_milli": 1000}', None, None, "gpu_milli"),
    (b'{"command": ["true"], "gpu_milli": -1}', None, None, "gpu_milli"),
])
def test_a_job_asks_for_whole_gpus_or_a_share_of_one(body: bytes, gpus: int | None, gpu_milli: int | None,
                                                     field: str | None) -> None:
    """`gpu_milli` (1..999) is a share of one GPU; `gpus` then defaults to 0, and both at once is an error."""
    if field is None:
        spec = parse_body(body, "application/json")
        assert (spec.gpus, spec.gpu_milli, spec.total_gpu_milli) == (gpus, gpu_milli, gpu_milli)
    else:
        with pytest.raises(SubmissionError) as err:
            parse_body(body, "application/json")
        assert err.value.field == field


def test_a_manifest_asks_for_a_share_with_an_annotation() -> None:
    share = POD.replace('annotations: {trimtab.io/retries: "2"}', 'annotations: {trimtab.io/gpu-milli: "250"}')
    spec = read_manifest(share.replace("nvidia.com/gpu: 2", "nvidia.com/gpu: 1"))
    assert (spec.gpus, spec.gpu_milli) == (0, 250)
    with pytest.raises(SubmissionError) as err:
        read_manifest(share)  # a share of two GPUs
    assert err.value.field == "metadata.annotations.trimtab.io/gpu-milli"


VOLCANO = """apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: ddp, namespace: vision}
spec:
  minAvailable: 3
  priorityClassName: high
  tasks:
  - name: master
    replicas: 1
    template:
      spec:
        containers: [{name: m, command: [torchrun, train.py], resources: {limits: {nvidia.com/gpu: 2}}}]
  - name: worker
    replicas: 2
    template:
      spec:
        containers: [{name: m, command: [torchrun, train.py], resources: {limits: {nvidia.com/gpu: 2}}}]
"""


def test_a_volcano_job_becomes_one_gang_of_all_its_replicas() -> None:
    spec = read_manifest(VOLCANO)
    assert (spec.name, spec.tasks, spec.gpus, spec.tenant, spec.priority_class) == ("ddp", 3, 2, "vision", "high")
    assert (spec.command, spec.retries) == (["torchrun", "train.py"], 0)


GROUP = """apiVersion: {api}
kind: PodGroup
metadata: {{name: gang, namespace: nlp}}
spec: {{minMember: 2}}
"""
MEMBER = """---
apiVersion: v1
kind: Pod
metadata: {{name: gang-{i}, namespace: nlp, {link}}}
spec:
  containers:
  - {{name: m, command: [python, -m, train], env: [{{name: SEED, value: "7"}}],
     resources: {{requests: {{cpu: 500m, memory: 1Gi}}, limits: {{nvidia.com/gpu: 1}}}}}}
"""


@pytest.mark.parametrize(("api", "link"), [
    ("scheduling.x-k8s.io/v1alpha1", "labels: {scheduling.x-k8s.io/pod-group: gang}"),
    ("scheduling.volcano.sh/v1beta1", "annotations: {scheduling.k8s.io/group-name: gang}"),
])
def test_a_pod_group_with_its_pods_becomes_one_gang(api: str, link: str) -> None:
    text = GROUP.format(api=api) + "".join(MEMBER.format(i=i, link=link) for i in range(2))
    spec = read_manifest(text)
    assert (spec.name, spec.tasks, spec.gpus, spec.cpu_milli, spec.mem_mib) == ("gang", 2, 1, 500, 1024)
    assert (spec.command, spec.env, spec.tenant) == (["python", "-m", "train"], {"SEED": "7"}, "nlp")


def test_a_batch_job_without_backoff_limit_gets_kubernetes_default_of_six_retries() -> None:
    text = """apiVersion: batch/v1
kind: Job
metadata: {name: once}
spec:
  template:
    spec:
      containers: [{name: m, command: [python, x.py]}]
"""
    spec = read_manifest(text)
    assert (spec.tasks, spec.gpus, spec.retries) == (1, 0, 6)


def test_a_priority_class_document_may_come_along_but_jobs_name_the_server_classes() -> None:
    gold = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: gold}\nvalue: 5\n---\n"
    assert read_manifest(gold + POD).priority_class == "high"
    with pytest.raises(SubmissionError) as err:
        read_manifest(gold + POD.replace("priorityClassName: high", "priorityClassName: gold"))
    assert err.value.field == "spec.priorityClassName" and "server's classes are low" in err.value.message


GANG_ERRORS = [
    (VOLCANO.replace("command: [torchrun, train.py], ", "", 1), "Job ddp",
     "spec.tasks[0].template.spec.containers[0].command"),
    (VOLCANO.replace("minAvailable: 3", "minAvailable: 4"), "document 1 (line 1) Job ddp", "spec.minAvailable"),
    (VOLCANO.replace("[torchrun, train.py]", "[python, ps.py]", 1), "Job ddp",
     "spec.tasks[1].template.spec.containers[0].command"),
    (VOLCANO.replace("replicas: 2", "replicas: 2\n    maxRetries: 1"), "Job ddp", "spec.tasks[1].maxRetries"),
    (GROUP.format(api="scheduling.x-k8s.io/v1alpha1") + MEMBER.format(i=0, link="labels: {scheduling.x-k8s.io/"
     "pod-group: gang}"), "PodGroup gang", "spec.minMember"),
    (GROUP.format(api="scheduling.x-k8s.io/v1alpha1") + MEMBER.format(i=0, link="labels: {}")
     + MEMBER.format(i=1, link="labels: {}"), "", ""),
    (POD.replace('value: "0.1"', "valueFrom: {secretKeyRef: {name: s, key: k}}"), "Pod train",
     "spec.containers[0].env[0]"),
    (POD.replace("  - name: main\n", "  - {name: side, command: [sleep, '9']}\n  - name: main\n"), "Pod train",
     "spec.containers"),
    (POD.replace("nvidia.com/gpu: 2", "gpu: 2"), "Pod train", "spec.containers[0].resources.gpu"),
    (POD.replace("nvidia.com/gpu: 2", "nvidia.com/gpu: -2"), "Pod train",
     "spec.containers[0].resources.nvidia.com/gpu"),
    ("apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {capacity: {nvidia.com/gpu: 8}}\n---\n"
     + GROUP.format(api="scheduling.x-k8s.io/v1alpha1"), "", ""),
]


@pytest.mark.parametrize(("text", "document", "field"), GANG_ERRORS, ids=[str(i) for i in range(len(GANG_ERRORS))])
def test_each_workload_error_names_its_document_and_field(text: str, document: str, field: str) -> None:
    with pytest.raises(SubmissionError) as err:
        read_manifest(text)
    assert (err.value.status, err.value.field) == (422, field), str(err.value)
    assert document in err.value.message, str(err.value)
