"""What a submission may say, and the readers that turn a request body into it: a JSON job, or Kubernetes manifests
in YAML read by the one Kubernetes reader (trimtab.formats.k8s), as `simulate --manifests` reads them.

Every error names the field it is about, so the API can answer a precise 4xx and store nothing. Reading a body
costs a bounded amount whatever it holds: JSON and YAML nesting, YAML documents and aliases, and the digits of a
number are capped before anything is built (SUBMISSION_YAML, MAX_JSON_DEPTH, MAX_NUMBER_DIGITS); an error quotes
at most EXCERPT_CHARS of what was sent."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from trimtab.cluster import GPU_MILLI
from trimtab.formats import FormatError, YamlLimits, YamlSyntaxError
from trimtab.formats.k8s import Container, Launch, PriorityClass, documents_of_text, read_documents
from trimtab.formats.k8s.affinity import Affinity
from trimtab.model import Job
from trimtab.serve.intake.placement import affinity_json, read_placement, tolerations_json
from trimtab.units import shown

MAX_TASKS = 1024
MAX_GPUS_PER_TASK = 64
PRIORITY_CLASSES: Mapping[str, int] = {"low": -100, "normal": 0, "high": 100, "system": 1000}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # always fullmatch: `$` would let a trailing newline in
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_JSON_DEPTH = 32  # a job is 3 levels deep; json.loads recurses once per level
MAX_NUMBER_DIGITS = 30  # int() of a few thousand digits is slow, then refused by Python itself
EXCERPT_CHARS = 200
# A submission is one workload: at most a PodGroup with MAX_TASKS pods, and PriorityClasses beside it (a Pod with
# its containers is well under 100 values; a Volcano Job of many tasks, a few thousand). Aliases are refused:
# nested ones expand a few hundred bytes into billions of values. Values are counted before any is built: 500,000
# scalars in one flow sequence took 3.5 s and a few hundred MiB to build.
SUBMISSION_YAML = YamlLimits(max_bytes=16 << 20, max_documents=MAX_TASKS + 64, max_nodes=100_000,
                             max_document_nodes=5_000, max_depth=MAX_JSON_DEPTH,
                             max_number_digits=MAX_NUMBER_DIGITS, aliases=False)


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

    model_config = ConfigDict(extra="forbid", str_max_length=10_000, strict=True)  # "2" and true are no counts

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
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list, max_length=64, description="Kubernetes tolerations of every task: [{key, operator "
        "(Equal or Exists), value, effect}]; a node's NoSchedule and NoExecute taints keep out jobs that do not "
        "tolerate them")
    labels: dict[str, str] = Field(default_factory=dict, max_length=64,
                                   description="the tasks' pod labels, which other jobs' pod affinity selects")
    affinity: dict[str, Any] | None = Field(None, description="a Kubernetes pod spec's affinity: nodeAffinity, "
                                            "podAffinity and podAntiAffinity, required and preferred")
    env: dict[str, str] = Field(default_factory=dict, max_length=256)
    workdir: str | None = Field(None, max_length=4096)
    retries: int = Field(0, ge=0, le=100)
    min_tasks: int | None = Field(None, ge=1, le=MAX_TASKS, description="with max_tasks, an elastic job: it may be "
                                  "resized to any number of tasks in min_tasks..max_tasks while it runs (a restart "
                                  "from its checkpoint with the new WORLD_SIZE); tasks is the size it starts at")
    max_tasks: int | None = Field(None, ge=1, le=MAX_TASKS, description="the top of the elastic range (min_tasks)")
    target_gpu_util: float | None = Field(None, gt=0.0, le=1.0, description="an elastic job's target GPU "
                                          "utilisation (0..1]: it is resized within its range toward it")
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

    @model_validator(mode="after")
    def _elastic_range_ok(self) -> JobSpec:
        if (self.min_tasks is None) != (self.max_tasks is None):
            raise ValueError("give both min_tasks and max_tasks (an elastic range), or neither")
        if self.min_tasks is not None and self.max_tasks is not None:
            if not self.min_tasks <= self.tasks <= self.max_tasks:
                raise ValueError(f"tasks {self.tasks} is outside the elastic range {self.min_tasks}..{self.max_tasks}")
            if self.gpu_milli:
                raise ValueError("an elastic job asks for whole GPUs, not a share (gpu_milli)")
        elif self.target_gpu_util is not None:
            raise ValueError("target_gpu_util resizes an elastic job: give min_tasks and max_tasks too")
        return self

    @field_validator("name")
    @classmethod
    def _name_ok(cls, value: str) -> str:
        if value and not _NAME.fullmatch(value):
            raise ValueError("use letters, digits, '.', '_' and '-', starting with a letter or digit")
        return value

    @field_validator("tenant")
    @classmethod
    def _tenant_ok(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.fullmatch(value):
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
            if not _ENV_NAME.fullmatch(key):
                raise ValueError(f"{excerpt(key)} is not a valid environment variable name")
            if "\0" in item:
                raise ValueError(f"value of {key} must not contain NUL characters")
        return value

    @field_validator("workdir")
    @classmethod
    def _workdir_ok(cls, value: str | None) -> str | None:
        if value is not None and _CONTROL.search(value):
            raise ValueError("must not contain control characters")
        return value

    @field_validator("tolerations")
    @classmethod
    def _tolerations_ok(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        try:
            return tolerations_json(read_placement(value, None, {})[0])  # kept as the reader understood them
        except FormatError as exc:
            raise ValueError(f"at {exc.field}: {exc.problem}") from None

    @field_validator("affinity")
    @classmethod
    def _affinity_ok(cls, value: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        try:
            return affinity_json(read_placement([], value, info.data.get("labels", {}))[1])
        except FormatError as exc:
            raise ValueError(f"at {exc.field}: {exc.problem}") from None

    @field_validator("gpu_models", "node_selector", "labels")
    @classmethod
    def _no_control_characters(cls, value: list[str] | dict[str, str]) -> list[str] | dict[str, str]:
        items = [*value.items()] if isinstance(value, dict) else [(item, "") for item in value]
        for key, item in items:
            if _CONTROL.search(key) or _CONTROL.search(item):
                raise ValueError(f"{excerpt(key)} must not contain control characters")
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
    _check_json_depth(text)
    try:
        data = json.loads(text, parse_int=_json_int)
    except json.JSONDecodeError as exc:
        raise SubmissionError(f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                              status=400) from None
    return spec_from_dict(data)


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _check_json_depth(text: str) -> None:
    """Refuse JSON nested deeper than MAX_JSON_DEPTH before json.loads recurses into it: brackets outside
    strings, counted (a linear scan of the brackets alone)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    if len(brackets) <= MAX_JSON_DEPTH:
        return
    depth = 0
    for bracket in brackets:
        depth += 1 if bracket in "[{" else -1
        if depth > MAX_JSON_DEPTH:
            raise SubmissionError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels (the limit)", status=400)


def _json_int(digits: str) -> int:
    if len(digits) > MAX_NUMBER_DIGITS:
        raise SubmissionError(f"a number of {len(digits)} digits is over the limit of {MAX_NUMBER_DIGITS}",
                              status=400)
    return int(digits)


def excerpt(value: object) -> str:
    """`value` as an error message quotes it: its repr, cut to EXCERPT_CHARS."""
    return shown(value, EXCERPT_CHARS)


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

# The server's classes as the Kubernetes reader sees them: a manifest names one by priorityClassName.
_SERVER_CLASSES = tuple(PriorityClass(name, value) for name, value in PRIORITY_CLASSES.items())
_RETRIES = "trimtab.io/retries"
_GPU_MILLI_ANNOTATION = "trimtab.io/gpu-milli"


def read_manifest(text: str) -> JobSpec:
    """A JobSpec from YAML: one workload as `simulate --manifests` reads it (trimtab.formats.k8s): a v1 Pod (one
    task), a batch/v1 Job (`parallelism` tasks started as a gang, `backoffLimit` retries, 6 when left out), a
    Volcano Job (the replicas of its tasks, one gang), or a PodGroup with the pods that name it (a gang); beside
    it, PriorityClass documents. Or a trimtab job (JSON fields) written in YAML.

    Every pod of the gang runs the same single container: its `command` + `args` are the command (the image is
    not used: tasks run on this machine), with its literal `env` and `workingDir`. GPUs, cpu and memory are the
    pod's requests (a request left out is its limit); `nodeSelector`, `tolerations`, `affinity` (node, pod and
    pod anti-affinity, required and preferred) and the pod's labels are kept and honoured. The namespace, when
    written, is the tenant. `priorityClassName` names one of the server's classes. Annotations:
    `trimtab.io/retries` overrides the retries; `trimtab.io/gpu-milli` asks for a share of one GPU
    (`nvidia.com/gpu` then absent, 0 or 1).

    Unknown fields and kinds, and resources other than nvidia.com/gpu, cpu and memory, are errors. Errors name
    the document and the field; a container's resource is named without its requests/limits level
    (`spec.containers[0].resources.cpu`), as the API always has."""
    try:
        docs = documents_of_text(text, "manifest", SUBMISSION_YAML)
    except YamlSyntaxError as exc:
        where = f" at line {exc.line}" if exc.line is not None else ""
        raise SubmissionError(f"malformed YAML{where}: {exc.detail}", status=400) from None
    except FormatError as exc:
        raise _submission_error(exc) from None
    if len(docs) == 1 and "command" in docs[0][1] and "kind" not in docs[0][1]:
        return _trimtab_job(docs[0][1])  # a trimtab job written in YAML, where `[sleep, 1]` has a number
    workload_docs = [data for _, data in docs if data.get("kind") != "PriorityClass"]
    if len(workload_docs) != 1 and not any(data.get("kind") == "PodGroup" for data in workload_docs):
        raise SubmissionError(f"expected exactly one YAML document (a workload, or a PodGroup with its pods; "
                              f"PriorityClasses beside it), got {len(workload_docs)}")
    try:
        manifests = read_documents(docs, classes=_SERVER_CLASSES)
    except FormatError as exc:
        raise _submission_error(exc) from None
    if manifests.unknown:
        raise _submission_error(manifests.unknown[0])
    others = len(manifests.nodes) + len(manifests.quotas) + len(manifests.queues) + len(manifests.reservations)
    if len(manifests.jobs) != 1 or others:
        names = ", ".join(job.id for job in manifests.jobs) or "none"
        raise SubmissionError(f"a submission is one workload and nothing else (no Node, ResourceQuota, Queue or "
                              f"Reservation); got {len(manifests.jobs)} workloads ({names}) and {others} others")
    job = manifests.jobs[0]
    return _job_spec(job, manifests.launches[job.id])


def _trimtab_job(data: dict[str, Any]) -> JobSpec:
    command = data["command"]
    if isinstance(command, list):
        if not all(isinstance(v, str | int | float) for v in command):
            raise SubmissionError("expected a list of strings", "command")
        data = {**data, "command": [str(v) for v in command]}
    return spec_from_dict(data)


def _submission_error(exc: FormatError) -> SubmissionError:
    """The reader's error as the API answers it: the document in the message, the field as the API names it."""
    where = exc.source if exc.line is None else f"{exc.source} line {exc.line}"
    field = re.sub(r"\.resources\.(?:requests|limits)\.", ".resources.", exc.field or "")
    return SubmissionError(f"{where}: {exc.problem}", field)


def _job_spec(job: Job, launch: Launch) -> JobSpec:
    """The JobSpec of one workload the reader read, with what its pods run."""
    container = _gang_container(launch)
    env: dict[str, str] = {}
    for i, (name, value) in enumerate(container.env):
        if value is None:
            raise SubmissionError(f"{launch.source}: a literal value is required (valueFrom is not supported)",
                                  f"{container.path}.env[{i}]")
        env[name] = value
    pod = launch.pods[0]
    gpus, gpu_milli = job.task.gpus, 0
    if _GPU_MILLI_ANNOTATION in launch.annotations:
        where = f"metadata.annotations.{_GPU_MILLI_ANNOTATION}"
        gpu_milli = _int(launch.annotations[_GPU_MILLI_ANNOTATION], where, 1, GPU_MILLI - 1)
        if gpus > 1:
            raise SubmissionError(f"a share is of one GPU; {container.path}.resources.nvidia.com/gpu must be 0 or 1, "
                                  f"got {gpus}", where)
        gpus = 0
    retries = job.max_retries or 0
    if _RETRIES in launch.annotations:
        retries = _int(launch.annotations[_RETRIES], f"metadata.annotations.{_RETRIES}", 0, 100)
    if job.priority_class and job.priority_class not in PRIORITY_CLASSES:
        raise SubmissionError(f"{launch.source}: unknown priority class {job.priority_class!r}; the server's "
                              f"classes are {', '.join(PRIORITY_CLASSES)}", f"{pod.path}.priorityClassName")
    data: dict[str, Any] = {
        "name": job.id.partition("/")[2], "command": list(container.argv), "gpus": gpus, "gpu_milli": gpu_milli,
        "tasks": job.tasks, "cpu_milli": job.task.cpu_milli, "mem_mib": job.task.mem_mib,
        "node_selector": dict(job.node_selector), "env": env, "workdir": container.workdir, "retries": retries,
        "priority_class": job.priority_class or None, "tenant": launch.namespace, "labels": dict(job.labels),
        "tolerations": tolerations_json(job.tolerations),
    }
    if job.elastic is not None:  # trimtab.io/gpus: "2-8"
        data.update(min_tasks=job.elastic.min_tasks, max_tasks=job.elastic.max_tasks)
    try:
        data["affinity"] = affinity_json(Affinity(job.node_affinity, job.node_preferences, job.pod_affinity))
    except FormatError as exc:
        raise SubmissionError(f"{launch.source}: {exc.problem}", f"{pod.path}.{exc.field}") from None
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        message = f"{err['msg'].removeprefix('Value error, ')}, got {excerpt(err['input'])}"
        fields = {"name": "metadata.name", "tenant": "metadata.namespace", "tasks": "spec",
                  "retries": "spec.backoffLimit", "node_selector": f"{pod.path}.nodeSelector",
                  "tolerations": f"{pod.path}.tolerations", "affinity": f"{pod.path}.affinity",
                  "labels": "metadata.labels", "min_tasks": "metadata.annotations.trimtab.io/gpus",
                  "max_tasks": "metadata.annotations.trimtab.io/gpus",
                  "command": f"{container.path}.command", "env": f"{container.path}.env",
                  "workdir": f"{container.path}.workingDir", "gpus": f"{container.path}.resources.nvidia.com/gpu",
                  "cpu_milli": f"{container.path}.resources.cpu", "mem_mib": f"{container.path}.resources.memory"}
        raise SubmissionError(f"{launch.source}: {message}", fields.get(name, name)) from None


def _gang_container(launch: Launch) -> Container:
    """The one container every pod of the gang runs (the live service runs one command in every task)."""
    first = launch.pods[0]
    for pod in launch.pods:
        if len(pod.containers) != 1:
            raise SubmissionError(f"{pod.source}: exactly one container is supported", f"{pod.path}.containers")
        container = pod.containers[0]
        if not container.argv:
            raise SubmissionError(f"{pod.source}: a command (or args) is required: tasks run on this machine, not "
                                  "in the image", f"{container.path}.command")
        ours, theirs = first.containers[0], container
        if (ours.argv, ours.env, ours.workdir) != (theirs.argv, theirs.env, theirs.workdir):
            raise SubmissionError(f"{pod.source}: the gang's pods run different commands (or env, workingDir); "
                                  "the live service runs one command in every task", f"{container.path}.command")
    return first.containers[0]


def _int(value: str, where: str, low: int, high: int) -> int:
    """An annotation's integer (annotations are strings): ASCII digits only, within [low, high]."""
    if not re.fullmatch(r"[0-9]{1,9}", value):
        raise SubmissionError(f"expected an integer from {low} to {high}, got {excerpt(value)}", where)
    number = int(value)
    if not low <= number <= high:
        raise SubmissionError(f"expected an integer from {low} to {high}, got {number}", where)
    return number
