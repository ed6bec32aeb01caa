"""The wrapper of one local task: `python -I -S task_wrapper.py RUN_DIR`, started by LocalExecutor as the leader of
the task's process group, with the task's log as stdout and stderr.

It reads what to run from RUN_DIR/launch.marshal (argv, env, cwd, user, folders to make), writes its pid to RUN_DIR/pid,
runs the command (as `user` when given: its uid, its group, no supplementary groups), waits for it and writes the
exit code to RUN_DIR/exit (127, and why in RUN_DIR/error, when the command could not start), so a task that ends
while the server is down still tells how it ended. It depends on nothing of the job's environment (its own
interpreter, isolated from PYTHON* variables, the standard library only), so a job's PATH or LD_PRELOAD cannot break
the record of its exit. Files are written atomically (rename), so a reader never sees half a number. A SIGTERM (a
stop) reaches the command through the process group; the wrapper only notes it and keeps waiting. Killed by SIGKILL,
the wrapper writes nothing: the task then counts as vanished. With a `log_max_bytes` in the spec, the command's
output comes to the wrapper through a pipe and the log keeps its first `log_max_bytes` bytes, then one line saying
it was cut; the rest is read and dropped, so the command never blocks on a full pipe.

Built-in modules only (no subprocess, json or typing: each costs tens of milliseconds to import), nothing of trimtab:
it must start fast and run with `-I -S`."""

from __future__ import annotations

import marshal
import os
import select
import signal
import sys
import warnings  # noqa: F401 -- os.execvpe imports it, and the task's user may not read the standard library

CANNOT_START = 127  # what a shell answers for a command it cannot run
SPEC = "launch.marshal"  # written by LocalExecutor with marshal.dumps: the same interpreter reads it back
Spec = dict  # local.launch_spec: argv, env, cwd, user ({"uid", "gid"} or None), make_dirs, log_max_bytes (int or
# None); typing costs 20 ms
QUIET_S = 0.2  # once the command has ended, output is read until the pipe is quiet this long (or closed)


def cut_notice(cap: int) -> bytes:
    """The line a log over its cap ends with (the Ray executor cuts its logs with the same line)."""
    return f"\ntrimtab: log cut at {cap} bytes (max_task_log_bytes); the rest is dropped\n".encode()


def _write(run_dir: str, name: str, text: str) -> None:
    tmp = os.path.join(run_dir, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(f"{text}\n")
    os.replace(tmp, os.path.join(run_dir, name))


def _become(spec: Spec, output: int | None) -> None:
    """In the forked child: stdin from /dev/null, stdout and stderr to `output` (when given), the task's user (no
    supplementary groups, its group, its uid), its folders, its working directory, then the command (looked up on
    the job's PATH, as a shell would)."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if output is not None:
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
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


def _start(spec: Spec, output: int | None) -> int:
    """Fork and run the command (its output to `output` when given); returns its pid. Raises OSError saying why it
    could not start: the child reports it through a pipe that closes by itself when the command starts
    (close-on-exec)."""
    failure, report = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(failure)
            _become(spec, output)
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
    cap = spec.get("log_max_bytes")
    reader, output = os.pipe() if cap is not None else (None, None)
    try:
        child = _start(spec, output)
    except OSError as exc:
        message = f"{spec['argv'][0]!r}: {exc}"
        sys.stderr.write(f"trimtab: could not start {message}\n")
        _write(run_dir, "error", message)
        code = CANNOT_START
    else:
        if reader is not None and output is not None:
            os.close(output)
            status = _relay(reader, child, cap)
        else:
            _, status = os.waitpid(child, 0)
        code = os.waitstatus_to_exitcode(status)
        code = code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a shell reports it
    _write(run_dir, "exit", str(code))
    return code


def _relay(reader: int, child: int, cap: int) -> int:
    """Copy the command's output from `reader` to the log (fd 1), its first `cap` bytes and then a line saying it
    was cut, until the command has ended and the pipe is closed or quiet; returns the command's wait status."""
    poller = select.poll()
    poller.register(reader, select.POLLIN | select.POLLHUP)
    written, status = 0, None
    while True:
        ready = poller.poll(int(QUIET_S * 1000))
        data = os.read(reader, 1 << 16) if ready else b""
        if ready and not data:
            break  # every writer has closed the pipe
        if data and written < cap:
            kept = data[:cap - written]
            os.write(1, kept)
            written += len(kept)
            if written >= cap:
                os.write(1, cut_notice(cap))
        if status is None:
            done, waited = os.waitpid(child, os.WNOHANG)
            status = waited if done else None
        elif not ready:
            break  # ended, and nothing more came for QUIET_S (what is left in its group is killed after us)
    os.close(reader)
    if status is None:
        _, status = os.waitpid(child, 0)
    return status


if __name__ == "__main__":
    sys.exit(run(sys.argv[1]))
