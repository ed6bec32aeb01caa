"""Per-tenant limits of `trimtab serve` beyond GPUs: the priority classes a tenant may use, caps on its tasks, CPU,
memory and pending jobs. The server's defaults (`trimtab serve --tenant-...`) hold for every tenant; the admin
overrides them per tenant (PUT /v1/tenants/{name}).

Two kinds of limit. Refusals, answered at submission with a 4xx naming the limit: a priority class the tenant may
not use, more tasks in one job than `max_tasks_per_job`, more pending jobs than `max_pending_jobs`, and a job that
alone asks for more than a running cap (it could never start). Holds: `max_running_tasks`, `max_cpu_milli` and
`max_mem_mib` cap what the tenant's running jobs hold together; a job that would take its tenant over one waits in
the queue, held by the scheduler's `quota` admission plugin (as the GPU quota is), its reason naming the cap."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from fractions import Fraction
from typing import Any

from trimtab.serve.errors import ServeError
from trimtab.serve.intake.submission import PRIORITY_CLASSES, JobSpec
from trimtab.units import parse_quantity

# Kubernetes keeps its highest classes (system-cluster-critical, system-node-critical) to the namespaces that a
# ResourceQuota allows them in; here every class above `normal` (the ones that outrank, and so may preempt, other
# tenants' jobs) is kept to the tenants the admin grants it to.
DEFAULT_PRIORITY_CLASSES = tuple(name for name, value in PRIORITY_CLASSES.items()
                                 if value <= PRIORITY_CLASSES["normal"])

# A cap on what running jobs hold -> (the usage dimension the quota plugin counts it in (trimtab.usage.USAGE_DIMS),
# the job's field it counts, per task)
RUNNING_CAPS = {"max_running_tasks": ("pods", "tasks"), "max_cpu_milli": ("cpu_milli", "cpu_milli"),
                "max_mem_mib": ("mem_mib", "mem_mib")}

Caps = tuple[tuple[str, int, str], ...]  # (usage dimension, the most running jobs may hold, the limit's name)


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """One tenant's limits (or the server's defaults); None: no limit. `caps` is what the quota plugin reads."""

    priority_classes: tuple[str, ...] = DEFAULT_PRIORITY_CLASSES
    max_tasks_per_job: int | None = 256
    max_running_tasks: int | None = 512
    max_cpu_milli: int | None = None
    max_mem_mib: int | None = None
    max_pending_jobs: int | None = 1000
    max_task_log_bytes: int | None = 1 << 30  # what one task's log keeps of its output (then cut)
    max_log_bytes: int | None = 20 << 30  # the tenant's logs on disk: its oldest finished jobs' go beyond it
    caps: Caps = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        unknown = [name for name in self.priority_classes if name not in PRIORITY_CLASSES]
        if unknown:
            raise ValueError(f"priority_classes: unknown class {unknown[0]!r}; the server's classes are "
                             f"{', '.join(PRIORITY_CLASSES)}")
        for name in (f.name for f in fields(self) if f.name.startswith("max_")):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name}: expected a count >= 0 or none, got {value}")
        caps = tuple((dim, getattr(self, name), name) for name, (dim, _) in RUNNING_CAPS.items()
                     if getattr(self, name) is not None)
        object.__setattr__(self, "caps", caps)

    def with_overrides(self, overrides: Mapping[str, Any]) -> TenantLimits:
        """These limits with a tenant's overrides (as stored: field -> value; lists for the classes)."""
        changes = {k: tuple(v) if k == "priority_classes" else v for k, v in overrides.items()}
        return replace(self, **changes)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("caps")
        data["priority_classes"] = list(self.priority_classes)
        return data

    def refusal(self, spec: JobSpec, tenant: str, admin: bool = False) -> ServeError | None:
        """Why `tenant` may not submit `spec`, whatever runs now (None: it may): a priority class it may not use
        (403, as Kubernetes refuses a pod whose PriorityClass no ResourceQuota of its namespace allows; the admin,
        who grants the classes, submits with any), more tasks
        than one job may have, more than a running cap allows in all (403: it could never start), or no CPU
        (memory) request while CPU (memory) is capped (422: as Kubernetes asks of pods in a namespace whose quota
        counts them, so the cap cannot be dodged)."""
        wanted = spec.priority_class or "normal"
        if wanted not in self.priority_classes and not admin:
            allowed = ", ".join(self.priority_classes) or "none"
            return ServeError(403, f"tenant {tenant} may not use priority class {wanted}; its classes: {allowed}",
                              "priority_class")
        if self.max_tasks_per_job is not None and spec.tasks > self.max_tasks_per_job:
            return ServeError(403, f"the job has {spec.tasks} tasks; tenant {tenant}'s max_tasks_per_job is "
                              f"{self.max_tasks_per_job}", "tasks")
        for _dim, cap, name in self.caps:
            where = RUNNING_CAPS[name][1]
            per_task = 1 if where == "tasks" else getattr(spec, where)
            if where != "tasks" and not per_task:
                return ServeError(422, f"tenant {tenant} has a {name} of {cap}: its jobs must request {where}",
                                  where)
            if spec.tasks * per_task > cap:
                return ServeError(403, f"the job asks for {spec.tasks * per_task} {where} in all; tenant {tenant}'s "
                                  f"{name} is {cap}", where)
        return None


class TenantBook(Mapping[str, TenantLimits]):
    """Every tenant's limits: the server's defaults with the admin's overrides. A tenant without overrides (or
    not known at all) has the defaults. `caps` is the live view the quota plugin reads (`tenant_caps`)."""

    def __init__(self, defaults: TenantLimits) -> None:
        self.defaults = defaults
        self.overrides: dict[str, dict[str, Any]] = {}
        self._limits: dict[str, TenantLimits] = {}
        self.caps = _CapsView(self)

    def __getitem__(self, tenant: str) -> TenantLimits:
        return self._limits.get(tenant, self.defaults)

    def __iter__(self) -> Iterator[str]:
        return iter(self._limits)

    def __len__(self) -> int:
        return len(self._limits)

    def set(self, tenant: str, overrides: Mapping[str, Any]) -> TenantLimits:
        """The tenant's overrides are now `overrides` (field -> value; checked: ValueError names the field)."""
        limits = self.defaults.with_overrides(overrides)
        self.overrides[tenant] = dict(overrides)
        self._limits[tenant] = limits
        return limits


class _CapsView(Mapping[str, Caps]):
    """tenant -> caps on what its running jobs hold, for every tenant (the defaults' for one without overrides)."""

    def __init__(self, book: TenantBook) -> None:
        self._book = book

    def __getitem__(self, tenant: str) -> Caps:
        return self._book[tenant].caps

    def __iter__(self) -> Iterator[str]:
        return iter(self._book)

    def __len__(self) -> int:
        return len(self._book)


def limits_of_flags(classes: str | None = None, max_tasks_per_job: int | None = None,
                    max_running_tasks: int | None = None, max_cpu: str | None = None, max_memory: str | None = None,
                    max_pending_jobs: int | None = None, max_task_log: str | None = None,
                    max_logs: str | None = None) -> TenantLimits:
    """The server's default limits from `trimtab serve --tenant-...`: a flag left out (None) keeps the built-in
    default; 0 (for CPU and memory also "none") lifts the limit. CPU and memory are Kubernetes quantities ("8",
    "500m", "64Gi"), rounded down as a ResourceQuota's hard limits are, and so are log sizes (bytes: "1Gi").
    Raises ValueError naming the flag."""
    changes: dict[str, Any] = {}
    if classes is not None:
        changes["priority_classes"] = tuple(name.strip() for name in classes.split(",") if name.strip())
    for name, count in (("max_tasks_per_job", max_tasks_per_job), ("max_running_tasks", max_running_tasks),
                        ("max_pending_jobs", max_pending_jobs)):
        if count is not None:
            changes[name] = count or None
    for name, flag, text, scale in (("max_cpu_milli", "--tenant-max-cpu", max_cpu, Fraction(1000)),
                                    ("max_mem_mib", "--tenant-max-memory", max_memory, Fraction(1, 1 << 20)),
                                    ("max_task_log_bytes", "--tenant-max-task-log", max_task_log, Fraction(1)),
                                    ("max_log_bytes", "--tenant-max-logs", max_logs, Fraction(1))):
        if text is not None:
            try:
                amount = 0 if text.strip().lower() == "none" else math.floor(parse_quantity(text) * scale)
            except ValueError as exc:
                raise ValueError(f"{flag}: {exc}") from None
            changes[name] = amount or None
    try:
        return replace(TenantLimits(), **changes)
    except ValueError as exc:
        raise ValueError(f"--tenant-{str(exc).replace('_', '-')}") from None
