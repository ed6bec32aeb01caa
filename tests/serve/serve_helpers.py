"""Helpers of the serve tests: a real `trimtab serve` process on a free loopback port, an HTTP client with its
admin token, and the checks shared by the end-to-end, crash and PostgreSQL tests."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from click.testing import Result

SRC = Path(__file__).resolve().parents[2] / "src"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """`trimtab serve` in a child process. `start()` waits until /healthz answers; `kill()` is SIGKILL. `entry` is
    the module run with -m: `trimtab.serve` or `trimtab.cli` (the same commands). Run as root, the server is told
    `--shared-identity` (tasks write into the test's private folders) unless `isolated`."""

    def __init__(self, data_dir: Path, *args: str, db: str | None = None, port: int | None = None,
                 env: dict[str, str] | None = None, entry: str = "trimtab.serve", isolated: bool = False) -> None:
        self.entry = entry
        self.data_dir = data_dir
        self.env = env or {}
        shared = os.geteuid() == 0 and not isolated
        self.args = [*args, "--shared-identity"] if shared else list(args)
        self.db = db
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data_dir.parent / f"{data_dir.name}-server.log"

    def start(self, timeout_s: float = 30.0) -> Server:
        cmd = [sys.executable, "-m", self.entry, "serve", "--data-dir", str(self.data_dir), "--port",
               str(self.port), "--grace-s", "2", *self.args]
        if self.db:
            cmd += ["--db", self.db]
        env = {**os.environ, "PYTHONPATH": str(SRC), **self.env}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"server did not answer in {timeout_s} s:\n{self.log.read_text()[-3000:]}")

    @property
    def admin_token(self) -> str:
        return (self.data_dir / "admin.token").read_text().strip()

    def client(self, token: str | None = None) -> httpx.Client:
        token = self.admin_token if token is None else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def task_command(out_dir: Path, sleep_s: float, record_env: bool = False) -> list[str]:
    """A task that records its job, rank, CUDA_VISIBLE_DEVICES and run interval in `out_dir/<job>.<rank>.<attempt>`
    and appends one line per completed run to `out_dir/marker.<job>` (exactly-once checks). With `record_env`, its
    CUDA_* and TRIMTAB_GPU_* variables go to `out_dir/env/<job>.<rank>.<attempt>` (see `task_env`)."""
    dump = 'mkdir -p "$0/env"; env | grep -E "^(CUDA_|TRIMTAB_GPU)" | sort > "$0/env/${f##*/}"; ' if record_env else ""
    script = (
        'f="$0/$TRIMTAB_JOB_ID.$RANK.$TRIMTAB_ATTEMPT"; ' + dump +
        'echo "$TRIMTAB_JOB_ID $RANK $CUDA_VISIBLE_DEVICES $(date +%s.%N)" > "$f"; '
        f"sleep {sleep_s}; "
        'echo "$(date +%s.%N)" >> "$f"; '
        'if [ "$RANK" = 0 ]; then echo done >> "$0/marker.$TRIMTAB_JOB_ID"; fi'
    )
    return ["sh", "-c", script, str(out_dir)]


def wait_all_terminal(client: httpx.Client, expected: int, timeout_s: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    jobs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        jobs = client.get("/v1/jobs", params={"limit": 10000}).json()["jobs"]
        if len(jobs) >= expected and all(j["state"] in ("completed", "failed", "cancelled") for j in jobs):
            return jobs
        time.sleep(0.5)
    states = defaultdict(int)
    for j in jobs:
        states[j["state"]] += 1
    raise AssertionError(f"not all {expected} jobs ended in {timeout_s} s: {dict(states)}")


def overlapping(intervals: Iterable[tuple[str, float, float, str]]) -> list[tuple[str, str, str]]:
    """Pairs of holders whose intervals on the same GPU overlap: [(gpu, holder a, holder b)]."""
    by_gpu: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for gpu, start, end, holder in intervals:
        by_gpu[gpu].append((start, end, holder))
    bad = []
    for gpu, spans in by_gpu.items():
        spans.sort()
        for (_s0, e0, h0), (s1, _e1, h1) in itertools.pairwise(spans):
            if s1 < e0:
                bad.append((gpu, h0, h1))
    return bad


def task_env(out_dir: Path, job_id: int, rank: int = 0, attempt: int = 1) -> dict[str, str]:
    """The CUDA_* and TRIMTAB_GPU_* variables a task recorded (`task_command(..., record_env=True)`)."""
    text = (out_dir / "env" / f"{job_id}.{rank}.{attempt}").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def overcommitted(intervals: Iterable[tuple[str, float, float, str]], milli_of: dict[str, int]
                  ) -> list[tuple[str, float, int]]:
    """Moments when the holders of one GPU held more than 1000 milli together: [(gpu, time, milli)].
    `milli_of[holder]` is what each holder ("job.x.y" or "job.rank.attempt": keyed by its job id, the part before
    the first dot) holds of each of its GPUs."""
    events: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for gpu, start, end, holder in intervals:
        milli = milli_of[holder.split(".")[0]]
        events[gpu] += [(start, milli), (end, -milli)]
    bad = []
    for gpu, changes in events.items():
        held = 0
        for t, delta in sorted(changes, key=lambda c: (c[0], c[1])):  # at equal times, ends first
            held += delta
            if held > 1000:
                bad.append((gpu, t, held))
    return bad


def task_intervals(out_dir: Path) -> list[tuple[str, float, float, str]]:
    """(gpu, start, end, "job.rank.attempt") from the files written by `task_command`; unfinished ones are left
    out (a killed attempt)."""
    found = []
    for path in out_dir.glob("*.*.*"):
        lines = path.read_text().split("\n")
        if len(lines) < 2 or not lines[1].strip():
            continue
        head = lines[0].split()
        gpus = head[2].split(",") if len(head) == 4 else []
        start, end = float(head[-1]), float(lines[1])
        found.extend((g, start, end, path.name) for g in gpus)
    return found


def run_intervals(jobs: list[dict[str, Any]]) -> list[tuple[str, float, float, str]]:
    """(node/gpu, start, end, "job.attempt.rank") of every run the store recorded."""
    return [(f"{r['node']}/{g}", r["start_s"], r["end_s"] or time.time(), f"{j['id']}.{r['attempt']}.{r['rank']}")
            for j in jobs for r in j["runs"] for g in r["gpus"]]


def submit_mix(client: httpx.Client, out_dir: Path, count: int, seed: int, sleep_s: float = 0.1) -> list[int]:
    """`count` jobs of 1 to 4 GPUs, one in five a gang of 2 tasks; returns the accepted ids."""
    import random

    rng = random.Random(seed)
    ids = []
    for i in range(count):
        tasks = 2 if i % 5 == 0 else 1
        gpus = rng.randint(1, 2) if tasks == 2 else rng.randint(1, 4)
        spec = {"name": f"j{i}", "command": task_command(out_dir, sleep_s), "gpus": gpus, "tasks": tasks}
        r = client.post("/v1/jobs", json=spec)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return ids


def trimtab(server: Server, *args: str) -> Result:
    """The CLI in-process (Typer's runner), over real HTTP to `server` with its admin token."""
    from typer.testing import CliRunner

    from trimtab.cli import app

    env = {"TRIMTAB_SERVER": server.url, "TRIMTAB_TOKEN": server.admin_token, "HOME": str(server.data_dir.parent)}
    return CliRunner().invoke(app, list(args), env=env)


OLD_JOB = ("INSERT INTO jobs (name, tenant, user, state, priority, priority_class, tasks, gpus_per_task, cpu_milli, "
           "mem_mib, gpu_models, node_selector, command, env, max_retries, attempts, failures, preemptions, "
           "submit_s, reason, cancel_requested) VALUES ('old', 'default', '', 'pending', 0, '', 1, 2, 0, 0, '[]', "
           "'%s', '[\"true\"]', '{}', 0, 0, 0, 0, 1.0, '', 0)")  # a 2-GPU job as the first schemas stored it


def store_at_revision(db: Path, revision: str, *inserts: str) -> Any:
    """A Store whose schema stops at migration `revision`, holding the rows `inserts` add: what an older server
    left behind, for the tests of the upgrade that follows (`store.upgrade()`)."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import text

    from trimtab.serve.store import MIGRATIONS_DIR, Store, sqlite_url

    store = Store(sqlite_url(db))
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with store.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
        for insert in inserts:
            connection.execute(text(insert))
    return store
