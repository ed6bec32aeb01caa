"""Pollux's workloads (Qiao et al., OSDI'21, the simulator of its artifact): the job lists `workload-N.csv`
(`name,time,application,num_replicas,batch_size`) and the application profiles beside them
(`traces/<app>/placements.csv`, `scalability.csv`, `validation-<batch>.csv`), read into Jobs whose speed follows
the profiles.

Owns the application model those profiles imply, as Pollux's simulator defines it: the time of one step by
placement and local batch size (measured, interpolated between measurements), statistical efficiency by batch size
and epoch (the gradient noise scale of the validation runs), a job's work (its application's epochs, in progress
units of the smallest profiled batch) and the ScalingModel of a job (`PolluxScaling`). See docs/elastic.md."""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trimtab.formats import FormatError, _open_text
from trimtab.model import Elastic, Job, Resources

# Training length per application in epochs, and the local batch limit where it is not the profiled maximum: the
# settings of Pollux's simulator (its applications table); the profiles themselves do not say how long jobs train.
MAX_EPOCHS = {"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80, "yolov3": 50}
MAX_LOCAL_BSZ = {"yolov3": 8}
GPUS_PER_NODE = 4  # the nodes the profiles were measured on (and Pollux's simulated cluster: 16 x 4)
RESIZE_S = 30.0  # what a (re)allocation costs a job in Pollux's simulator
MAX_REPLICAS = 64  # Pollux's simulator never gives a job more
_BATCH_CANDIDATES = 16  # batch sizes tried per allocation when the batch size follows the GPUs
_ONE_GPU = Resources(gpus=1)
_WORKLOAD_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")


@dataclass(frozen=True, slots=True)
class _Curve:
    """Step and synchronisation time (s) of one placement shape, by local batch size (ascending)."""

    local_bsz: np.ndarray
    step_s: np.ndarray
    sync_s: np.ndarray

    def at(self, local_bsz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.interp(local_bsz, self.local_bsz, self.step_s), np.interp(local_bsz, self.local_bsz, self.sync_s)


def _curves(rows: Sequence[tuple[object, float, float, float]]) -> dict[object, _Curve]:
    """Curves by key from (key, local_bsz, step_s, sync_s) rows, repeated measurements averaged."""
    grouped: dict[object, dict[float, list[tuple[float, float]]]] = {}
    for key, bsz, step, sync in rows:
        grouped.setdefault(key, {}).setdefault(bsz, []).append((step, sync))
    out: dict[object, _Curve] = {}
    for key, by_bsz in grouped.items():
        sizes = sorted(by_bsz)
        means = np.array([np.mean(by_bsz[b], axis=0) for b in sizes])
        out[key] = _Curve(np.array(sizes, dtype=float), means[:, 0], means[:, 1])
    return out


def canonical_placement(placement: Sequence[int]) -> tuple[int, ...]:
    """GPUs per node with empty nodes dropped, rotated to the lexicographically smallest rotation (how the profiles
    name a placement: 24 for (2, 4) and (4, 2))."""
    p = tuple(int(g) for g in placement if g)
    return min(p[i:] + p[:i] for i in range(len(p)))


def balanced_placement(gpus: int, nodes: int) -> tuple[int, ...]:
    """`gpus` GPUs spread as evenly as they go over `nodes` nodes (at least one GPU each)."""
    nodes = max(1, min(nodes, gpus))
    base, extra = divmod(gpus, nodes)
    return (base + 1,) * extra + (base,) * (nodes - extra)


@dataclass(eq=False)
class PolluxApp:
    """One application's profiles. Progress is counted as Pollux counts it: steps of the smallest profiled batch
    size (`init_bsz`), each larger batch worth its statistical efficiency in such steps; epoch e ends at
    `epoch_ends[e]` (the least progress any validation run needed), the job at the last one."""

    name: str
    placements: dict[object, _Curve]
    shapes: dict[object, _Curve]  # by (nodes, replicas): placements averaged, and the scalability runs
    batch_sizes: np.ndarray  # the validated batch sizes, ascending
    grad_sqr: np.ndarray  # [epoch, validated batch size]
    grad_var: np.ndarray
    epoch_ends: np.ndarray  # cumulative progress at the end of each epoch
    min_local_bsz: int
    max_local_bsz: int
    _times: dict[tuple[tuple[int, ...], int | None], float] = field(default_factory=dict)

    @property
    def init_bsz(self) -> int:
        return int(self.batch_sizes[0])

    @property
    def max_bsz(self) -> int:
        return int(self.batch_sizes[-1])

    @classmethod
    def load(cls, folder: Path, name: str) -> PolluxApp:
        """The profiles of application `name` in `folder` (traces/<name>/). Raises FormatError naming the file."""
        if name not in MAX_EPOCHS:
            raise FormatError(str(folder), f"unknown Pollux application {name!r}; known: {', '.join(MAX_EPOCHS)}")
        placements = _read_rows(folder / "placements.csv", ("placement", "local_bsz", "step_time", "sync_time"))
        scalability = _read_rows(folder / "scalability.csv",
                                 ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"))
        by_placement = _curves([(canonical_placement(_digits(r[0])), r[1], r[2], r[3]) for r in placements])
        shape_rows = [((len(_digits(r[0])), sum(_digits(r[0]))), r[1], r[2], r[3]) for r in placements]
        shape_rows += [((int(r[0]), int(r[1])), r[2], r[3], r[4]) for r in scalability]
        validation = sorted((int(m.group(1)), p) for p in folder.glob("validation-*.csv")
                            if (m := re.fullmatch(r"validation-(\d+)\.csv", p.name)))
        if not validation:
            raise FormatError(str(folder), "no validation-<batch size>.csv profile")
        epochs = MAX_EPOCHS[name]
        runs = [_read_rows(path, ("progress", "iteration", "metric", "grad_sqr", "grad_var")) for _, path in validation]
        short = [str(path) for (_, path), run in zip(validation, runs, strict=True) if len(run) < epochs]
        if short:
            raise FormatError(short[0], f"fewer than the {epochs} epochs {name} trains for")
        progress = np.array([[row[0] for row in run[:epochs]] for run in runs])
        local = [r[1] for r in placements]
        return cls(name, by_placement, _curves(shape_rows), np.array([b for b, _ in validation], dtype=float),
                   np.array([[row[3] for row in run[:epochs]] for run in runs]).T,
                   np.array([[row[4] for row in run[:epochs]] for run in runs]).T,
                   progress.min(axis=0), int(min(local)), MAX_LOCAL_BSZ.get(name, int(max(local))))

    # ------------------------------------------------------------------------------------------ throughput

    def step_time(self, placement: tuple[int, ...], local_bsz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Step and sync time (s) at `placement` (canonical) for each local batch size: the measured placement's
        curve, else the measured (nodes, replicas) shape's, else interpolated in replicas between the measured
        shapes with as many nodes (the nearest node count that has any; nodes beyond 16 count as 16)."""
        curve = self.placements.get(placement) or self.shapes.get((len(placement), sum(placement)))
        if curve is not None:
            return curve.at(local_bsz)
        counts = {n for n, _ in self.shapes}  # type: ignore[misc]
        want_n = min(len(placement), 16)
        nodes = min(counts, key=lambda n: (abs(n - want_n), -n))
        replicas = sum(placement)
        known = sorted(r for n, r in self.shapes if n == nodes)  # type: ignore[misc]
        low = max((r for r in known if r <= replicas), default=known[0])
        high = min((r for r in known if r >= replicas), default=known[-1])
        step_lo, sync_lo = self.shapes[(nodes, low)].at(local_bsz)
        if high == low:
            return step_lo, sync_lo
        step_hi, sync_hi = self.shapes[(nodes, high)].at(local_bsz)
        w = (replicas - low) / (high - low)
        return step_lo + w * (step_hi - step_lo), sync_lo + w * (sync_hi - sync_lo)

    def _configs(self, replicas: int, batch: np.ndarray, fixed: bool) -> tuple[np.ndarray, np.ndarray]:
        """(per-GPU batch of one micro-step, accumulation steps) for global batch sizes on `replicas` GPUs, as
        Pollux's simulator splits them (a single GPU with a tuned batch above the smallest one accumulates)."""
        local = np.ceil(batch / replicas - 1e-8)
        accum = np.ceil(local / self.max_local_bsz - 1e-8) - 1
        if fixed and replicas == 1:
            accum = np.where(batch > self.init_bsz, np.maximum(accum, 1), accum)
        atomic = np.ceil(local / (accum + 1) - 1e-8)
        return np.minimum(atomic, np.floor(self.max_bsz / (replicas * (accum + 1)))), accum

    def _efficiency(self, batch: np.ndarray) -> np.ndarray:
        """Statistical efficiency [epoch, batch] of each global batch size: the progress one step of it makes in
        steps of `init_bsz` (gradient noise scale, interpolated between the validated batch sizes)."""
        b = np.clip(batch, self.batch_sizes[0], self.batch_sizes[-1])
        hi = np.clip(np.searchsorted(self.batch_sizes, b), 1, len(self.batch_sizes) - 1)
        lo = hi - 1
        w = (b - self.batch_sizes[lo]) / (self.batch_sizes[hi] - self.batch_sizes[lo])
        sqr = self.grad_sqr[:, lo] * (1 - w) + self.grad_sqr[:, hi] * w
        var = self.grad_var[:, lo] * (1 - w) + self.grad_var[:, hi] * w
        scale = batch / self.init_bsz
        return (var + sqr) / (var / scale + sqr)

    def job_time_s(self, placement: tuple[int, ...], batch_size: int | None) -> float:
        """Seconds the whole job takes at `placement` (canonical) with the global `batch_size`, or (None) with the
        batch size of the best goodput in every epoch, as an adaptive job re-chooses it between epochs."""
        key = (placement, batch_size)
        if key in self._times:
            return self._times[key]
        replicas = sum(placement)
        fixed = batch_size is not None
        if fixed:
            batch = np.array([float(batch_size)])
        else:
            low = max(self.init_bsz, replicas * self.min_local_bsz)
            high = max(low, self.max_bsz)
            batch = np.unique(np.geomspace(low, high, _BATCH_CANDIDATES).round())
        atomic, accum = self._configs(replicas, batch, fixed)
        step, sync = self.step_time(placement, atomic)
        step_s = step + accum * (step - sync)
        goodput = self._efficiency(replicas * atomic * (accum + 1)) / step_s  # [epoch, candidate]
        work = np.diff(self.epoch_ends, prepend=0.0)
        seconds = float((work / goodput.max(axis=1)).sum())
        self._times[key] = seconds
        return seconds

    def max_replicas(self) -> int:
        """The most GPUs an elastic job of this application may hold (Pollux: no fewer samples per GPU than the
        smallest profiled local batch, 64 at most; ncf runs on one GPU)."""
        return 1 if self.name == "ncf" else max(1, min(MAX_REPLICAS, self.max_bsz // self.min_local_bsz))


@dataclass(frozen=True, eq=False)
class PolluxScaling:
    """The ScalingModel of a Pollux job: throughput = 1 / the job's time at a placement (jobs per second), with its
    tuned `batch_size` or (None) the batch size re-chosen for the best goodput, as an elastic job does."""

    app: PolluxApp
    batch_size: int | None

    def throughput(self, gpus: int, nodes: int) -> float:
        return 1.0 / self.app.job_time_s(canonical_placement(balanced_placement(gpus, nodes)), self.batch_size)


def load_pollux(spec: str) -> list[Job]:
    """The jobs of a Pollux workload. `spec` is `PATH[,profiles=DIR][,elastic][,start=F]`: PATH a
    `workload-N.csv`; DIR the folder of the application profiles (default: `traces/` beside the workload's folder,
    as the artifact lays them out). Without `elastic`, each job runs its tuned `num_replicas` GPUs with its tuned
    `batch_size` (what Pollux's Tiresias and Optimus runs assume); with it, a job may run on 1 to its
    application's `max_replicas` GPUs, choosing its batch size for each allocation (Pollux's adaptive jobs; ncf
    keeps its batch size of 32,768 and one GPU, as in Pollux's runs), and asks for (starts at) F times its tuned
    GPUs, rounded up (default 1). Every job has a PolluxScaling model, and a
    duration at its tuned GPUs on the fewest 4-GPU nodes. Raises FormatError naming the file, line and field."""
    path_text, *options = spec.split(",")
    settings = dict(o.partition("=")[::2] for o in options)
    unknown = sorted(set(settings) - {"profiles", "elastic", "start"})
    if unknown:
        raise FormatError(spec, f"unknown Pollux workload option(s) {', '.join(unknown)} "
                          "(profiles=DIR, elastic, start=F)")
    elastic = "elastic" in settings
    try:
        start = float(settings.get("start") or 1.0)
    except ValueError:
        start = 0.0
    if not 0 < start <= 1 or ("start" in settings and not elastic):
        raise FormatError(spec, f"start={settings['start']!r}: an elastic job's share of its tuned GPUs, in (0, 1]")
    path = Path(path_text)
    profiles = Path(settings["profiles"]) if settings.get("profiles") else path.resolve().parent.parent / "traces"
    apps: dict[str, PolluxApp] = {}
    jobs: list[Job] = []
    with _open_text(path, path_text) as stream:
        reader = csv.DictReader(stream)
        missing = [c for c in _WORKLOAD_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise FormatError(path_text, f"missing column(s) {', '.join(missing)}; a Pollux workload has "
                              + ",".join(_WORKLOAD_COLUMNS), line=1)
        for line, row in enumerate(reader, start=2):
            jobs.append(_job(row, line, path_text, apps, profiles, start if elastic else None))
    return jobs


def _job(row: dict[str, str], line: int, source: str, apps: dict[str, PolluxApp], profiles: Path,
         start: float | None) -> Job:
    """One workload row as a Job: fixed-size (`start` None) or elastic, asking for `start` of its tuned GPUs."""
    replicas, batch = (_positive(row, f, line, source) for f in ("num_replicas", "batch_size"))
    time_s = _positive(row, "time", line, source, allow_zero=True)
    name = row["application"]
    if name not in apps:
        folder = profiles / name
        if not folder.is_dir():
            raise FormatError(source, f"no profiles of application {name!r} in {folder} (give profiles=DIR)",
                              line=line, field="application")
        apps[name] = PolluxApp.load(folder, name)
    app = apps[name]
    scaling = PolluxScaling(app, None if start is not None and name != "ncf" else batch)
    tasks = replicas if start is None else max(1, math.ceil(replicas * start - 1e-9))
    top = max(app.max_replicas(), tasks)
    return Job(row["name"], float(time_s), tasks, _ONE_GPU,
               duration_s=1.0 / scaling.throughput(tasks, math.ceil(tasks / GPUS_PER_NODE)), job_type=name,
               scaling=scaling, elastic=Elastic(1, top, RESIZE_S) if start is not None else None)


def _positive(row: dict[str, str], field_name: str, line: int, source: str, allow_zero: bool = False) -> int:
    text = (row.get(field_name) or "").strip()
    try:
        value = int(float(text))
    except ValueError:
        value = -1
    if value < (0 if allow_zero else 1):
        raise FormatError(source, f"expected a {'non-negative' if allow_zero else 'positive'} number, got {text!r}",
                          line=line, field=field_name)
    return value


def _digits(value: float) -> tuple[int, ...]:
    return tuple(int(c) for c in str(int(value)))


def _read_rows(path: Path, columns: Sequence[str]) -> list[tuple[float, ...]]:
    """The numeric rows of a profile CSV, in `columns` order. Raises FormatError naming file, line and field."""
    with _open_text(path, str(path)) as stream:
        reader = csv.DictReader(stream)
        missing = [c for c in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise FormatError(str(path), f"missing column(s) {', '.join(missing)}", line=1)
        rows = []
        for line, row in enumerate(reader, start=2):
            try:
                rows.append(tuple(float(row[c]) for c in columns))
            except (TypeError, ValueError):
                bad = next(c for c in columns if not _is_number(row[c]))
                raise FormatError(str(path), f"expected a number, got {row[bad]!r}", line=line, field=bad) from None
    return rows


def _is_number(text: str | None) -> bool:
    try:
        float(text or "")
    except ValueError:
        return False
    return True
