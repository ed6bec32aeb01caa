"""The wrapper of one local task: `python -I -S task_wrapper.py RUN_DIR`, started by LocalExecutor as the leader of
the task's process group, with the task's log as stdout and stderr.

It reads what to run from RUN_DIR/launch.json (argv, env, cwd, user, folders to make), writes its pid to RUN_DIR/pid,
runs the command (as `user` when given: its uid, its group, no supplementary groups), waits for it and writes the
exit code to RUN_DIR/exit (127, and why in RUN_DIR/error, when the command could not start), so a task that ends
while the server is down still tells how it ended. It depends on nothing of the job's environment (its own
interpreter, isolated from PYTHON* variables, the standard library only), so a job's PATH or LD_PRELOAD cannot break
the record of its exit. Files are written atomically (rename), so a reader never sees half a number. A SIGTERM (a
stop) reaches the command through the process group; the wrapper only notes it and keeps waiting. Killed by SIGKILL,
the wrapper writes nothing: the task then counts as vanished.

Standard library only, and nothing imported from trimtab: it must start fast and run with `-I -S`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

CANNOT_START = 127  # what a shell answers for a command it cannot run


def _write(run_dir: str, name: str, text: str) -> None:
    tmp = os.path.join(run_dir, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(f"{text}\n")
    os.replace(tmp, os.path.join(run_dir, name))


def _start(spec: dict[str, Any]) -> subprocess.Popen[bytes]:
    """Start the command. In its process, after it became the task's user: its folders, then its working
    directory; what fails there comes back through a pipe (Popen itself only says that something failed), and
    the pipe is closed before the command runs (close_fds). Raises OSError saying why it could not start."""
    user = spec["user"]
    ids: dict[str, Any] = {} if user is None else {"user": user["uid"], "group": user["gid"], "extra_groups": []}
    failure, report = os.pipe()

    def prepare() -> None:
        try:
            for folder in spec["make_dirs"]:
                os.makedirs(folder, mode=0o700, exist_ok=True)
            if spec["cwd"]:
                os.chdir(spec["cwd"])
        except OSError as exc:
            os.write(report, str(exc).encode(errors="replace"))
            raise

    try:
        return subprocess.Popen(spec["argv"], env=spec["env"], stdin=subprocess.DEVNULL, close_fds=True,
                                preexec_fn=prepare, **ids)
    except subprocess.SubprocessError as exc:
        os.close(report)
        report = -1
        raise OSError(os.read(failure, 4096).decode(errors="replace") or str(exc)) from None
    finally:
        os.close(failure)
        if report >= 0:
            os.close(report)


def run(run_dir: str) -> int:
    with open(os.path.join(run_dir, "launch.json")) as f:
        spec = json.load(f)
    _write(run_dir, "pid", str(os.getpid()))
    signal.signal(signal.SIGTERM, lambda *_: None)  # a handler, not SIG_IGN: the command must not inherit it ignored
    try:
        child = _start(spec)
    except OSError as exc:
        message = f"{spec['argv'][0]!r}: {exc.strerror or exc}" + (f": {exc.filename!r}" if exc.filename else "")
        sys.stderr.write(f"trimtab: could not start {message}\n")
        _write(run_dir, "error", message)
        code = CANNOT_START
    else:
        code = child.wait()
        code = code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a shell reports it
    _write(run_dir, "exit", str(code))
    return code


if __name__ == "__main__":
    sys.exit(run(sys.argv[1]))
