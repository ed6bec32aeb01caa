"""The submission readers: a JSON job and the Pod / batch/v1 Job manifests of our own small reader, each error
naming its field; table-driven."""

from __future__ import annotations

import pytest

from trimtab.serve.submission import SubmissionError, parse_body, read_manifest

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
      requests: {cpu: "2", memory: 512Mi}
      limits: {nvidia.com/gpu: 2, cpu: 1500m, memory: 2Gi}
"""


def test_a_pod_becomes_one_task_with_its_command_resources_and_tenant() -> None:
    spec = read_manifest(POD)
    assert spec.command == ["python", "train.py", "--epochs", "3"]
    assert (spec.tasks, spec.gpus, spec.cpu_milli, spec.mem_mib) == (1, 2, 1500, 2048)
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
