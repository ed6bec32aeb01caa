"""Stories of the local executor with real processes: environment and logs, exit codes, stop with a grace period,
leftovers of a finished task, and re-adoption after a daemon restart by pid plus process start time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from trimtab.serve.executors.base import Adoption, TaskExit, TaskLaunch
from trimtab.serve.executors.local import LocalExecutor, boot_id, process_start_ticks


def launch_of(tmp: Path, run_id: str, argv: list[str], env: dict[str, str] | None = None) -> TaskLaunch:
    return TaskLaunch(run_id, 1, 1, 0, "n0", ("0", "3"), tuple(argv), env or {"CUDA_VISIBLE_DEVICES": "0,3"}, None,
                      tmp / "logs" / f"{run_id}.log", tmp / "runs" / run_id)


def launch_elsewhere(task: TaskLaunch) -> dict[str, object]:
    """Launch `task` from a short-lived Python process, as a daemon that then dies would: the task outlives it
    and is no child of ours."""
    code = ("import json, sys; from pathlib import Path; from trimtab.serve.executors.base import TaskLaunch; "
            "from trimtab.serve.executors.local import LocalExecutor; a = json.loads(sys.argv[1]); "
            "a['argv'] = tuple(a['argv']); a['gpu_ids'] = tuple(a['gpu_ids']); a['log_path'] = Path(a['log_path']); "
            "a['run_dir'] = Path(a['run_dir']); print(json.dumps(LocalExecutor().launch(TaskLaunch(**a))))")
    fields = {k: getattr(task, k) for k in TaskLaunch.__slots__}
    fields.update(log_path=str(task.log_path), run_dir=str(task.run_dir), env=dict(task.env))
    out = subprocess.run([sys.executable, "-c", code, json.dumps(fields)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def wait_exits(ex: LocalExecutor, count: int, timeout_s: float = 10.0) -> list[TaskExit]:
    found: list[TaskExit] = []
    deadline = time.monotonic() + timeout_s
    while len(found) < count and time.monotonic() < deadline:
        found += ex.poll()
        time.sleep(0.02)
    return found


def test_a_task_runs_in_its_own_session_with_its_environment_and_a_log(tmp_path: Path) -> None:
    ex = LocalExecutor()
    task = launch_of(tmp_path, "1.1.0", ["sh", "-c", 'echo "gpus=$CUDA_VISIBLE_DEVICES"; echo oops >&2; '
                                         'ps -o sid= -p $$; exit 3'])
    handle = ex.launch(task)
    [done] = wait_exits(ex, 1)
    assert done == TaskExit("1.1.0", 3)
    out = task.log_path.read_text().split("\n")
    assert out[:2] == ["gpus=0,3", "oops"]
    assert int(out[2]) == handle["pid"], "the task leads its own session (so its process group can be signalled)"
    assert handle["start_ticks"] is not None


def test_stop_sends_sigterm_and_sigkill_after_the_grace_period(tmp_path: Path) -> None:
    ex = LocalExecutor()
    polite = launch_of(tmp_path, "1.1.0", ["sleep", "60"])
    stubborn = launch_of(tmp_path, "2.1.0", ["sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"])
    ex.launch(polite)
    ex.launch(stubborn)
    time.sleep(0.2)
    t0 = time.monotonic()
    ex.stop("1.1.0", grace_s=5.0)
    ex.stop("2.1.0", grace_s=0.5)
    exits = {e.run_id: e for e in wait_exits(ex, 2)}
    assert set(exits) == {"1.1.0", "2.1.0"}
    assert exits["1.1.0"].exit_code == 128 + 15, "SIGTERM reached the command; the wrapper recorded it"
    assert exits["2.1.0"].exit_code is None, "SIGKILLed with its wrapper: nothing recorded"
    assert 0.4 < time.monotonic() - t0 < 4.0


def test_leftover_processes_of_a_finished_task_are_killed_before_it_counts_as_ended(tmp_path: Path) -> None:
    ex = LocalExecutor()
    marker = tmp_path / "child.pid"
    task = launch_of(tmp_path, "1.1.0", ["sh", "-c", f"sleep 60 & echo $! > {marker}; exit 0"])
    ex.launch(task)
    [done] = wait_exits(ex, 1)
    assert done.exit_code == 0
    child = int(marker.read_text())
    time.sleep(0.1)
    assert process_start_ticks(child) is None, "the background child of the task was killed"


def test_a_restarted_executor_adopts_a_running_task_and_learns_how_it_ended(tmp_path: Path) -> None:
    task = launch_of(tmp_path, "1.1.0", ["sh", "-c", "sleep 1; exit 7"])
    handle = launch_elsewhere(task)
    second = LocalExecutor()
    assert second.adopt(task, handle) is Adoption.RUNNING
    [done] = wait_exits(second, 1)
    assert done == TaskExit("1.1.0", 7)


def test_a_task_that_ended_while_the_daemon_was_down_reports_its_exit_code(tmp_path: Path) -> None:
    task = launch_of(tmp_path, "1.1.0", ["sh", "-c", "exit 5"])
    handle = launch_elsewhere(task)
    time.sleep(0.3)
    second = LocalExecutor()
    assert second.adopt(task, handle) is Adoption.ENDED
    assert wait_exits(second, 1) == [TaskExit("1.1.0", 5)]


def test_a_recycled_pid_is_not_mistaken_for_the_task(tmp_path: Path) -> None:
    """The stored handle names a pid now used by another process (different start time): the task counts as
    vanished, and the other process is left alone."""
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        task = launch_of(tmp_path, "1.1.0", ["true"])
        task.run_dir.mkdir(parents=True)
        ticks = process_start_ticks(other.pid)
        assert ticks is not None
        ex = LocalExecutor()
        assert ex.adopt(task, {"pid": other.pid, "start_ticks": ticks - 1}) is Adoption.ENDED
        assert wait_exits(ex, 1) == [TaskExit("1.1.0", None, "killed or vanished")]
        ex.stop("1.1.0", 0)
        time.sleep(0.1)
        assert other.poll() is None, "the unrelated process still runs"
    finally:
        other.kill()
        other.wait()


def test_a_task_whose_machine_restarted_under_it_is_lost_with_its_node(tmp_path: Path) -> None:
    """The handle says the task was launched in another boot of the machine and no exit code was written: the
    machine went down under it, which is the cluster's failure, not the task's (reported lost). Killed in this
    boot, without an exit code, it is an ending of its own."""
    task = launch_of(tmp_path, "1.1.0", ["true"])
    task.run_dir.mkdir(parents=True)
    gone = {"pid": 2**22 + 1, "start_ticks": 1}  # above pid_max: no such process
    ex = LocalExecutor()
    assert ex.adopt(task, {**gone, "boot_id": "an-earlier-boot"}) is Adoption.ENDED
    assert wait_exits(ex, 1) == [TaskExit("1.1.0", None, "the machine restarted under it", lost=True)]
    assert ex.adopt(task, {**gone, "boot_id": boot_id()}) is Adoption.ENDED
    assert wait_exits(ex, 1) == [TaskExit("1.1.0", None, "killed or vanished")]


def test_a_task_launched_just_before_a_crash_is_found_without_a_handle(tmp_path: Path) -> None:
    task = launch_of(tmp_path, "1.1.0", ["sleep", "1"])
    launch_elsewhere(task)
    second = LocalExecutor()
    assert second.adopt(task, None) is Adoption.RUNNING
    assert wait_exits(second, 1) == [TaskExit("1.1.0", 0)]
    never = launch_of(tmp_path, "2.1.0", ["true"])
    assert second.adopt(never, None) is Adoption.NEVER_STARTED


def test_a_task_of_the_same_id_under_another_data_dir_is_not_adopted(tmp_path: Path) -> None:
    """Two servers on one machine number their runs alike: recovery without a handle finds a task by its run dir,
    so one server never adopts the other's task of the same run id."""
    theirs = launch_of(tmp_path / "theirs", "1.1.0", ["sleep", "3"])
    launch_elsewhere(theirs)
    ours = launch_of(tmp_path / "ours", "1.1.0", ["true"])
    assert LocalExecutor().adopt(ours, None) is Adoption.NEVER_STARTED


def test_validate_names_a_missing_command() -> None:
    ex = LocalExecutor()
    assert ex.validate(("sh",)) is None
    assert "not found" in (ex.validate(("no-such-program-xyz",)) or "")
    assert "not an executable" in (ex.validate((os.devnull + "/x",)) or "")


def test_a_log_keeps_its_first_bytes_then_says_it_was_cut_and_the_task_never_blocks(tmp_path: Path) -> None:
    """2 MB of output (more than a pipe holds) with a cap of 1,000 bytes: the log keeps the first 1,000 and one
    line saying it was cut, the task runs to its end and its exit code is kept; its stderr is in the same log."""
    ex = LocalExecutor()
    script = "echo first >&2; head -c 2000000 /dev/zero | tr '\\0' x; echo; echo last; exit 4"
    task = replace(launch_of(tmp_path, "1.1.0", ["sh", "-c", script]), log_max_bytes=1000)
    ex.launch(task)
    [done] = wait_exits(ex, 1)
    assert done == TaskExit("1.1.0", 4)
    text = task.log_path.read_text()
    kept, cut = text.split("\ntrimtab: ")
    assert kept == "first\n" + "x" * (1000 - len("first\n"))
    assert cut == "log cut at 1000 bytes (max_task_log_bytes); the rest is dropped\n"
    assert "last" not in text
    uncapped = launch_of(tmp_path, "2.1.0", ["sh", "-c", "head -c 70000 /dev/zero | tr '\\0' y"])
    ex.launch(uncapped)
    wait_exits(ex, 1)
    assert uncapped.log_path.read_text() == "y" * 70000
