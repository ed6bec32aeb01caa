"""The Pollux workload reader (formats/pollux.py) and the elastic job model."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import trace_path
from trimtab.formats import FormatError
from trimtab.formats.pollux import balanced_placement, canonical_placement
from trimtab.formats.traces import load_trace
from trimtab.model import Elastic, Job, Resources, parse_gpu_range


def workload(number: int = 1) -> Path:
    return trace_path(f"pollux-adaptdl/simulator/workloads/workload-{number}.csv")


def test_fixed_jobs_run_their_tuned_sizes() -> None:
    jobs = load_trace(f"pollux:{workload()}")
    assert len(jobs) == 160
    first = {j.id: j for j in jobs}["cifar10-0"]  # 107 s, cifar10, 6 replicas, batch 2048
    assert (first.submit_s, first.tasks, first.job_type, first.elastic) == (107.0, 6, "cifar10", None)
    assert first.scaling is not None and first.scaling.batch_size == 2048  # type: ignore[attr-defined]
    # its duration is its time on its 6 GPUs on two 4-GPU nodes; more GPUs at that batch size run faster
    assert first.duration_s == pytest.approx(1.0 / first.scaling.throughput(6, 2))
    assert first.scaling.throughput(12, 3) > first.scaling.throughput(6, 2) > first.scaling.throughput(3, 1)
    assert {j.job_type for j in jobs} == {"cifar10", "ncf", "deepspeech2", "bert", "imagenet", "yolov3"}


def test_elastic_jobs_adapt_their_batch_size_and_may_ask_for_less() -> None:
    fixed = {j.id: j for j in load_trace(f"pollux:{workload()}")}
    elastic = {j.id: j for j in load_trace(f"pollux:{workload()},elastic,start=0.5")}
    cifar, ncf = elastic["cifar10-0"], elastic["ncf-2"]
    assert cifar.tasks == 3 and cifar.elastic == Elastic(1, 64, 30.0)
    assert ncf.elastic == Elastic(1, 1, 30.0)  # ncf keeps one GPU and its batch size, as in Pollux's runs
    # choosing the batch size for the allocation is never slower than the tuned one on the tuned GPUs
    assert cifar.scaling is not None and fixed["cifar10-0"].scaling is not None
    assert cifar.scaling.throughput(6, 2) >= fixed["cifar10-0"].scaling.throughput(6, 2)


def test_profiles_may_be_given_elsewhere(tmp_path: Path) -> None:
    csv_path = tmp_path / "w.csv"
    csv_path.write_text("name,time,application,num_replicas,batch_size\nbert-0,5,bert,8,384\n")
    profiles = workload().parents[1] / "traces"
    (job,) = load_trace(f"pollux:{csv_path},profiles={profiles}")
    assert (job.id, job.tasks, job.job_type) == ("bert-0", 8, "bert")
    with pytest.raises(FormatError, match="line 2, field application: no profiles of application 'bert'"):
        load_trace(f"pollux:{csv_path}")


@pytest.mark.parametrize(("text", "problem"), [
    ("name,time,application\n", "missing column"),
    ("name,time,application,num_replicas,batch_size\nx,5,bert,zero,384\n", "line 2, field num_replicas"),
])
def test_bad_workloads_name_file_line_and_field(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(FormatError, match=f"bad.csv.*{problem}"):
        load_trace(f"pollux:{path}")


def test_unknown_options_and_bad_start_are_refused(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="unknown Pollux workload option"):
        load_trace(f"pollux:{tmp_path / 'w.csv'},fast")
    with pytest.raises(FormatError, match="start="):
        load_trace(f"pollux:{tmp_path / 'w.csv'},elastic,start=2")


def test_placements() -> None:
    assert canonical_placement((4, 2)) == canonical_placement((2, 4)) == (2, 4)
    assert canonical_placement((0, 3, 0, 1)) == (1, 3)
    assert balanced_placement(6, 2) == (3, 3) and balanced_placement(5, 9) == (1, 1, 1, 1, 1)


def test_elastic_model_validation() -> None:
    assert parse_gpu_range("2-8") == (2, 8) and parse_gpu_range("4") == (4, 4)
    for bad in ("8-2", "0-4", "a-b", ""):
        with pytest.raises(ValueError, match="GPU range"):
            parse_gpu_range(bad)
    with pytest.raises(ValueError, match="min_tasks"):
        Elastic(3, 2)
    with pytest.raises(ValueError, match="outside its elastic range"):
        Job("j", 0.0, 9, Resources(gpus=1), elastic=Elastic(1, 8))
