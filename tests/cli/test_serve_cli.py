"""The CLI client and GPU shares, against a real `trimtab serve` on one virtual GPU of 80 GiB: `trimtab submit
--gpu-milli` submits a share, `trimtab nodes` lists every job on a GPU with its share, `trimtab jobs` / `job` show
a share's request; options that cannot make a share are refused before anything is sent, the server's refusals
come through."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import Result
from serve_helpers import Server, trimtab

CLUSTER = "1x1:h100-80gb"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("cli") / "data", "--cluster", CLUSTER).start()
    yield server
    server.stop()



def submitted(result: Result) -> int:
    assert result.exit_code == 0, result.stderr
    return int(json.loads(result.stdout)["id"])


def wait_states(admin: httpx.Client, states: dict[int, str], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = {j: admin.get(f"/v1/jobs/{j}").json()["state"] for j in states}
        if now == states:
            return
        time.sleep(0.1)
    raise AssertionError(f"jobs are {now}, not {states}")


def row_of(table: str, job_id: int) -> str:
    [row] = [line for line in table.splitlines() if re.match(rf"^\W*{job_id}\b", line)]
    return row


def test_two_half_gpu_jobs_submitted_with_the_cli_are_both_listed_on_gpu_0(server: Server,
                                                                           admin: httpx.Client) -> None:
    """Two `--gpu-milli 500` jobs run at once on the one GPU and `trimtab nodes` names both with their shares; a
    third share (with an explicit `--gpus 0`) waits for room; `jobs` and `job` show the requests as shares."""
    a = submitted(trimtab(server, "submit", "--gpu-milli", "500", "--name", "half-a", "--json", "--", "sleep", "30"))
    b = submitted(trimtab(server, "submit", "--gpu-milli", "500", "--name", "half-b", "--json", "--", "sleep", "30"))
    c = submitted(trimtab(server, "submit", "--gpus", "0", "--gpu-milli", "250", "--tasks", "1", "--name",
                          "quarter", "--json", "--", "sleep", "30"))
    try:
        wait_states(admin, {a: "running", b: "running", c: "pending"})

        nodes = trimtab(server, "nodes")
        assert nodes.exit_code == 0, nodes.stderr
        assert re.search(rf"0: ({a} \(0\.5\), {b}|{b} \(0\.5\), {a}) \(0\.5\)", nodes.stdout), nodes.stdout
        assert "h100-80gb" in nodes.stdout
        as_json = json.loads(trimtab(server, "nodes", "--json").stdout)
        assert as_json == admin.get("/v1/nodes").json(), "--json prints what the API returns"
        [gpu] = as_json["nodes"][0]["devices"]
        assert sorted((h["job_id"], h["milli"]) for h in gpu["jobs"]) == [(a, 500), (b, 500)]

        jobs = trimtab(server, "jobs").stdout
        assert "0.5 GPU" in row_of(jobs, a) and "0.5 GPU" in row_of(jobs, b)
        assert "0.25 GPU" in row_of(jobs, c) and "pending" in row_of(jobs, c)
        shown = trimtab(server, "job", str(a))
        assert shown.exit_code == 0 and "1 x 0.5 GPU;" in shown.stdout, shown.stdout
        assert json.loads(trimtab(server, "job", str(c), "--json").stdout)["gpu_milli"] == 250
        queues = trimtab(server, "queues").stdout
        assert re.search(r"default\W+1\W+2\W+1\W", queues), queues  # 1 pending, 2 running, 1 GPU held (2 x 0.5)
    finally:
        for job_id in (a, b, c):
            trimtab(server, "cancel", str(job_id))
        wait_states(admin, {a: "cancelled", b: "cancelled", c: "cancelled"})
    nodes = trimtab(server, "nodes").stdout
    assert "0: -" in nodes, nodes


@pytest.mark.parametrize("options, message", [
    (["--gpu-milli", "500", "--gpus", "1"], "give --gpus (whole GPUs) or --gpu-milli (a share of one GPU), not both"),
    (["--gpus", "2", "--gpu-milli", "500"], "not both"),
    (["--gpu-milli", "0"], "1 to 999, not 0"),
    (["--gpu-milli", "1000"], "1 to 999, not 1000 (whole GPUs: --gpus N)"),
    (["--gpu-milli", "-5"], "1 to 999, not -5"),
], ids=["gpus-1", "gpus-2", "zero", "a-whole-gpu", "negative"])
def test_a_share_option_that_cannot_be_a_share_is_refused_before_anything_is_sent(
        server: Server, admin: httpx.Client, options: list[str], message: str) -> None:
    before = len(admin.get("/v1/jobs").json()["jobs"])
    result = trimtab(server, "submit", *options, "--", "true")
    assert result.exit_code == 2, result.stdout
    assert message in " ".join(result.stderr.split()) and "HTTP" not in result.stderr
    assert len(admin.get("/v1/jobs").json()["jobs"]) == before


def test_a_manifest_asks_for_a_share_in_its_annotation_not_with_the_option(server: Server, admin: httpx.Client,
                                                                          tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
                        "spec: {containers: [{name: c, image: i, command: ['true']}]}\n")
    before = len(admin.get("/v1/jobs").json()["jobs"])
    result = trimtab(server, "submit", "--gpu-milli", "500", str(manifest))
    assert result.exit_code == 2
    assert "trimtab.io/gpu-milli" in " ".join(result.stderr.split())
    assert len(admin.get("/v1/jobs").json()["jobs"]) == before


def test_the_server_stays_the_authority_on_what_a_share_may_ask(server: Server, admin: httpx.Client) -> None:
    """Three half-GPU tasks ask for 1.5 GPUs of a server that has 1: the CLI passes the server's 422 on."""
    before = len(admin.get("/v1/jobs").json()["jobs"])
    result = trimtab(server, "submit", "--gpu-milli", "500", "--tasks", "3", "--", "true")
    assert result.exit_code == 1
    err = " ".join(result.stderr.split())
    assert "1.5 GPUs" in err and "[gpu_milli]" in err and "HTTP 422" in err, err
    assert len(admin.get("/v1/jobs").json()["jobs"]) == before
