"""The reader of Gavel's job traces (`scheduler/traces/`): tab-separated, one job per line, in steps rather than
seconds, turned into durations with Gavel's throughput table.

Owns `read_gavel` and the spec options of a Gavel trace. Layouts, by the number of fields (Gavel's
`utils.parse_trace` and its generated msr traces):
- 10: job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps, scale_factor,
  priority_weight, SLO, arrival_time (the physical_cluster traces);
- 9: the same without working_directory (older); 11: a `mode` after scale_factor (a fork's, ignored);
- 7: job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time, scale_factor (the msr traces
  of Gavel's artifact).

Options, after the path: `gavel:PATH,throughputs=FILE,gpu=k80,missing=error`. A job type the table has no
throughput for (at its scale factor) is skipped and reported, job types and counts, unless `missing=error`."""

from __future__ import annotations

import ast
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from trimtab.formats import FormatError, _open_text, _parse_int, _parse_seconds
from trimtab.model import Resources

_ONE_GPU = Resources(gpus=1)
_Draft = tuple[float, int, dict[str, Any]]  # as traces._Draft

# fields -> (total_steps, scale_factor, arrival_time) columns
LAYOUTS: dict[int, tuple[int, int, int]] = {7: (4, 6, 5), 9: (4, 5, 8), 10: (5, 6, 9), 11: (5, 6, 10)}
_COLUMNS = (
    "10 (job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps, scale_factor, "
    "priority_weight, SLO, arrival_time) or 7 (job_type, command, num_steps_arg, needs_data_dir, total_steps, "
    "arrival_time, scale_factor)"
)
OPTIONS = ("throughputs", "gpu", "missing")


def split_options(path_text: str) -> tuple[str, dict[str, str]]:
    """("t.trace", {"gpu": "k80"}) for "t.trace,gpu=k80": the options that follow the path after commas
    (FormatError naming an unknown one)."""
    path, *pairs = path_text.split(",")
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in OPTIONS:
            raise FormatError(path_text, f"unknown Gavel trace option {pair!r}; known: "
                              + ", ".join(f"{k}=..." for k in OPTIONS))
        options[key] = value
    if options.get("missing", "skip") not in ("skip", "error"):
        raise FormatError(path_text, f"missing={options['missing']!r}: expected skip or error", field="missing")
    return path, options


def read_gavel(path: Path, source: str, throughputs: str | Path | None, reference_gpu: str,
               strict: bool = False, notes: list[str] | None = None) -> list[_Draft]:
    """A Gavel trace: id = 0-based index among the jobs read, tasks = scale_factor (GPUs), job_type = Gavel's
    job type, duration_s = total_steps / throughput of (job_type, scale_factor) alone on `reference_gpu`.
    priority_weight and SLO have no counterpart in Job and are dropped. A job without a throughput is skipped
    and said in `notes` (FormatError instead when `strict`)."""
    with _open_text(path, source) as stream:
        lines = stream.read().splitlines()
    table_path = _table_path(path, source, throughputs)
    steps_per_s = read_throughputs(table_path, reference_gpu)
    drafts: list[_Draft] = []
    skipped: Counter[tuple[str, int]] = Counter()
    for line, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        parts = text.split("\t")
        layout = LAYOUTS.get(len(parts))
        if layout is None:
            raise FormatError(source, f"expected {_COLUMNS} tab-separated fields, got {len(parts)}", line=line)
        i_steps, i_scale, i_arrival = layout
        job_type = parts[0].strip()
        total_steps = _parse_int(parts[i_steps], source, line, "total_steps", 1)
        scale = _parse_int(parts[i_scale], source, line, "scale_factor", 1)
        arrival_s = _parse_seconds(parts[i_arrival], source, line, "arrival_time")
        rate = steps_per_s.get((job_type, scale))
        if rate is None:
            if strict:
                raise FormatError(source, f"no throughput for job type {job_type!r} at scale_factor {scale} on "
                                  f"{reference_gpu} in {table_path}", line=line, field="job_type")
            skipped[(job_type, scale)] += 1
            continue
        fields: dict[str, Any] = {"id": str(len(drafts)), "tasks": scale, "task": _ONE_GPU,
                                  "duration_s": total_steps / rate, "job_type": job_type}
        drafts.append((arrival_s, line, fields))
    if skipped and notes is not None:
        listed = "; ".join(f"{job_type!r} x{scale}: {n}" for (job_type, scale), n in sorted(skipped.items()))
        notes.append(f"{source}: skipped {sum(skipped.values())} of {len(drafts) + sum(skipped.values())} jobs "
                     f"with no throughput on {reference_gpu} in {table_path} ({listed}); missing=error refuses them")
    return drafts


def _table_path(trace: Path, source: str, given: str | Path | None) -> Path:
    """The throughput table to use: `given`, else simulation_throughputs.json beside the trace or two folders
    up (Gavel keeps traces in scheduler/traces/<set>/ and the table in scheduler/)."""
    if given is not None:
        return Path(given)
    name = "simulation_throughputs.json"
    folder = trace.resolve().parent
    candidates = list(dict.fromkeys([folder / name, folder.parent.parent / name]))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FormatError(
        source,
        "a Gavel trace gives steps, not seconds, and needs Gavel's simulation_throughputs.json to convert them; "
        f"none at {' or '.join(str(c) for c in candidates)}; name it with gavel:PATH,throughputs=FILE",
    )


def read_throughputs(table_path: Path, reference_gpu: str) -> dict[tuple[str, int], float]:
    """{(job_type, scale_factor): steps/s alone on `reference_gpu`} from Gavel's throughput table, whose shape is
    {gpu: {"('<job type>', <scale factor>)": {"null": steps/s alone, "<other job>": [shared rates]}}}."""
    source = str(table_path)
    try:
        table = json.loads(table_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FormatError(source, "no such file (the Gavel throughput table)") from None
    except (OSError, ValueError) as exc:
        raise FormatError(source, f"not a readable JSON file: {exc}") from None
    if not isinstance(table, dict) or not isinstance(table.get(reference_gpu), dict):
        known = ", ".join(sorted(table)) if isinstance(table, dict) else "none"
        raise FormatError(source, f"no GPU type {reference_gpu!r}; the table has: {known}", field=reference_gpu)
    rates: dict[tuple[str, int], float] = {}
    for key, entry in table[reference_gpu].items():
        try:
            job_type, scale = ast.literal_eval(key)
            rate = float(entry["null"])
        except (ValueError, SyntaxError, TypeError, KeyError):
            raise FormatError(
                source,
                'expected a key "(\'<job type>\', <scale>)" with a "null" (alone) throughput',
                field=f"{reference_gpu}.{key}",
            ) from None
        if math.isfinite(rate) and rate > 0:  # a 0 rate means "does not run there": left out, reported per job
            rates[(str(job_type), int(scale))] = rate
    return rates
