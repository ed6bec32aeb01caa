"""Trace readers on the real public traces (skipped when shared/traces is absent) and on small bad inputs.

Each story names the format; the bad-input table checks that errors name the file, the line and the field."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import trace_path
from trimtab.formats import FormatError, load_trace, write_csv
from trimtab.model import Job, Resources

_trace = trace_path  # the shared traces folder; skips the test when a trace is absent


TIRESIAS_60 = "tiresias/simulator/60_job.csv"
PHILLY = "pollux-adaptdl/simulator/traces/philly.csv"
GAVEL_DIR = "gavel/scheduler/traces/physical_cluster"
GAVEL_TABLE = "gavel/scheduler/simulation_throughputs.json"
GAVEL_TRACES = [
    "artifact_evaluation", "debug", "debug_v2", "highmem_test",
    "max_min_fairness", "medium_test", "minimize_makespan", "small_test",
]  # fmt: skip


def _assert_trace_invariants(jobs: list[Job]) -> None:
    submits = [job.submit_s for job in jobs]
    assert submits == sorted(submits)
    assert submits[0] == 0.0
    assert len({job.id for job in jobs}) == len(jobs)


# --- Tiresias -----------------------------------------------------------------------------------------------


def test_tiresias_60_jobs_become_gangs_of_one_gpu_tasks() -> None:
    """The 60-job Tiresias trace: 30 one-GPU jobs, 10 each of 2, 4 and 8 GPUs, 10,705 s of work in all."""
    jobs = load_trace(str(_trace(TIRESIAS_60)))
    assert len(jobs) == 60
    assert Counter(job.gpus for job in jobs) == {1: 30, 2: 10, 4: 10, 8: 10}
    assert sum(job.duration_s or 0 for job in jobs) == 10_705
    assert all(job.task == Resources(gpus=1) for job in jobs)
    first = jobs[0]
    assert (first.id, first.tasks, first.duration_s, first.job_type) == ("0", 1, 164.0, "vgg19")
    assert jobs[1].submit_s == 30.0
    _assert_trace_invariants(jobs)


def test_format_prefix_and_detection_agree() -> None:
    """A prefixed spec and a detected one read the same jobs."""
    path = _trace(TIRESIAS_60)
    assert load_trace(f"tiresias:{path}") == load_trace(path)


def test_tiresias_older_tf_job_format_reads_by_column_name(tmp_path: Path) -> None:
    """tf_job.csv's older column order maps by name (job_id, num_gpu, submit_time, duration, model_name)."""
    path = tmp_path / "tf.csv"
    path.write_text(
        "job_id,num_gpu,submit_time,start_time,duration,model_size,aggr_interval,model_name,model_scale\n"
        "10,12,11,14,20,400,0,vgg19,1\n"
        "11,4,5,6,30,400,0,resnet50,1\n"
    )
    jobs = load_trace(f"tiresias:{path}")
    assert [(job.id, job.gpus, job.submit_s, job.duration_s, job.job_type) for job in jobs] == [
        ("11", 4, 0.0, 30.0, "resnet50"),
        ("10", 12, 6.0, 20.0, "vgg19"),
    ]


def test_the_shipped_tf_job_example_repeats_its_id() -> None:
    """Tiresias's own tf_job.csv lists job 10 twice: an error, not two jobs with one id."""
    message = r"tf_job\.csv line 3, field job_id: duplicate job id '10' \(first on line 2\)"
    with pytest.raises(FormatError, match=message):
        load_trace(_trace("tiresias/simulator/tf_job.csv"))


# --- Philly (Pollux's list) ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def philly() -> tuple[list[Job], float]:
    """The Philly-derived list, read once for the module, with the seconds the read took."""
    path = _trace(PHILLY)
    start = time.perf_counter()
    jobs = load_trace(path)
    return jobs, time.perf_counter() - start


def test_philly_list_reads_every_job_with_its_tenant(philly: tuple[list[Job], float]) -> None:
    """82,247 jobs (the file's trailing blank line is no job), 15 virtual clusters as tenants, the known GPU mix."""
    jobs, _ = philly
    assert len(jobs) == 82_247
    assert len({job.tenant for job in jobs}) == 15
    assert Counter(job.gpus for job in jobs) == {
        1: 76627, 4: 1870, 2: 1818, 8: 1643, 16: 199, 32: 67, 12: 7, 24: 7, 64: 6, 128: 3,
    }  # fmt: skip
    _assert_trace_invariants(jobs)


def test_philly_submit_times_count_from_the_earliest_timestamp(philly: tuple[list[Job], float]) -> None:
    """Rows are not in time order; id is the 0-based row, submit_s the seconds since the earliest timestamp."""
    jobs, _ = philly
    by_id = {job.id: job for job in jobs}
    earliest = dt.datetime(2017, 9, 4, 10, 30, 41)
    third_row = by_id["2"]  # 2017-09-29 07:58:32,860662.0,1,860662.0,6c71a0
    assert third_row.submit_s == (dt.datetime(2017, 9, 29, 7, 58, 32) - earliest).total_seconds()
    assert (third_row.duration_s, third_row.tenant, third_row.gpus) == (860662.0, "6c71a0", 1)
    assert jobs[-1].submit_s == (dt.datetime(2017, 12, 22, 8, 2, 11) - earliest).total_seconds()


# --- Gavel --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", GAVEL_TRACES)
def test_gavel_traces_turn_steps_into_positive_durations(name: str) -> None:
    """Every Gavel physical-cluster trace reads with a positive duration for each job and one row per job."""
    path = _trace(f"{GAVEL_DIR}/{name}.trace")
    jobs = load_trace(path)
    assert len(jobs) == sum(1 for line in path.read_text().splitlines() if line.strip())
    assert all(job.duration_s is not None and job.duration_s > 0 for job in jobs)
    assert all(job.gpu_models == () and job.job_type for job in jobs)
    _assert_trace_invariants(jobs)


def test_gavel_duration_is_steps_over_v100_throughput() -> None:
    """max_min_fairness.trace: 96 jobs (scale 1:59, 2:19, 4:18), 36 at t=0, the last at 46,317 s; the first row's
    duration is its total_steps over its measured V100 rate at its scale factor."""
    jobs = load_trace(f"gavel:{_trace(f'{GAVEL_DIR}/max_min_fairness.trace')}")
    assert len(jobs) == 96
    assert Counter(job.tasks for job in jobs) == {1: 59, 2: 19, 4: 18}
    assert sum(job.submit_s == 0 for job in jobs) == 36
    assert jobs[-1].submit_s == 46_317
    table = json.loads(_trace(GAVEL_TABLE).read_text())
    first = next(job for job in jobs if job.id == "0")  # ResNet-18 (batch size 128), 925982 steps, scale 4
    rate = table["v100"]["('ResNet-18 (batch size 128)', 4)"]["null"]
    assert (first.job_type, first.tasks) == ("ResNet-18 (batch size 128)", 4)
    assert first.duration_s == pytest.approx(925_982 / rate)


def test_gavel_reference_gpu_and_table_can_be_chosen() -> None:
    """On the slower K80 every job takes longer than on the default V100."""
    path = _trace(f"{GAVEL_DIR}/small_test.trace")
    v100 = load_trace(path, gavel_throughputs=_trace(GAVEL_TABLE))
    k80 = load_trace(path, gavel_reference_gpu="k80")
    assert all((slow.duration_s or 0) > (fast.duration_s or 0) for slow, fast in zip(k80, v100, strict=True))


def test_gavel_without_a_throughput_table_says_where_it_looked(tmp_path: Path) -> None:
    """A .trace with no simulation_throughputs.json near it asks for gavel_throughputs."""
    path = tmp_path / "one.trace"
    path.write_text("A3C\tpython3 main.py\tdir\t--steps\t1\t100\t1\t1\t-1.000000\t0\n")
    with pytest.raises(FormatError, match=r"one\.trace: .*simulation_throughputs\.json.*gavel:PATH,throughputs=FILE"):
        load_trace(path)


MSR_ROW = "{job}\tpython3 main.py\t--num_steps\t1\t{steps}\t{arrival}\t{scale}\n"  # Gavel's msr traces: 7 fields


def test_gavel_msr_traces_of_seven_fields_read_and_jobs_without_a_throughput_are_skipped_and_said(
        tmp_path: Path) -> None:
    """The 7-field layout (total_steps, then arrival_time, then scale_factor); a job type the table lacks is skipped
    and reported by type and count, or refused with missing=error; the table and GPU are options of the spec."""
    trace = tmp_path / "msr.txt"
    trace.write_text(MSR_ROW.format(job="A3C", steps=100, arrival=5, scale=1)
                     + MSR_ROW.format(job="Unknown", steps=10, arrival=7, scale=1)
                     + MSR_ROW.format(job="A3C", steps=300, arrival=9.5, scale=2)
                     + MSR_ROW.format(job="Unknown", steps=10, arrival=11, scale=1))
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"k80": {"('A3C', 1)": {"null": 2.0}, "('A3C', 2)": {"null": 3.0}}}))
    notes: list[str] = []
    jobs = load_trace(f"gavel:{trace},throughputs={table},gpu=k80", notes=notes)
    assert [(j.id, j.submit_s, j.tasks, j.duration_s) for j in jobs] == [("0", 0.0, 1, 50.0), ("1", 4.5, 2, 100.0)]
    assert len(notes) == 1 and "skipped 2 of 4 jobs" in notes[0] and "'Unknown' x1: 2" in notes[0], notes
    with pytest.raises(FormatError, match=r"line 2, field job_type: no throughput for job type 'Unknown'"):
        load_trace(f"gavel:{trace},throughputs={table},gpu=k80,missing=error")
    with pytest.raises(FormatError, match=r"unknown Gavel trace option 'table=x'"):
        load_trace(f"gavel:{trace},table=x")


def test_gavel_unknown_reference_gpu_lists_the_known_ones() -> None:
    with pytest.raises(FormatError, match=r"no GPU type 'h100'; the table has: k80, .*v100"):
        load_trace(_trace(f"{GAVEL_DIR}/small_test.trace"), gavel_reference_gpu="h100")


# --- trimtab's CSV ------------------------------------------------------------------------------------------


def test_csv_round_trips_a_real_trace(tmp_path: Path) -> None:
    """write_csv then load_trace gives back the Tiresias jobs unchanged."""
    jobs = load_trace(_trace(TIRESIAS_60))
    path = tmp_path / "jobs.csv"
    write_csv(jobs, path)
    assert load_trace(path) == jobs


def test_csv_minimal_columns_and_per_task_gpus(tmp_path: Path) -> None:
    """Without `tasks`, gpus is the gang's GPU count; with it, gpus is per task. Optional columns fill the rest."""
    path = tmp_path / "mine.csv"
    path.write_text(
        "id,submit_s,gpus,duration_s,tasks,tenant,priority,gpu_model,node_selector\n"
        "b,110,2,60,4,vision,5,a100|h100,zone=a;pool=x\n"
        "a,100,1,,1,,,,\n"
    )
    a, b = load_trace(path)
    assert (a.id, a.submit_s, a.duration_s, a.tenant, a.priority, a.gpu_models) == ("a", 0.0, None, "default", 0, ())
    assert (b.tasks, b.task.gpus, b.gpus, b.submit_s, b.priority) == (4, 2, 8, 10.0, 5)
    assert b.gpu_models == ("a100", "h100")
    assert dict(b.node_selector) == {"zone": "a", "pool": "x"}
    plain = tmp_path / "plain.csv"
    plain.write_text("id,submit_s,gpus,duration_s\nx,5,8,100\n")
    (only,) = load_trace(f"csv:{plain}")
    assert (only.tasks, only.task, only.submit_s) == (8, Resources(gpus=1), 0.0)


_JOBS = st.lists(
    st.builds(
        Job,
        id=st.text("abcxyz0123456789-_.", min_size=1, max_size=8),
        submit_s=st.floats(0, 1e7, allow_nan=False),
        tasks=st.integers(1, 64),
        task=st.builds(
            Resources, gpus=st.integers(0, 8), cpu_milli=st.integers(0, 64_000), mem_mib=st.integers(0, 10**6)
        ),
        duration_s=st.none() | st.floats(0, 1e7, allow_nan=False),
        tenant=st.sampled_from(["default", "vision", "nlp, with comma"]),
        user=st.text("abc \"',", max_size=5).map(str.strip),  # cells are read stripped
        priority=st.integers(-100, 100),
        gpu_models=st.lists(st.sampled_from(["a100", "v100", "k80"]), unique=True, max_size=2).map(tuple),
        job_type=st.text('ResNet-18 (batch size 8),"', max_size=20).map(str.strip),
        node_selector=st.dictionaries(st.sampled_from(["zone", "pool"]), st.sampled_from(["a", "b", ""]), max_size=2),
    ),
    min_size=1,
    max_size=20,
    unique_by=lambda job: job.id,
)


@settings(max_examples=60, deadline=None)
@given(jobs=_JOBS)
def test_csv_round_trip_keeps_every_field(tmp_path_factory: pytest.TempPathFactory, jobs: list[Job]) -> None:
    """For any jobs that start at 0 and are sorted by submit time, write_csv then load_trace is the identity."""
    start = min(job.submit_s for job in jobs)
    shifted = sorted((_replace_submit(job, job.submit_s - start) for job in jobs), key=lambda job: job.submit_s)
    path = tmp_path_factory.mktemp("rt") / "jobs.csv"
    write_csv(shifted, path)
    assert load_trace(path) == shifted


def _replace_submit(job: Job, submit_s: float) -> Job:
    return dataclasses.replace(job, submit_s=submit_s)


# --- bad inputs ---------------------------------------------------------------------------------------------

TIRESIAS_HEADER = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
CSV_HEADER = "id,submit_s,gpus,duration_s\n"
GAVEL_ROW = "A3C\tpython3 main.py\tdir\t--steps\t1\t{steps}\t{scale}\t1\t-1.000000\t{arrival}\n"


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        (
            "t.csv",
            TIRESIAS_HEADER + "0,1,0,1,vgg,10,0\n1,x,5,1,vgg,10,0\n",
            "t.csv line 3, field num_gpu: expected a positive integer, got 'x'",
        ),
        (
            "t.csv",
            TIRESIAS_HEADER + "0,0,0,1,vgg,10,0\n",
            "t.csv line 2, field num_gpu: expected a positive integer, got '0'",
        ),
        (
            "t.csv",
            TIRESIAS_HEADER + "0,1,0,1,vgg,-3,0\n",
            "t.csv line 2, field duration: expected a non-negative number of seconds, got '-3'",
        ),
        (
            "t.csv",
            TIRESIAS_HEADER + "0,1,soon,1,vgg,3,0\n",
            "t.csv line 2, field submit_time: expected a number of seconds, got 'soon'",
        ),
        (
            "p.csv",
            PHILLY_HEADER + "2017-10-09 07:01:55,66.0,1,66.0,vc\n10/09/2017 07:01,66.0,1,66.0,vc\n",
            "p.csv line 3, field timestamp: expected a timestamp 'YYYY-MM-DD HH:MM:SS', got '10/09/2017 07:01'",
        ),
        (
            "p.csv",
            PHILLY_HEADER + "2017-13-09 07:01:55,66.0,1,66.0,vc\n",
            "p.csv line 2, field timestamp: expected a timestamp",
        ),
        (
            "p.csv",
            PHILLY_HEADER + "2017-10-09 07:01:55,66.0,0,0,vc\n",
            "p.csv line 2, field num_gpus: expected a positive integer, got '0'",
        ),
        (
            "p.csv",
            PHILLY_HEADER + "2017-10-09 07:01:55,nan,1,0,vc\n",
            "p.csv line 2, field duration: expected a non-negative number of seconds, got 'nan'",
        ),
        (
            "p.csv",
            PHILLY_HEADER + "2017-10-09 07:01:55,66.0,1\n",
            "p.csv line 2: expected 5 fields like the header, got 3",
        ),
        (
            "c.csv",
            "id,submit_s,duration_s\nx,0,1\n",
            "c.csv line 1: missing column(s) gpus; the header has id,submit_s,duration_s",
        ),
        (
            "c.csv",
            CSV_HEADER + "a,0,1,10\na,5,1,10\n",
            "c.csv line 3, field id: duplicate job id 'a' (first on line 2)",
        ),
        (
            "c.csv",
            CSV_HEADER + "a,0,0,10\n",
            "c.csv line 2, field gpus: expected a positive integer, got '0'",
        ),
        (
            "c.csv",
            CSV_HEADER + ",0,1,10\n",
            "c.csv line 2, field id: expected a job id, got ''",
        ),
        (
            "c.csv",
            "id,submit_s,gpus,duration_s,priority\na,0,1,10,high\n",
            "c.csv line 2, field priority: expected an integer, got 'high'",
        ),
        (
            "c.csv",
            "id,submit_s,gpus,duration_s,node_selector\na,0,1,10,zone\n",
            "c.csv line 2, field node_selector: expected key=value pairs",
        ),
        (
            "g.trace",
            GAVEL_ROW.format(steps=100, scale=1, arrival=0) + "A3C\t1\t2\n",
            "g.trace line 2: expected 10 (job_type,",
        ),
        (
            "g.trace",
            GAVEL_ROW.format(steps=100, scale=0, arrival=0),
            "g.trace line 1, field scale_factor: expected a positive integer, got '0'",
        ),
        (
            "g.trace",
            GAVEL_ROW.format(steps=-1, scale=1, arrival=0),
            "g.trace line 1, field total_steps: expected a positive integer, got '-1'",
        ),
        (
            "g.trace",
            GAVEL_ROW.format(steps=10, scale=1, arrival="later"),
            "g.trace line 1, field arrival_time: expected a non-negative number of seconds, got 'later",
        ),
        (
            "w.csv",
            "name,when\nx,1\n",
            "w.csv line 1: cannot tell the trace format",
        ),
        (
            "e.csv",
            "",
            "e.csv line 1: cannot tell the trace format",
        ),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path: Path, name: str, content: str, expected: str) -> None:
    """Every bad value is reported with its file, its physical line (the header is line 1) and its column."""
    path = tmp_path / name
    path.write_text(content)
    table = {"v100": {"('A3C', 1)": {"null": 2.0}}}
    (tmp_path / "simulation_throughputs.json").write_text(json.dumps(table))
    with pytest.raises(FormatError) as caught:
        load_trace(path)
    assert str(caught.value).startswith(str(tmp_path / expected.split(" ", 1)[0]))
    assert expected.split(" ", 1)[1] in str(caught.value)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("alibaba:{dir}/x.csv", "unknown trace format 'alibaba'; known formats: tiresias, philly, gavel, csv"),
        ("{dir}/absent.csv", "absent.csv: no such file"),
        ("philly:{dir}/tiresias.csv", "tiresias.csv line 1: missing column(s) timestamp, num_gpus"),
    ],
)
def test_bad_specs_say_what_is_wrong(tmp_path: Path, spec: str, expected: str) -> None:
    """An unknown prefix, a missing file and a forced format that does not fit are errors, not guesses."""
    (tmp_path / "tiresias.csv").write_text(TIRESIAS_HEADER + "0,1,0,1,vgg,10,0\n")
    with pytest.raises(FormatError) as caught:
        load_trace(spec.format(dir=tmp_path))
    assert expected in str(caught.value)


def test_gavel_bad_table_rows_are_named(tmp_path: Path) -> None:
    """A throughput table whose keys are not Gavel's "('<job type>', <scale>)" names the key."""
    trace = tmp_path / "g.trace"
    trace.write_text(GAVEL_ROW.format(steps=100, scale=1, arrival=0))
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"v100": {"A3C": {"null": 2.0}}}))
    with pytest.raises(FormatError, match=r"t\.json, field v100\.A3C: expected a key"):
        load_trace(trace, gavel_throughputs=table)
