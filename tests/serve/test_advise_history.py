"""advise against a live `trimtab serve`: it reads the jobs' history through the API (GET /v1/nodes, /v1/jobs),
diagnoses where the GPU-hours went, replays the history under candidates and writes the recommended profile."""

from __future__ import annotations

import json
from pathlib import Path

from serve_helpers import Server, task_command, wait_all_terminal
from typer.testing import CliRunner

from trimtab.cli import app
from trimtab.losses import CAUSES


def test_advise_works_from_a_live_servers_history(tmp_path: Path) -> None:
    """Strict FIFO on 4 GPUs: a gang of 4 at the head holds back the 1-GPU jobs behind it while GPUs idle."""
    (tmp_path / "out").mkdir()
    server = Server(tmp_path / "data", "--gpus", "4", "--policy", "fifo").start()
    try:
        with server.client() as client:
            for i in range(8):
                spec = {"name": f"j{i}", "command": task_command(tmp_path / "out", 0.4 if i % 4 else 0.2),
                        "gpus": 1, "tasks": 4 if i % 4 == 1 else 1}
                assert client.post("/v1/jobs", json=spec).status_code == 201
            wait_all_terminal(client, 8, timeout_s=60)
        result = CliRunner().invoke(app, ["advise", "--server", server.url, "--token", server.admin_token, "--json",
                                          "--seeds", "1", "--workers", "1", "--window-s", "1",
                                          "--out", str(tmp_path / "advice")])
    finally:
        server.stop()
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert list(doc) == ["baseline", "causes", "candidates", "recommended"]
    assert doc["baseline"]["jobs_submitted"] == 8 and set(doc["baseline"]["lost_gpu_hours"]) == set(CAUSES)
    assert [c["cause"] for c in doc["causes"]] and len(doc["causes"]) == len(CAUSES)
    assert doc["recommended"]["bottleneck"] == "blocking", doc["causes"]
    assert any(c["cause"] == "blocking" for c in doc["candidates"])
    assert Path(doc["recommended"]["path"]).read_text().startswith("name: ")
    assert all(Path(p).exists() for p in doc["recommended"]["record"])
