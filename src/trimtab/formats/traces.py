"""Job-trace readers (Tiresias, Philly via Pollux, Gavel, trimtab's own CSV) and the writer of trimtab's CSV.

Owns format detection and the mapping of each format's columns onto Job; see docs/formats.md."""

from __future__ import annotations

import csv
import datetime as dt
import gc
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trimtab.formats import FormatError, _CsvTable, _open_text, _parse_int, _parse_seconds
from trimtab.formats.gavel import LAYOUTS, read_gavel, split_options
from trimtab.model import Job, Resources

TRACE_FORMATS: tuple[str, ...] = ("tiresias", "philly", "gavel", "csv")

CSV_COLUMNS: tuple[str, ...] = (
    "id", "submit_s", "tasks", "gpus", "cpu_milli", "mem_mib", "duration_s",
    "tenant", "user", "priority", "gpu_model", "job_type", "node_selector",
)  # fmt: skip
"""Columns write_csv writes; load_trace needs only id, submit_s, gpus, duration_s."""

_ONE_GPU = Resources(gpus=1)

# A draft is one parsed row before submit times are shifted: (raw submit seconds, line, Job keyword arguments).
_Draft = tuple[float, int, dict[str, Any]]


def load_trace(
    spec: str | Path,
    *,
    gavel_throughputs: str | Path | None = None,
    gavel_reference_gpu: str = "v100",
    notes: list[str] | None = None,
) -> list[Job]:
    """Read a job trace and return its jobs sorted by (submit_s, row order), the first submission at 0.0.

    `spec` is a path, optionally prefixed by its format: "tiresias:", "philly:", "gavel:" or "csv:". Without a
    prefix the format is detected: a `.trace` suffix or a first line of 7 or 9 to 11 tab-separated fields is
    Gavel;
    otherwise the CSV header decides (id,submit_s -> csv; timestamp,num_gpus -> philly; job_id,num_gpu ->
    tiresias). A trace job of G GPUs becomes `Job(tasks=G, task=Resources(gpus=1))`; only trimtab's own CSV
    states tasks and per-task GPUs separately.

    Gavel traces give steps, not seconds: duration_s = total_steps / the job type's throughput (steps/s) alone on
    `gavel_reference_gpu`, from `gavel_throughputs` (default: simulation_throughputs.json beside the trace or two
    folders up, where Gavel keeps it); the spec's options (`gavel:PATH,throughputs=FILE,gpu=k80,missing=error`,
    formats/gavel.py) override both. Rows a reader skips are said in `notes`.

    Raises FormatError naming the file, the line and the field for any row that cannot become a Job (bad number, no
    GPUs, duplicate id, unknown job type), for a missing file and for an unknown format."""
    text = str(spec)
    if text.startswith("openb:"):  # Alibaba openb pod list: see formats/openb.py (jobs in file order)
        from trimtab.formats.openb import load_openb_pods

        return load_openb_pods(text.removeprefix("openb:"))
    if text.startswith("pollux:"):  # Pollux's workloads and application profiles: see formats/pollux.py
        from trimtab.formats.pollux import load_pollux

        return load_pollux(text.removeprefix("pollux:"))
    fmt, path_text = _split_format(text)
    options: dict[str, str] = {}
    if fmt == "gavel":
        path_text, options = split_options(path_text)
    path = Path(path_text)
    if fmt is None:
        fmt = _detect_format(path, path_text)
    # Parsing allocates only acyclic objects; a full collection over a large trace already held by the caller
    # would double the time (measured: 0.6 s -> 1.0 s for the 82k-row Philly list), so collection waits.
    collecting = gc.isenabled()
    gc.disable()
    try:
        if fmt == "gavel":
            drafts = read_gavel(path, path_text, options.get("throughputs", gavel_throughputs),
                                options.get("gpu", gavel_reference_gpu), options.get("missing") == "error", notes)
        else:
            with _open_text(path, path_text) as stream:
                if fmt == "tiresias":
                    drafts = _read_tiresias(_CsvTable(stream, path_text, _TIRESIAS_REQUIRED, ("model_name",)))
                elif fmt == "philly":
                    drafts = _read_philly(_CsvTable(stream, path_text, _PHILLY_REQUIRED, ("cluster",)))
                else:
                    drafts = _read_csv(_CsvTable(stream, path_text, _CSV_REQUIRED, _CSV_OPTIONAL))
        return _finish(drafts, path_text, id_field="job_id" if fmt == "tiresias" else "id")
    finally:
        if collecting:
            gc.enable()


def write_csv(jobs: Iterable[Job], path: str | Path) -> None:
    """Write `jobs` in trimtab's CSV format (columns CSV_COLUMNS), one row per job, in the given order.

    load_trace reads the file back into equal jobs when the first submission is at 0.0 and the jobs are sorted by
    submit_s (load_trace shifts and sorts). Raises ValueError for a value the format cannot hold: a GPU model with
    '|', a node-selector key or value with ';' or '='."""
    with Path(path).open("w", encoding="utf-8", newline="") as stream:
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for job in jobs:
            writer.writerow(_csv_row(job))


# --- format selection ---------------------------------------------------------------------------------------


def _split_format(spec: str) -> tuple[str | None, str]:
    """("philly", "a.csv") for "philly:a.csv"; (None, spec) when no known format prefixes it."""
    head, sep, rest = spec.partition(":")
    if sep and head in TRACE_FORMATS:
        return head, rest
    if sep and head.isidentifier() and len(head) > 1 and not Path(spec).exists():
        raise FormatError(spec, f"unknown trace format {head!r}; known formats: {', '.join(TRACE_FORMATS)}")
    return None, spec


def _detect_format(path: Path, source: str) -> str:
    """The format of an existing trace file, from its suffix and first line."""
    with _open_text(path, source) as stream:
        first = stream.readline()
    if path.suffix == ".trace" or first.count("\t") + 1 in LAYOUTS:
        return "gavel"
    header = {name.strip() for name in first.rstrip("\r\n").split(",")}
    if {"id", "submit_s"} <= header:
        return "csv"
    if {"timestamp", "num_gpus"} <= header:
        return "philly"
    if {"job_id", "num_gpu"} <= header:
        return "tiresias"
    raise FormatError(
        source,
        "cannot tell the trace format from the first line "
        f"{first.strip()[:80]!r}; expected a Gavel .trace file or a CSV header with id,submit_s (csv), "
        "timestamp,num_gpus (philly) or job_id,num_gpu (tiresias); or prefix the path with "
        + ", ".join(f"'{name}:'" for name in TRACE_FORMATS),
        line=1,
    )


def _finish(drafts: list[_Draft], source: str, *, id_field: str) -> list[Job]:
    """Jobs from drafts: ids checked unique, sorted by raw submit time (stable), shifted to start at 0.0."""
    first_line: dict[str, int] = {}
    for _, line, fields in drafts:
        seen = first_line.setdefault(fields["id"], line)
        if seen != line:
            raise FormatError(
                source, f"duplicate job id {fields['id']!r} (first on line {seen})", line=line, field=id_field
            )
    if not drafts:
        return []
    drafts.sort(key=lambda draft: draft[0])
    start_s = drafts[0][0]
    jobs: list[Job] = []
    for submit_s, line, fields in drafts:
        try:
            jobs.append(Job(submit_s=submit_s - start_s, **fields))
        except ValueError as exc:  # the model's own checks; readers check first, so this is a safety net
            raise FormatError(source, str(exc), line=line) from None
    return jobs


# --- Tiresias -----------------------------------------------------------------------------------------------

_TIRESIAS_REQUIRED = ("job_id", "num_gpu", "submit_time", "duration")


def _read_tiresias(table: _CsvTable) -> list[_Draft]:
    """Tiresias `60_job.csv` (job_id,num_gpu,submit_time,iterations,model_name,duration,interval) and the older
    `tf_job.csv` (job_id,num_gpu,submit_time,start_time,duration,...,model_name,...): the same named columns."""
    source, col = table.source, table.col
    i_id, i_gpus, i_submit, i_dur, i_model = (
        col["job_id"], col["num_gpu"], col["submit_time"], col["duration"], col["model_name"]
    )  # fmt: skip
    drafts: list[_Draft] = []
    for line, row in table:
        job_id = row[i_id].strip()
        if not job_id:
            raise FormatError(source, "expected a job id, got ''", line=line, field="job_id")
        fields: dict[str, Any] = {
            "id": job_id,
            "tasks": _parse_int(row[i_gpus], source, line, "num_gpu", 1),
            "task": _ONE_GPU,
            "duration_s": _parse_seconds(row[i_dur], source, line, "duration"),
            "job_type": row[i_model].strip() if i_model >= 0 else "",
        }
        drafts.append((_parse_seconds(row[i_submit], source, line, "submit_time", signed=True), line, fields))
    return drafts


# --- Philly (Pollux's philly.csv) ---------------------------------------------------------------------------

_PHILLY_REQUIRED = ("timestamp", "duration", "num_gpus")


def _read_philly(table: _CsvTable) -> list[_Draft]:
    """Pollux's `philly.csv` (timestamp,duration,num_gpus,gpu_time,cluster); rows are not in time order.

    id = the 0-based data-row index, tenant = cluster (the Philly virtual cluster), submit from the naive
    timestamp read as UTC. gpu_time (= duration x num_gpus) is redundant and ignored."""
    source, col = table.source, table.col
    i_ts, i_dur, i_gpus, i_vc = col["timestamp"], col["duration"], col["num_gpus"], col["cluster"]
    day_start_s: dict[str, int] = {}  # 'YYYY-MM-DD' -> POSIX seconds at 00:00 UTC; ~100 distinct days
    tenants: dict[str, str] = {}  # interned, so 82k jobs share 15 strings
    drafts: list[_Draft] = []
    for line, row in table:
        stamp = row[i_ts]
        submit_s = _philly_seconds(stamp, day_start_s)
        if submit_s is None:
            raise FormatError(
                source, f"expected a timestamp 'YYYY-MM-DD HH:MM:SS', got {stamp!r}", line=line, field="timestamp"
            )
        text = row[i_gpus]
        gpus = int(text) if text.isdigit() else _parse_int(text, source, line, "num_gpus", 1)
        if gpus < 1:
            raise FormatError(source, f"expected a positive integer, got {text!r}", line=line, field="num_gpus")
        tenant = row[i_vc].strip() if i_vc >= 0 else ""
        fields: dict[str, Any] = {
            "id": str(len(drafts)),
            "tasks": gpus,
            "task": _ONE_GPU,
            "duration_s": _parse_seconds(row[i_dur], source, line, "duration"),
            "tenant": tenants.setdefault(tenant, tenant) if tenant else "default",
        }
        drafts.append((submit_s, line, fields))
    return drafts


def _philly_seconds(stamp: str, day_start_s: dict[str, int]) -> float | None:
    """POSIX seconds of a naive UTC timestamp; the date part is parsed once per distinct day (the hot path).

    Returns None for text that is not an ISO date-time."""
    stamp = stamp.strip()
    day = day_start_s.get(stamp[:10])
    if day is not None and len(stamp) == 19 and stamp[10] in " T" and stamp[13] == ":" and stamp[16] == ":":
        clock = stamp[11:13] + stamp[14:16] + stamp[17:19]
        if clock.isdigit():
            return float(day + int(clock[0:2]) * 3600 + int(clock[2:4]) * 60 + int(clock[4:6]))
    try:
        moment = dt.datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    if len(stamp) >= 10:
        midnight = dt.datetime.combine(moment.date(), dt.time(), dt.UTC)
        day_start_s.setdefault(stamp[:10], int(midnight.timestamp()))
    return moment.timestamp()


# --- trimtab's CSV ------------------------------------------------------------------------------------------

_CSV_REQUIRED = ("id", "submit_s", "gpus", "duration_s")
_CSV_OPTIONAL = (
    "tasks", "cpu_milli", "mem_mib", "tenant", "user", "priority", "gpu_model", "job_type", "node_selector",
)  # fmt: skip


def _read_csv(table: _CsvTable) -> list[_Draft]:
    """trimtab's CSV: without `tasks`, gpus G -> G one-GPU tasks (G >= 1); with `tasks`, gpus/cpu_milli/mem_mib
    are per task and gpus may be 0 (a CPU-only gang). An empty duration_s means unknown (a live job)."""
    source, col = table.source, table.col
    has_tasks = col["tasks"] >= 0
    drafts: list[_Draft] = []
    for line, row in table:

        def cell(name: str, row: list[str] = row) -> str:
            return _cell(row, col[name])

        job_id = cell("id")
        if not job_id:
            raise FormatError(source, "expected a job id, got ''", line=line, field="id")
        cpu_milli = _parse_int(cell("cpu_milli") or "0", source, line, "cpu_milli", 0)
        mem_mib = _parse_int(cell("mem_mib") or "0", source, line, "mem_mib", 0)
        if has_tasks:
            tasks = _parse_int(cell("tasks"), source, line, "tasks", 1)
            task = Resources(gpus=_parse_int(cell("gpus"), source, line, "gpus", 0), cpu_milli=cpu_milli,
                             mem_mib=mem_mib)  # fmt: skip
        else:
            tasks = _parse_int(cell("gpus"), source, line, "gpus", 1)
            task = Resources(gpus=1, cpu_milli=cpu_milli, mem_mib=mem_mib)
        duration = cell("duration_s")
        priority = cell("priority")
        fields: dict[str, Any] = {
            "id": job_id,
            "tasks": tasks,
            "task": task,
            "duration_s": _parse_seconds(duration, source, line, "duration_s") if duration else None,
            "tenant": cell("tenant") or "default",
            "user": cell("user"),
            "priority": _parse_priority(priority, source, line) if priority else 0,
            "gpu_models": tuple(model for model in cell("gpu_model").split("|") if model),
            "job_type": cell("job_type"),
            "node_selector": _parse_selector(cell("node_selector"), source, line),
        }
        drafts.append((_parse_seconds(cell("submit_s"), source, line, "submit_s", signed=True), line, fields))
    return drafts


def _cell(row: list[str], index: int) -> str:
    """The stripped text of column `index`, or "" for an absent optional column (index -1)."""
    return row[index].strip() if index >= 0 else ""


def _parse_priority(text: str, source: str, line: int) -> int:
    try:
        return int(text)
    except ValueError:
        raise FormatError(source, f"expected an integer, got {text!r}", line=line, field="priority") from None


def _parse_selector(text: str, source: str, line: int) -> dict[str, str]:
    """Parse "k=v;k2=v2" into {"k": "v", "k2": "v2"}; "" gives {}."""
    selector: dict[str, str] = {}
    for pair in filter(None, (part.strip() for part in text.split(";"))):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise FormatError(
                source, f"expected key=value pairs separated by ';', got {pair!r}", line=line, field="node_selector"
            )
        selector[key.strip()] = value.strip()
    return selector


def _csv_row(job: Job) -> list[str]:
    for model in job.gpu_models:
        if "|" in model:
            raise ValueError(f"job {job.id}: GPU model {model!r} contains '|', which the CSV format uses")
    for key, value in job.node_selector.items():
        if any(ch in text for text in (key, value) for ch in ";="):
            raise ValueError(f"job {job.id}: node selector {key}={value} contains ';' or '='")
    return [
        job.id,
        repr(float(job.submit_s)),
        str(job.tasks),
        str(job.task.gpus),
        str(job.task.cpu_milli),
        str(job.task.mem_mib),
        "" if job.duration_s is None else repr(float(job.duration_s)),
        job.tenant,
        job.user,
        str(job.priority),
        "|".join(job.gpu_models),
        job.job_type,
        ";".join(f"{key}={value}" for key, value in job.node_selector.items()),
    ]
