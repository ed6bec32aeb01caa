"""The wrapper of one local task: `python -I -S task_wrapper.py RUN_DIR`, started by LocalExecutor as the leader of
the task's process group, with the task's log as stdout and stderr.

It reads what to run from RUN_DIR/launch.marshal (argv, env, cwd, user, folders to make), writes its pid to RUN_DIR/pid,
runs the command (as `user` when given: its uid, its group, no supplementary groups), waits for it and writes the
exit code to RUN_DIR/exit (127, and why in RUN_DIR/error, when the command could not start), so a task that ends
while the server is down still tells how it ended. It depends on nothing of the job's environment (its own
interpreter, isolated from PYTHON* variables, the standard library only), so a job's PATH or LD_PRELOAD cannot break
the record of its exit. Files are written atomically (rename), so a reader never sees half a number. A SIGTERM (a
stop) reaches the command through the process group; the wrapper only notes it and keeps waiting. Killed by SIGKILL,
the wrapper writes nothing: the task then counts as vanished.

Built-in modules only (no subprocess, json or typing: each costs tens of milliseconds to import), nothing of trimtab:
it must start fast and run with `-I -S`."""

from __future__ import annotations

import marshal
import os
import signal
import sys
import warnings  # noqa: F401 -- os.execvpe imports it, and the task's user may not read the standard library

CANNOT_START = 127  # what a shell answers for a command it cannot run
SPEC = "launch.marshal"  # written by LocalExecutor with marshal.dumps: the same interpreter reads it back
Spec = dict  # local.launch_spec: argv, env, cwd, user ({"uid", "gid"} or None), make_dirs (typing costs 20 ms)


def _write(run_dir: str, name: str, text: str) -> None:
    tmp = os.path.join(run_dir, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(f"{text}\n")
    os.replace(tmp, os.path.join(run_dir, name))


def _become(spec: Spec) -> None:
    """In the forked child: stdin from /dev/null, the task's user (no supplementary groups, its group, its uid),
    its folders, its working directory, then the command (looked up on the job's PATH, as a shell would)."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    user = spec["user"]
    if user is not None:
        os.setgroups([])
        os.setgid(user["gid"])
        os.setuid(user["uid"])
    for folder in spec["make_dirs"]:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    if spec["cwd"]:
        os.chdir(spec["cwd"])
    os.execvpe(spec["argv"][0], spec["argv"], spec["env"])


def _start(spec: Spec) -> int:
    """Fork and run the command; returns its pid. Raises OSError saying why it could not start: the child reports
    it through a pipe that closes by itself when the command starts (close-on-exec)."""
    failure, report = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(failure)
            _become(spec)
        except OSError as exc:
            where = f": {exc.filename!r}" if exc.filename else ""
            os.write(report, f"{exc.strerror or exc}{where}".encode(errors="replace"))
        finally:
            os._exit(CANNOT_START)
    os.close(report)
    with os.fdopen(failure, "rb") as pipe:
        why = pipe.read().decode(errors="replace")
    if why:
        os.waitpid(pid, 0)
        raise OSError(why)
    return pid


def run(run_dir: str) -> int:
    with open(os.path.join(run_dir, SPEC), "rb") as f:
        spec = marshal.load(f)
    _write(run_dir, "pid", str(os.getpid()))
    signal.signal(signal.SIGTERM, lambda *_: None)  # a handler, not SIG_IGN: the command must not inherit it ignored
    try:
        child = _start(spec)
    except OSError as exc:
        message = f"{spec['argv'][0]!r}: {exc}"
        sys.stderr.write(f"trimtab: could not start {message}\n")
        _write(run_dir, "error", message)
        code = CANNOT_START
    else:
        _, status = os.waitpid(child, 0)
        code = os.waitstatus_to_exitcode(status)
        code = code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a shell reports it
    _write(run_dir, "exit", str(code))
    return code


if __name__ == "__main__":
    sys.exit(run(sys.argv[1]))
