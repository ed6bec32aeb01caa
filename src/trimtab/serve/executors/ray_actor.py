"""The Ray actor of one task: on the node trimtab chose, it starts the job's command under a supervisor process
that takes the command's whole process group down with it, keeps its output in a node-side log, and answers
wait / read / signal from the server (RayExecutor)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

LOG_CHUNK = 1 << 20

# The process an actor starts: a session leader that runs the command in its own process group and, through
# PR_SET_PDEATHSIG, kills that whole group if the actor dies (node lost, actor killed), so no orphan of a task
# keeps its GPUs. SIGTERM (a stop) reaches the command through the group; the supervisor only waits.
SUPERVISOR = r"""
import ctypes, os, signal, subprocess, sys
def lost(*_):
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGUSR1, lost)
signal.signal(signal.SIGTERM, lambda *_: None)
ctypes.CDLL(None).prctl(1, int(signal.SIGUSR1))
if os.getppid() != int(sys.argv[1]):
    lost()
child = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL)
while True:
    try:
        code = child.wait()
        break
    except InterruptedError:
        continue
sys.exit(code if code >= 0 else 128 - code)
"""


class TaskActor:
    """Runs one task's command on its node (the body of the Ray actor class). Threaded: `wait` blocks while
    `read` and `signal` answer."""

    def __init__(self, run_id: str, log_dir: str) -> None:
        import tempfile
        import threading

        self.run_id = run_id
        os.makedirs(log_dir, exist_ok=True)
        fd, self.log_path = tempfile.mkstemp(prefix=f"{run_id}-", suffix=".log", dir=log_dir)
        os.close(fd)
        self.proc: Any = None
        self.code: int | None = None
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.stopped = False  # a stop came before the command started: it must not start

    def start(self, argv: list[str], env: dict[str, str], workdir: str | None,
              make_dirs: list[str]) -> dict[str, Any]:
        """Start the command in `workdir` once the folders `make_dirs` exist (made here, as the Ray worker's user:
        Ray tasks run as whoever started the raylet, whatever their tenant)."""
        import socket
        import subprocess
        import sys
        import threading

        full_env = {**os.environ, **env}
        try:
            for folder in make_dirs:
                os.makedirs(folder, mode=0o700, exist_ok=True)
        except OSError as exc:
            return {"error": str(exc)}
        started = threading.Event()

        def keep() -> None:  # this thread is the supervisor's parent: it lives as long as the task
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-c", SUPERVISOR, str(os.getpid()), *argv], stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=workdir or None,
                    start_new_session=True, close_fds=True)
            started.set()
            self.code = self.proc.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, 9)  # leftovers of an ended task must not keep its GPUs
            self.done.set()

        with self.lock:
            if self.stopped:
                self.done.set()
                return {"stopped": True}
            try:
                threading.Thread(target=keep, daemon=True).start()
                started.wait(30)
            except OSError as exc:
                return {"error": str(exc)}
        if self.proc is None:
            return {"error": "could not start the command"}
        return {"pid": self.proc.pid, "host": socket.gethostname()}

    def ready(self) -> bool:
        """Answers once the actor is up on its node (its gang's commands start when every actor answered)."""
        return True

    def wait(self) -> int | None:
        self.done.wait()
        return self.code

    def read(self, offset: int) -> bytes:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read(LOG_CHUNK)
        except OSError:
            return b""

    def signal(self, sig: int) -> None:
        with self.lock:
            if self.proc is None:
                self.stopped = True
                self.done.set()
                return
        if not self.done.is_set():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def finish(self) -> None:
        """The server has read everything: remove the node-side log and end this actor."""
        import ray

        with contextlib.suppress(OSError):
            os.unlink(self.log_path)
        ray.actor.exit_actor()
