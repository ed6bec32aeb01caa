"""What running jobs report about themselves, and what the daemon learns from it (docs/elastic.md, "Live").

Every task is told a progress file (`TRIMTAB_PROGRESS_FILE`, one per attempt, in the job's checkpoint folder);
any task of the job may write it, rank 0 usually does, whole (write a temporary file and rename it): a JSON object
`{"samples_per_s": float, "batch_size": int, "gpu_util": float}`, every field optional. `gpu_util` (0..1) is
the stand-in for virtual GPUs; on NVML GPUs the daemon measures the job's GPUs itself and that reading wins.

Owns `LiveScaling`, the scheduler's ScalingModel of a live job (`Job.scaling`, made by `attempts.job_of`): the
job's scaling curve learned online from its reports (samples per second at each GPU count), its latest
telemetry and its `target_gpu_util`; and `ProgressBook`, which the daemon calls every `every_s` to read the
reports of its current attempts into their jobs' LiveScaling."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trimtab.serve.run.attempts import Attempt

log = logging.getLogger("trimtab.serve")

PROGRESS_FILE_BYTES = 4096  # a report is a few numbers; anything larger is not one
SMOOTHING = 0.5  # weight of a new report in the running mean of its GPU count's throughput


def progress_path(checkpoint_dir: Path, attempt: int) -> Path:
    """The progress file of one attempt of a job (what `TRIMTAB_PROGRESS_FILE` names)."""
    return checkpoint_dir / f"progress.attempt-{attempt}.json"


@dataclass(slots=True)
class Telemetry:
    """The latest report of a job's current attempt: on `gpus` GPUs, `samples_per_s` (None: not reported),
    `batch_size` (0: not reported), `gpu_util` in 0..1 (None: neither measured nor reported), at `t_s`."""

    gpus: int
    t_s: float
    samples_per_s: float | None = None
    batch_size: int = 0
    gpu_util: float | None = None


@dataclass(eq=False, slots=True)
class LiveScaling:
    """A live job's ScalingModel: throughput learned from what it reported at each GPU count (`curve`, samples
    per second, a running mean), linear through the origin below the smallest count measured, piecewise linear
    between counts, and beyond the largest with the slope of the last two (flat when it stopped gaining), or
    linear when one count is known. With no report at all, the flat model (`throughput = gpus`). A job with a target
    is sized by it alone (gpu-util-target, serve/run/elastic.py): its throughput is the same on any number of GPUs, so
    elastic-grow never grows it and elastic-shrink takes from it first (nothing lost). Mutated only by
    the daemon under its lock; read by the resize plugins within a cycle."""

    target_gpu_util: float | None = None
    curve: dict[int, float] = field(default_factory=dict)
    latest: Telemetry | None = None

    def observe(self, report: Telemetry) -> bool:
        """Take in one report; True when it changed the curve or the utilisation (worth a scheduling cycle)."""
        before = (self.latest.gpu_util if self.latest else None, self.curve.get(report.gpus))
        self.latest = report
        if report.samples_per_s is not None and report.samples_per_s > 0:
            old = self.curve.get(report.gpus)
            self.curve[report.gpus] = report.samples_per_s if old is None else \
                old + SMOOTHING * (report.samples_per_s - old)
        return before != (report.gpu_util, self.curve.get(report.gpus))

    def throughput(self, gpus: int, nodes: int) -> float:
        if self.target_gpu_util is not None:
            return 1.0  # sized by its target alone (gpu-util-target): to the goodput policies GPUs are worth nothing
        if not self.curve:
            return float(gpus)
        counts = sorted(self.curve)
        if gpus in self.curve:
            return self.curve[gpus]
        if gpus < counts[0]:
            return self.curve[counts[0]] * gpus / counts[0]
        if gpus > counts[-1]:
            if len(counts) == 1:
                return self.curve[counts[0]] * gpus / counts[0]
            lo, hi = counts[-2], counts[-1]
            slope = max(0.0, (self.curve[hi] - self.curve[lo]) / (hi - lo))
            return self.curve[hi] + slope * (gpus - hi)
        hi = next(c for c in counts if c > gpus)
        lo = counts[counts.index(hi) - 1]
        return self.curve[lo] + (self.curve[hi] - self.curve[lo]) * (gpus - lo) / (hi - lo)


def read_report(path: Path) -> dict[str, object] | None:
    """The JSON object of a progress file, None when there is none yet or it is not one (a task writing it in
    place may be caught half-way; the next read sees it whole). Never follows a link: the folder is the job's."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        data = os.read(fd, PROGRESS_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > PROGRESS_FILE_BYTES:
        return None
    try:
        found = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return found if isinstance(found, dict) else None


def telemetry_of(report: dict[str, object], gpus: int, now_s: float) -> Telemetry:
    """A report's fields that are numbers in range, the others left out."""
    def number(key: str, low: float, high: float) -> float | None:
        value = report.get(key)
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        return float(value) if ok and low <= value <= high else None  # type: ignore[operator, arg-type]

    batch = number("batch_size", 1, 1 << 31)
    return Telemetry(gpus, now_s, number("samples_per_s", 0.0, 1e12), int(batch or 0), number("gpu_util", 0.0, 1.0))


class ProgressBook:
    """Reads the current attempts' progress files into their jobs' LiveScaling. Called by the daemon under its
    lock: `due(now_s)` says whether `every_s` passed since the last read; `read` returns whether some job's curve
    or utilisation changed (the daemon then runs a scheduling cycle, so the resize plugins see it)."""

    def __init__(self, every_s: float = 1.0) -> None:
        self.every_s = every_s
        self._last_s = -math.inf

    def due(self, now_s: float) -> bool:
        return now_s - self._last_s >= self.every_s

    def read(self, attempts: Iterable[tuple[Attempt, Path, LiveScaling]], utilisation: dict[str, float],
             now_s: float) -> bool:
        """`attempts`: (current launched attempt, its progress file, its job's LiveScaling). `utilisation`: the
        measured utilisation of GPUs by device id (NVML; {} for virtual GPUs), averaged over the attempt's
        GPUs in place of the reported one when all of them are measured."""
        self._last_s = now_s
        changed = False
        for att, path, scaling in attempts:
            report = read_report(path)
            measured = [utilisation[g] for run in att.live.values() for g in run.gpu_ids if g in utilisation]
            if report is None and not measured:
                continue
            telemetry = telemetry_of(report or {}, att.alloc.gpus, now_s)
            if measured and len(measured) == att.alloc.gpus:
                telemetry.gpu_util = sum(measured) / len(measured)
            changed |= scaling.observe(telemetry)
        return changed


def nvml_utilisation(device_ids: Iterable[str]) -> dict[str, float]:
    """Utilisation (0..1, NVML's last sample period) of the whole GPUs named by index in `device_ids`; MIG
    instances and everything NVML cannot answer are left out ({} without a driver)."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # no pynvml, no driver: nothing measured
        return {}
    found: dict[str, float] = {}
    try:
        for device in device_ids:
            if not device.isdigit():
                continue
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(device))
                found[device] = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
            except Exception:  # a device NVML cannot sample now: unmeasured this time
                log.debug("no utilisation for GPU %s", device)
    finally:
        pynvml.nvmlShutdown()
    return found
