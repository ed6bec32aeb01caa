"""Elastic jobs live (docs/elastic.md, "Live"): a real `trimtab serve` on virtual GPUs resizes a real trainer
(elastic_trainer.py) by restarting it from its checkpoint with a new world size: grown into idle GPUs, shrunk when
a fixed job arrives, shrunk toward its target GPU utilisation."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_helpers import Server, overlapping, task_command, trimtab, wait_all_terminal

TRAINER = str(Path(__file__).with_name("elastic_trainer.py"))

# fifo with quick resizes: grow into idle GPUs after 1 s, shrink for any waiting job (ordered before or not)
QUICK_ELASTIC = """
name: quick-elastic
order: [fifo]
resize:
  - elastic-shrink: {min_interval_s: 1, max_loss: 4.0, lower_order: false}
  - elastic-grow: {min_interval_s: 1, repay: 0.0}
args:
  gpu-util-target: {min_interval_s: 1.5}
"""


def _server(tmp_path: Path, gpus: int) -> Server:
    profile = tmp_path / "quick-elastic.yaml"
    profile.write_text(QUICK_ELASTIC)
    return Server(tmp_path / "data", "--gpus", str(gpus), "--policy", str(profile))


def _wait(client: httpx.Client, job_id: int, done: Any, timeout_s: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if done(job):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not get there in {timeout_s} s: {job}")


def _starts(out: Path) -> list[tuple[int, int, int, str]]:
    """(attempt, world size, step resumed from, TRIMTAB_RESIZED) of each start of the trainer's rank 0."""
    rows = [line.split() for line in (out / "starts.log").read_text().splitlines()]
    assert all(world == gpus for _, world, _, _, gpus in rows)  # TRIMTAB_GPUS: one GPU per task
    return [(int(a), int(w), int(s), r) for a, w, s, r, _ in rows]


def _spans(out: Path) -> list[tuple[str, float, float, str]]:
    """(GPU, start, end, holder) of every task of the trainer and of the fixed job."""
    found = []
    for path in (out / "spans").iterdir() if (out / "spans").exists() else ():
        gpus, start, end = path.read_text().split()
        found += [(gpu, float(start), float(end), f"elastic.{path.name}") for gpu in gpus.split(",")]
    for path in out.glob("[0-9]*.*.*"):
        head, end = path.read_text().splitlines()
        _job, _rank, gpus, start = head.split()
        found += [(gpu, float(start), float(end), path.name) for gpu in gpus.split(",")]
    return found


def test_an_elastic_job_grows_into_idle_gpus_and_shrinks_for_a_fixed_job_losing_nothing_saved(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    server = _server(tmp_path, 4).start()
    try:
        result = trimtab(server, "submit", "--gpus", "2-4", "--json", "--", sys.executable, TRAINER, str(out), "160")
        assert result.exit_code == 0, result.output
        client = server.client()
        elastic = client.get("/v1/jobs").json()["jobs"][0]
        assert (elastic["tasks"], elastic["min_tasks"], elastic["max_tasks"]) == (2, 2, 4)
        _wait(client, elastic["id"], lambda job: job["resizes"] >= 1)  # grown into the 2 idle GPUs
        fixed = client.post("/v1/jobs", json={"command": task_command(out, 1.5), "gpus": 1, "tasks": 2}).json()
        jobs = wait_all_terminal(client, 2, 40)
    finally:
        server.stop()
    assert [job["state"] for job in jobs] == ["completed", "completed"]
    assert (out / "done.log").read_text() == "done\n"  # completed once
    starts = _starts(out)
    assert [(world, resized) for _, world, _, resized in starts[:3]] == [(2, "0"), (4, "1"), (2, "1")]
    assert starts[-1][1] == 4  # grown again once the fixed job was gone
    saved = [tuple(map(int, line.split())) for line in (out / "checkpoints.log").read_text().splitlines()]
    for attempt, _, resumed, _ in starts[1:]:  # each restart resumed from the last checkpoint written before it
        assert resumed == max((step for at, step in saved if at < attempt), default=0)
    assert not overlapping(_spans(out))  # no GPU held by two tasks at once
    ended = {job["id"]: job for job in jobs}
    assert ended[elastic["id"]]["resizes"] == len(starts) - 1
    assert ended[fixed["id"]]["first_start_s"] < ended[elastic["id"]]["end_s"]  # it did not wait for the end


def test_an_elastic_job_below_its_target_gpu_utilisation_is_shrunk_and_exports_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    server = _server(tmp_path, 4).start()
    try:
        client = server.client()
        job = client.post("/v1/jobs", json={"command": [sys.executable, TRAINER, str(out), "100", "0.3"], "gpus": 1,
                                            "tasks": 4, "min_tasks": 1, "max_tasks": 4,
                                            "target_gpu_util": 0.8}).json()
        util = f'trimtab_job_gpu_util{{job="{job["id"]}",tenant="default"}} 0.3'
        deadline = time.monotonic() + 10
        while util not in (metrics := client.get("/metrics").text) and time.monotonic() < deadline:
            time.sleep(0.1)
        jobs = wait_all_terminal(client, 1, 30)
    finally:
        server.stop()
    assert util in metrics
    assert f'trimtab_job_samples_per_second{{job="{job["id"]}",tenant="default"}}' in metrics
    assert jobs[0]["state"] == "completed"
    worlds = [world for _, world, _, _ in _starts(out)]
    # ceil(4 x 0.3 / 0.8) = 2, then ceil(2 x 0.3 / 0.8) = 1 if it runs that long, never back up: elastic-grow
    # leaves a job with a target to it
    assert worlds[:2] == [4, 2] and worlds == sorted(worlds, reverse=True) and len(worlds) <= 3


@pytest.mark.parametrize("body, field", [
    ({"min_tasks": 2}, "min_tasks"),
    ({"min_tasks": 2, "max_tasks": 4, "tasks": 8}, "outside the elastic range"),
    ({"target_gpu_util": 0.5}, "target_gpu_util"),
    ({"min_tasks": 1, "max_tasks": 2, "target_gpu_util": 1.5}, "target_gpu_util"),
])
def test_a_bad_elastic_submission_is_refused_naming_the_field(tmp_path: Path, body: dict[str, Any],
                                                               field: str) -> None:
    from trimtab.serve.intake.submission import SubmissionError, spec_from_dict

    with pytest.raises(SubmissionError, match=field):
        spec_from_dict({"command": ["true"], **body})


def test_the_scaling_curve_is_learned_from_reports_and_a_bad_report_is_ignored(tmp_path: Path) -> None:
    from trimtab.serve.run.progress import LiveScaling, Telemetry, read_report, telemetry_of

    scaling = LiveScaling()
    assert scaling.throughput(4, 1) == 4.0  # nothing reported: linear
    assert scaling.observe(Telemetry(2, 0.0, 200.0)) and scaling.throughput(4, 1) == 400.0  # one count: linear
    scaling.observe(Telemetry(4, 1.0, 300.0))
    assert (scaling.throughput(1, 1), scaling.throughput(3, 1), scaling.throughput(6, 2)) == (100.0, 250.0, 400.0)
    scaling.observe(Telemetry(4, 2.0, 200.0))  # a running mean: 300 then 200
    assert scaling.throughput(4, 1) == 250.0 and scaling.throughput(8, 2) == 350.0  # the slope of the last two
    assert LiveScaling(target_gpu_util=0.8).throughput(8, 2) == 1.0  # sized by its target alone
    report = tmp_path / "progress.json"
    report.write_text('{"samples_per_s": -1, "batch_size": true, "gpu_util": 0.5}')
    found = read_report(report)
    assert found is not None and telemetry_of(found, 2, 0.0) == Telemetry(2, 0.0, None, 0, 0.5)
    report.write_text("{half")
    assert read_report(report) is None
    (tmp_path / "link.json").symlink_to(report)
    report.write_text("{}")
    assert read_report(tmp_path / "link.json") is None  # never through a link


def test_a_manifest_with_a_gpu_range_annotation_is_an_elastic_submission() -> None:
    from trimtab.serve.intake.submission import read_manifest

    spec = read_manifest("""
apiVersion: batch/v1
kind: Job
metadata: {name: train, annotations: {trimtab.io/gpus: "2-6"}}
spec:
  parallelism: 2
  template:
    spec:
      containers:
        - {name: main, command: [python, train.py], resources: {limits: {nvidia.com/gpu: 1}}}
""")
    assert (spec.tasks, spec.min_tasks, spec.max_tasks) == (2, 2, 6)


def test_a_job_reports_its_progress_over_the_api_with_a_token_of_its_tenant(tmp_path: Path) -> None:
    server = Server(tmp_path / "data", "--gpus", "2").start()
    try:
        admin = server.client()
        ours = admin.post("/v1/tokens", json={"tenant": "team-a"}).json()["token"]
        theirs = admin.post("/v1/tokens", json={"tenant": "team-b"}).json()["token"]
        with server.client(ours) as client:
            job = client.post("/v1/jobs", json={"command": ["sleep", "30"], "gpus": 1, "tasks": 1, "min_tasks": 1,
                                                "max_tasks": 2}).json()
            url = f"/v1/jobs/{job['id']}/progress"
            _wait(client, job["id"], lambda found: found["state"] == "running" and found["runs"])
            answer = client.post(url, json={"samples_per_s": 123.5, "batch_size": 64, "gpu_util": 0.25})
            assert answer.status_code == 200 and answer.json() == {"id": job["id"], "attempt": 1, "gpus": 1}
            assert client.post(url, json={"gpu_util": 1.5}).status_code == 422
            assert client.post(url, json={"loss": 0.1}).status_code == 422
            metrics = admin.get("/metrics").text
            assert f'trimtab_job_samples_per_second{{job="{job["id"]}",tenant="team-a"}} 123.5' in metrics
            assert f'trimtab_job_batch_size{{job="{job["id"]}",tenant="team-a"}} 64.0' in metrics
            client.post(f"/v1/jobs/{job['id']}/cancel")
            _wait(client, job["id"], lambda found: found["state"] == "cancelled")
            assert client.post(url, json={"samples_per_s": 1.0}).status_code == 409
        with server.client(theirs) as other:
            assert other.post(url, json={"samples_per_s": 1.0}).status_code == 404  # not its job
        with server.client("") as nobody:
            assert nobody.post(url, json={"samples_per_s": 1.0}).status_code == 401
    finally:
        server.stop()


def test_under_steady_an_elastic_job_starts_below_its_request_on_the_gpus_free(tmp_path: Path) -> None:
    """The default profile's `elastic-grow` has `start_below`: a 1-4 job asking 4 while a fixed job holds 2 of the
    4 GPUs starts at once on the 2 free, with WORLD_SIZE 2, and runs its tasks on GPUs nobody else holds."""
    out = tmp_path / "out"
    out.mkdir()
    server = Server(tmp_path / "data", "--gpus", "4").start()
    try:
        client = server.client()
        fixed = client.post("/v1/jobs", json={"command": task_command(out, 4.0), "gpus": 1, "tasks": 2}).json()
        _wait(client, fixed["id"], lambda job: job["state"] == "running" and job["runs"])
        elastic = client.post("/v1/jobs", json={"command": task_command(out, 0.5), "gpus": 1, "tasks": 4,
                                                "min_tasks": 1, "max_tasks": 4}).json()
        started = _wait(client, elastic["id"], lambda job: job["state"] == "running" and job["runs"])
        assert len(started["runs"]) == 2  # at once, on the two GPUs free, while the fixed job still runs
        jobs = wait_all_terminal(client, 2, 30)
        assert [job["state"] for job in jobs] == ["completed", "completed"]
        assert not overlapping(_spans(out)), "a GPU held by two tasks"
        assert {path.name.split(".")[1] for path in out.glob(f"{elastic['id']}.*.1")} == {"0", "1"}
    finally:
        server.stop()
