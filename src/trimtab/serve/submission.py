"""What a submission may say, and the readers that turn a request body into it: a JSON job, or a Kubernetes Pod or
batch/v1 Job in YAML (a small reader of our own until spec.k8s lands; then `read_manifest` calls it).

Every error names the field it is about, so the API can answer a precise 4xx and store nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from trimtab.cluster import GPU_MILLI

MAX_TASKS = 1024
MAX_GPUS_PER_TASK = 64
PRIORITY_CLASSES: Mapping[str, int] = {"low": -100, "normal": 0, "high": 100, "system": 1000}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,255}$")
_GPU_KEYS = ("nvidia.com/gpu", "gpu")


class SubmissionError(ValueError):
    """A submission that cannot be accepted. `field` is the dotted path of the offending field ("" for the body);
    `status` the HTTP status the API answers with (400 unreadable body, 422 invalid content)."""

    def __init__(self, message: str, field: str = "", status: int = 422) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.message = message
        self.field = field
        self.status = status


class JobSpec(BaseModel):
    """A job as the API takes it in JSON. A gang of `tasks` identical tasks, each with `gpus` whole GPUs or a
    `gpu_milli` share (1..999 thousandths) of one GPU, shared with other tasks under MPS; the job runs `command`
    (argv, no shell) in every task. `retries`: failed attempts allowed before the job fails."""

    model_config = ConfigDict(extra="forbid", str_max_length=10_000)

    name: str = Field("", max_length=100, description="a label; letters, digits, '.', '_' and '-'")
    command: list[str] = Field(min_length=1, max_length=1000, description="argv of every task")
    gpus: int = Field(1, ge=0, le=MAX_GPUS_PER_TASK, description="whole GPUs per task (0 with gpu_milli)")
    gpu_milli: int = Field(0, ge=0, le=GPU_MILLI - 1, description="a share of one GPU per task, in thousandths "
                           "(500: half a GPU), run under MPS; gpus is then 0 or left out")
    tasks: int = Field(1, ge=1, le=MAX_TASKS, description="tasks in the gang, all started together")
    cpu_milli: int = Field(0, ge=0, le=10_000_000)
    mem_mib: int = Field(0, ge=0, le=1 << 30)
    tenant: str | None = Field(None, max_length=100, description="admin only; a tenant token submits as itself")
    priority_class: str | None = Field(None, max_length=100, description=f"one of {', '.join(PRIORITY_CLASSES)}")
    gpu_models: list[str] = Field(default_factory=list, max_length=32)
    node_selector: dict[str, str] = Field(default_factory=dict, max_length=64)
    env: dict[str, str] = Field(default_factory=dict, max_length=256)
    workdir: str | None = Field(None, max_length=4096)
    retries: int = Field(0, ge=0, le=100)
    idempotency_key: str | None = Field(None, max_length=200, description="resubmitting the same key returns the "
                                        "job already accepted instead of a new one")

    @model_validator(mode="before")
    @classmethod
    def _share_means_no_whole_gpus(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("gpu_milli") and "gpus" not in data:
            return {**data, "gpus": 0}  # `gpus` defaults to 1: a share leaves it out
        return data

    @field_validator("gpu_milli")
    @classmethod
    def _one_kind_of_gpu(cls, value: int, info: ValidationInfo) -> int:
        if value and info.data.get("gpus"):
            raise ValueError("ask for whole GPUs (gpus) or a share of one GPU (gpu_milli), not both")
        return value

    @field_validator("name")
    @classmethod
    def _name_ok(cls, value: str) -> str:
        if value and not _NAME.match(value):
            raise ValueError("use letters, digits, '.', '_' and '-', starting with a letter or digit")
        return value

    @field_validator("tenant")
    @classmethod
    def _tenant_ok(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.match(value):
            raise ValueError("use letters, digits, '.', '_' and '-', starting with a letter or digit")
        return value

    @field_validator("command")
    @classmethod
    def _command_ok(cls, value: list[str]) -> list[str]:
        if not value[0]:
            raise ValueError("the program (first item) must not be empty")
        if any("\0" in part for part in value):
            raise ValueError("must not contain NUL characters")
        return value

    @field_validator("env")
    @classmethod
    def _env_ok(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not _ENV_NAME.match(key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
            if "\0" in item:
                raise ValueError(f"value of {key} must not contain NUL characters")
        return value

    @field_validator("priority_class")
    @classmethod
    def _class_known(cls, value: str | None) -> str | None:
        if value is not None and value not in PRIORITY_CLASSES:
            raise ValueError(f"unknown priority class {value!r}; known: {', '.join(PRIORITY_CLASSES)}")
        return value

    @property
    def priority(self) -> int:
        return PRIORITY_CLASSES[self.priority_class or "normal"]

    @property
    def total_gpus(self) -> int:
        """Whole GPUs of the gang (0 for shares)."""
        return self.gpus * self.tasks

    @property
    def total_gpu_milli(self) -> int:
        """GPU thousandths of the gang: 1000 per whole GPU plus the shares."""
        return (self.gpus * GPU_MILLI + self.gpu_milli) * self.tasks


def parse_body(body: bytes, content_type: str) -> JobSpec:
    """A JobSpec from a request body: JSON (application/json) or a YAML manifest (application/yaml, text/yaml,
    or any body whose content type names yaml). Raises SubmissionError."""
    kind = content_type.split(";")[0].strip().lower()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise SubmissionError("the body is not UTF-8 text", status=400) from None
    if "yaml" in kind:
        return read_manifest(text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SubmissionError(f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                              status=400) from None
    return spec_from_dict(data)


def spec_from_dict(data: Any) -> JobSpec:
    if not isinstance(data, dict):
        raise SubmissionError("expected a JSON object (a job)", status=422)
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc, "") from None


def _first_error(exc: ValidationError, prefix: str) -> SubmissionError:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    field = f"{prefix}.{loc}" if prefix and loc else prefix or loc
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        message = "unknown field"
    return SubmissionError(message, field)


# ------------------------------------------------------------------------------------------------ manifests

_POD_TOP = {"apiVersion", "kind", "metadata", "spec", "status"}
_POD_SPEC = {"containers", "priorityClassName", "nodeSelector", "restartPolicy", "schedulerName",
             "terminationGracePeriodSeconds", "tolerations", "affinity", "volumes", "initContainers",
             "serviceAccountName", "securityContext", "hostNetwork", "imagePullSecrets"}
_CONTAINER = {"name", "image", "command", "args", "env", "workingDir", "resources", "imagePullPolicy", "ports",
              "volumeMounts", "securityContext"}
_RESOURCES = {"limits", "requests"}
_JOB_SPEC = {"template", "parallelism", "completions", "backoffLimit", "completionMode", "ttlSecondsAfterFinished",
             "activeDeadlineSeconds", "suspend"}


def read_manifest(text: str) -> JobSpec:
    """A JobSpec from one YAML document: a `v1` Pod (one task) or a `batch/v1` Job (`parallelism` tasks started
    as a gang, `backoffLimit` retries). The namespace is the tenant. The container's `command` + `args` are the
    command (the image is not used: tasks run on this machine). GPUs come from `nvidia.com/gpu` in limits or
    requests; cpu and memory use Kubernetes quantities. The annotation `trimtab.io/gpu-milli` asks for a share of
    one GPU instead (`nvidia.com/gpu` then absent, 0 or 1). Fields this reader does not know are errors.

    This is the function boundary where the Kubernetes reader of spec.k8s plugs in once it exists."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SubmissionError(f"malformed YAML{where}: {problem}", status=400) from None
    if len(docs) != 1:
        raise SubmissionError(f"expected exactly one YAML document, got {len(docs)}")
    doc = docs[0]
    if not isinstance(doc, dict):
        raise SubmissionError("expected a mapping (a Pod or a Job)")
    if "command" in doc and "kind" not in doc:  # a trimtab job written in YAML, where `[sleep, 1]` has a number
        command = doc["command"]
        if isinstance(command, list):
            doc["command"] = _strings(command, "command")
        return spec_from_dict(doc)
    _known(doc, _POD_TOP, "")
    kind, api = doc.get("kind"), doc.get("apiVersion")
    meta = _mapping(doc.get("metadata", {}), "metadata")
    if kind == "Pod" and api == "v1":
        pod_meta, pod_spec, tasks, retries = meta, _mapping(doc.get("spec"), "spec"), 1, 0
        where = "spec"
    elif kind == "Job" and api == "batch/v1":
        spec = _mapping(doc.get("spec"), "spec")
        _known(spec, _JOB_SPEC, "spec")
        template = _mapping(spec.get("template"), "spec.template")
        _known(template, {"metadata", "spec"}, "spec.template")
        pod_meta = {**_mapping(template.get("metadata", {}), "spec.template.metadata"), **meta}
        pod_spec = _mapping(template.get("spec"), "spec.template.spec")
        tasks = _int(spec.get("parallelism", 1), "spec.parallelism", 1, MAX_TASKS)
        retries = _int(spec.get("backoffLimit", 0), "spec.backoffLimit", 0, 100)
        where = "spec.template.spec"
    else:
        raise SubmissionError(f"unsupported kind {kind!r} with apiVersion {api!r}; expected a v1 Pod or a "
                              "batch/v1 Job", "kind")
    _known(pod_spec, _POD_SPEC, where)
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or len(containers) != 1:
        raise SubmissionError("exactly one container is supported", f"{where}.containers")
    cwhere = f"{where}.containers[0]"
    container = _mapping(containers[0], cwhere)
    _known(container, _CONTAINER, cwhere)
    command = [*_strings(container.get("command", []), f"{cwhere}.command"),
               *_strings(container.get("args", []), f"{cwhere}.args")]
    if not command:
        raise SubmissionError("a command (or args) is required: tasks run on this machine, not in the image",
                              f"{cwhere}.command")
    resources = _mapping(container.get("resources", {}), f"{cwhere}.resources")
    _known(resources, _RESOURCES, f"{cwhere}.resources")
    limits = _mapping(resources.get("limits", {}), f"{cwhere}.resources.limits")
    requests = _mapping(resources.get("requests", {}), f"{cwhere}.resources.requests")
    wanted = {**requests, **limits}
    rwhere = f"{cwhere}.resources"
    gpus = 0
    for key in _GPU_KEYS:
        if key in wanted:
            gpus = _int(wanted[key], f"{rwhere}.{key}", 0, MAX_GPUS_PER_TASK)
    env: dict[str, str] = {}
    for i, item in enumerate(container.get("env", []) or []):
        entry = _mapping(item, f"{cwhere}.env[{i}]")
        if "name" not in entry or "valueFrom" in entry:
            raise SubmissionError("each entry needs a name and a literal value", f"{cwhere}.env[{i}]")
        env[str(entry["name"])] = str(entry.get("value", ""))
    annotations = _mapping(pod_meta.get("annotations", {}) or {}, "metadata.annotations")
    if "trimtab.io/retries" in annotations:
        retries = _int(annotations["trimtab.io/retries"], "metadata.annotations.trimtab.io/retries", 0, 100)
    gpu_milli = 0
    if "trimtab.io/gpu-milli" in annotations:
        where_milli = "metadata.annotations.trimtab.io/gpu-milli"
        gpu_milli = _int(annotations["trimtab.io/gpu-milli"], where_milli, 1, GPU_MILLI - 1)
        if gpus > 1:
            raise SubmissionError(f"a share is of one GPU; {rwhere}.nvidia.com/gpu must be 0 or 1, got {gpus}",
                                  where_milli)
        gpus = 0
    data: dict[str, Any] = {
        "name": pod_meta.get("name", ""), "command": command, "gpus": gpus, "gpu_milli": gpu_milli, "tasks": tasks,
        "cpu_milli": _cpu_milli(wanted["cpu"], f"{rwhere}.cpu") if "cpu" in wanted else 0,
        "mem_mib": _mem_mib(wanted["memory"], f"{rwhere}.memory") if "memory" in wanted else 0,
        "node_selector": {str(k): str(v) for k, v in _mapping(pod_spec.get("nodeSelector", {}) or {},
                                                              f"{where}.nodeSelector").items()},
        "env": env, "workdir": container.get("workingDir"), "retries": retries,
    }
    if "namespace" in pod_meta:
        data["tenant"] = pod_meta["namespace"]
    if "priorityClassName" in pod_spec:
        data["priority_class"] = pod_spec["priorityClassName"]
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        err = _first_error(exc, "")
        raise SubmissionError(err.message, _MANIFEST_FIELD.get(err.field.split(".")[0], err.field)) from None


_MANIFEST_FIELD = {"name": "metadata.name", "tenant": "metadata.namespace", "priority_class":
                   "spec.priorityClassName", "env": "spec.containers[0].env", "command": "spec.containers[0].command"}


def _known(mapping: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in mapping if k not in known)
    if unknown:
        field = f"{where}.{unknown[0]}" if where else unknown[0]
        raise SubmissionError("unknown field", field)


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SubmissionError("expected a mapping", where)
    return value


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str | int | float) for v in value):
        raise SubmissionError("expected a list of strings", where)
    return [str(v) for v in value]


def _int(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool):
        raise SubmissionError(f"expected an integer from {low} to {high}, got {value!r}", where)
    try:
        number = int(str(value))
    except ValueError:
        raise SubmissionError(f"expected an integer from {low} to {high}, got {value!r}", where) from None
    if not low <= number <= high:
        raise SubmissionError(f"expected an integer from {low} to {high}, got {number}", where)
    return number


_CPU = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m?)$")
_MEM = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|K|M|G|T)?$")
_MEM_FACTOR = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "K": 10**3,
               "M": 10**6, "G": 10**9, "T": 10**12}


def _cpu_milli(value: Any, where: str) -> int:
    match = _CPU.match(str(value))
    if not match:
        raise SubmissionError(f"expected a CPU quantity like 4, 1.5 or 500m, got {value!r}", where)
    number = float(match.group(1))
    return int(number if match.group(2) else number * 1000)


def _mem_mib(value: Any, where: str) -> int:
    match = _MEM.match(str(value))
    if not match:
        raise SubmissionError(f"expected a memory quantity like 512Mi or 8Gi, got {value!r}", where)
    return int(float(match.group(1)) * _MEM_FACTOR[match.group(2)] // (1 << 20))
