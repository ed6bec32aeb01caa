"""The local executor: one process group per task on this machine, pinned to its GPUs by CUDA_VISIBLE_DEVICES.

Each task runs under a small wrapper (task_wrapper.py, this interpreter's, in an environment of its own) that runs
the command as the task's user and writes its pid and, at the end, its exit code into the task's run folder, so a
task that ends while the daemon is down still tells how it ended, whatever the job's environment. A task whose
machine restarted under it (another boot id than at its launch) is reported lost with its node."""

from __future__ import annotations

import contextlib
import marshal
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trimtab.serve.executors.base import Adoption, Executor, TaskExit, TaskLaunch, begin_stop
from trimtab.serve.executors.task_wrapper import SPEC

WRAPPER = Path(__file__).with_name("task_wrapper.py")  # run by this interpreter, isolated: see its docstring
# What a task of a tenant with its own Unix user keeps of the server's environment (a task of the server's own
# user keeps all of it): where programs and libraries are, the locale and the time zone; nothing that might be a
# secret of the server.
KEPT_VARS = ("PATH", "LD_LIBRARY_PATH", "LANG", "LANGUAGE", "TZ")
RUN_ID_VAR = "TRIMTAB_RUN_ID"
# The wrapper's tag: its run dir, unique to one server's data dir, where a run id is unique only within one server
RUN_DIR_VAR = "TRIMTAB_RUN_DIR"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")  # changes at every boot of the machine


def boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


def process_start_ticks(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks after boot (field 22 of /proc/PID/stat); None if there is
    no such process or it is a zombie. With the pid it identifies a process for good: a recycled pid has a
    later start time."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2:].split()
    if fields[0] == b"Z":
        return None
    return int(fields[19])


def _environ_has(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


def _find_by_marker(run_dir: Path) -> int | None:
    """The pid of a process group leader tagged with TRIMTAB_RUN_DIR=run_dir (a task wrapper), if any (a /proc
    scan: used only in recovery, for a task launched just before a crash). The run dir, not the run id: another
    server on this machine, with its own data dir, has runs of the same ids."""
    marker = f"{RUN_DIR_VAR}={run_dir}".encode()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            pid = int(entry.name)
            if _environ_has(pid, marker) and os.getpgid(pid) == pid:
                return pid
    return None


def _group_alive(pgid: int) -> bool:
    """Whether process group `pgid` has a member that is not a zombie (a zombie holds no GPU; it only waits for
    an init process to reap it, which some container inits do slowly)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


@dataclass(slots=True)
class _Tracked:
    pid: int
    start_ticks: int | None
    run_dir: Path
    popen: subprocess.Popen[bytes] | None
    kill_at_s: float | None = None
    ended_code: int | None = None
    ended: bool = False
    lost: bool = False  # gone without an exit code across a restart of the machine: lost with its node


class LocalExecutor(Executor):
    """Runs each task as its own process group (session) on this machine.

    The task's stdout and stderr go, interleaved, to `task.log_path`. A task is reported ended when its wrapper
    has exited; anything left in its process group is then killed, so nothing of a finished task keeps a GPU."""

    name = "local"

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tasks: dict[str, _Tracked] = {}

    def validate(self, argv: tuple[str, ...]) -> str | None:
        if not argv or not argv[0]:
            return "the command is empty"
        program = argv[0]
        if os.sep in program:
            if not (os.path.isfile(program) and os.access(program, os.X_OK)):
                return f"command {program!r} is not an executable file on the server"
            return None
        if shutil.which(program) is None:
            return f"command {program!r} was not found on the server's PATH"
        return None

    def launch(self, task: TaskLaunch) -> dict[str, Any]:
        task.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        task.log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        for stale in ("pid", "exit", "error"):
            (task.run_dir / stale).unlink(missing_ok=True)
        _write_private(task.run_dir / SPEC, marshal.dumps(launch_spec(task)))
        log = os.open(task.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        try:
            popen = subprocess.Popen(
                [sys.executable, "-I", "-S", str(WRAPPER), str(task.run_dir)], stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, cwd="/",
                env={"PATH": os.defpath, RUN_ID_VAR: task.run_id, RUN_DIR_VAR: str(task.run_dir)},
                start_new_session=True, close_fds=True,
            )
        finally:
            os.close(log)
        ticks = process_start_ticks(popen.pid)
        self._tasks[task.run_id] = _Tracked(popen.pid, ticks, task.run_dir, popen)
        return {"pid": popen.pid, "start_ticks": ticks, "boot_id": boot_id()}

    def stop(self, run_id: str, grace_s: float) -> None:
        tracked = self._tasks.get(run_id)
        if tracked is not None:
            begin_stop(tracked, self._clock(), grace_s,
                       lambda kill: self._signal(tracked, signal.SIGKILL if kill else signal.SIGTERM))

    def poll(self) -> list[TaskExit]:
        now = self._clock()
        exits: list[TaskExit] = []
        for run_id, tracked in list(self._tasks.items()):
            if not self._leader_done(tracked):
                if tracked.kill_at_s is not None and now >= tracked.kill_at_s:
                    self._signal(tracked, signal.SIGKILL)
                continue
            if self._leftovers(tracked):
                self._signal(tracked, signal.SIGKILL)  # leftovers of a finished task must not keep its GPUs
                if self._leftovers(tracked):
                    continue
            code = self._exit_code(tracked)
            del self._tasks[run_id]
            if tracked.lost and code is None:
                exits.append(TaskExit(run_id, None, "the machine restarted under it", lost=True))
            else:
                exits.append(TaskExit(run_id, code, _start_error(tracked.run_dir) if code is not None
                                      else "killed or vanished"))
        return exits

    def adopt(self, task: TaskLaunch, handle: Mapping[str, Any] | None) -> Adoption:
        pid_file, exit_file = task.run_dir / "pid", task.run_dir / "exit"
        pid: int | None = None
        ticks: int | None = None
        if handle is not None:
            pid, ticks = int(handle["pid"]), handle.get("start_ticks")
        elif pid_file.exists():
            pid = _read_int(pid_file)
            if pid is not None and not _environ_has(pid, f"{RUN_ID_VAR}={task.run_id}".encode()):
                pid = None  # recycled pid: that process is not our task
            ticks = process_start_ticks(pid) if pid is not None else None
        else:
            pid = _find_by_marker(task.run_dir)  # launched, but the wrapper had not yet written its pid
            ticks = process_start_ticks(pid) if pid is not None else None
            if pid is None and not exit_file.exists():
                return Adoption.NEVER_STARTED
        tracked = _Tracked(pid or -1, ticks, task.run_dir, None)
        alive = pid is not None and ticks is not None and process_start_ticks(pid) == ticks
        if not alive:
            tracked.ended = True
            launched_boot = handle.get("boot_id") if handle is not None else None
            tracked.lost = bool(launched_boot) and launched_boot != boot_id()
        self._tasks[task.run_id] = tracked
        return Adoption.RUNNING if alive else Adoption.ENDED

    def close(self) -> None:
        self._tasks.clear()  # the tasks keep running; a restarted daemon adopts them

    # ------------------------------------------------------------------------------------------------ inner

    def _leader_done(self, tracked: _Tracked) -> bool:
        if tracked.ended:
            return True
        if tracked.popen is not None:
            code = tracked.popen.poll()
            if code is None:
                return False
            tracked.ended, tracked.ended_code = True, code
            return True
        if process_start_ticks(tracked.pid) != tracked.start_ticks:
            tracked.ended = True
        return tracked.ended

    def _leftovers(self, tracked: _Tracked) -> bool:
        """Whether processes of a task whose leader ended are still in its process group. Linux never hands out
        a pid still used as a process-group id, so a live process under the old pid that is not ours means the
        group is gone (and that process must not be touched)."""
        if tracked.pid <= 0:
            return False
        if tracked.popen is None and process_start_ticks(tracked.pid) is not None:
            return False
        return _group_alive(tracked.pid)

    def _exit_code(self, tracked: _Tracked) -> int | None:
        written = _read_int(tracked.run_dir / "exit")
        if written is not None:
            return written
        if tracked.popen is not None and tracked.ended_code is not None and tracked.ended_code >= 0:
            return tracked.ended_code
        return None

    def _signal(self, tracked: _Tracked, sig: signal.Signals) -> None:
        if tracked.pid <= 0:
            return
        if tracked.popen is None:
            current = process_start_ticks(tracked.pid)
            if current is not None and current != tracked.start_ticks:
                return  # that pid is another process now
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(tracked.pid, sig)


def launch_spec(task: TaskLaunch) -> dict[str, Any]:
    """What the wrapper runs: the command with the task's environment over the server's (all of it for the
    server's own user, `KEPT_VARS` for a tenant's user), in the task's working directory, as the task's user."""
    if task.user is None:
        base = dict(os.environ)
    else:
        base = {k: v for k, v in os.environ.items() if k in KEPT_VARS or k.startswith("LC_")}
    user = None if task.user is None else {"uid": task.user.uid, "gid": task.user.gid}
    return {"argv": list(task.argv), "env": {**base, **task.env, RUN_ID_VAR: task.run_id}, "cwd": task.workdir,
            "user": user, "make_dirs": list(task.make_dirs), "log_max_bytes": task.log_max_bytes}


def _write_private(path: Path, data: bytes) -> None:
    """Write a file only the server can read (it may hold a job's secrets), replacing any former one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _start_error(run_dir: Path) -> str:
    """Why the wrapper could not start the command ("" if it did)."""
    try:
        return "could not start: " + (run_dir / "error").read_text().strip()
    except OSError:
        return ""


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
