"""The local executor: one process group per task on this machine, pinned to its GPUs by CUDA_VISIBLE_DEVICES.

Each task runs under a tiny /bin/sh wrapper that writes its pid and, at the end, its exit code into the task's
run folder, so a task that ends while the daemon is down still tells how it ended. A task whose machine restarted
under it (another boot id than at its launch) is reported lost with its node."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trimtab.serve.executors.base import Adoption, Executor, TaskExit, TaskLaunch, begin_stop

# $1 is the run folder; the rest is the command. The wrapper traps TERM with a no-op (not '' : an ignored signal
# would be inherited as ignored by the command), so a stop's SIGTERM reaches the command while the wrapper waits for
# it and records how it ended. The exit code is written atomically (rename) so a reader never sees half a number.
# Killed by SIGKILL, the wrapper writes nothing: the task then counts as vanished.
WRAPPER = (
    'trap ":" TERM; D="$1"; shift; echo $$ > "$D/pid.tmp" && mv "$D/pid.tmp" "$D/pid"; "$@"; rc=$?; '
    'echo $rc > "$D/exit.tmp" && mv "$D/exit.tmp" "$D/exit"; exit $rc'
)
RUN_ID_VAR = "TRIMTAB_RUN_ID"
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


def _find_by_marker(run_id: str) -> int | None:
    """The pid of a process group leader tagged with TRIMTAB_RUN_ID=run_id, if any (a /proc scan: used only in
    recovery, for a task launched just before a crash)."""
    marker = f"{RUN_ID_VAR}={run_id}".encode()
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
        task.run_dir.mkdir(parents=True, exist_ok=True)
        task.log_path.parent.mkdir(parents=True, exist_ok=True)
        for stale in ("pid", "exit"):
            (task.run_dir / stale).unlink(missing_ok=True)
        env = {**os.environ, **task.env, RUN_ID_VAR: task.run_id}
        with open(task.log_path, "ab") as log:
            popen = subprocess.Popen(
                ["/bin/sh", "-c", WRAPPER, "trimtab-task", str(task.run_dir), *task.argv],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                cwd=task.workdir or None, start_new_session=True, close_fds=True,
            )
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
                exits.append(TaskExit(run_id, code, "" if code is not None else "killed or vanished"))
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
            pid = _find_by_marker(task.run_id)  # launched, but the wrapper had not yet written its pid
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


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
