"""A small elastic trainer for the serve tests: `python elastic_trainer.py OUT_DIR TOTAL [GPU_UTIL]`.

Every task records the span it held its GPUs in `OUT_DIR/spans/<job>.<attempt>.<rank>` (GPUs, start, end). Rank 0
trains: it resumes from `$TRIMTAB_CHECKPOINT_DIR/state.json`, does WORLD_SIZE units of work every 0.1 s until
TOTAL, checkpoints about every second (logged in `OUT_DIR/checkpoints.log` as "attempt step"), reports its
progress in `$TRIMTAB_PROGRESS_FILE` (100 samples/s per task; `gpu_util` GPU_UTIL when given) and logs each
start in `OUT_DIR/starts.log` as "attempt world_size resumed_step resized gpus". On SIGTERM it stops at once: the
work since the last checkpoint is lost. When done it appends "done" to `OUT_DIR/done.log`; the other ranks wait
for it."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def write_atomic(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.rename(path)


def main() -> int:
    out, total = Path(sys.argv[1]), int(sys.argv[2])
    util = float(sys.argv[3]) if len(sys.argv) > 3 else None
    env = os.environ
    job, attempt, rank, world = env["TRIMTAB_JOB_ID"], env["TRIMTAB_ATTEMPT"], int(env["RANK"]), int(env["WORLD_SIZE"])
    (out / "spans").mkdir(parents=True, exist_ok=True)
    span = out / "spans" / f"{job}.{attempt}.{rank}"
    span.write_text(f"{env['CUDA_VISIBLE_DEVICES']} {time.time()}\n")

    def leave(code: int) -> None:
        with span.open("a") as f:
            f.write(f"{time.time()}\n")
        os._exit(code)

    signal.signal(signal.SIGTERM, lambda *_: leave(143))
    finished = out / f"finished.{attempt}"
    if rank != 0:
        while not finished.exists():
            time.sleep(0.05)
        leave(0)
    state = Path(env["TRIMTAB_CHECKPOINT_DIR"]) / "state.json"
    step = json.loads(state.read_text())["step"] if state.exists() else 0
    with (out / "starts.log").open("a") as f:
        f.write(f"{attempt} {world} {step} {env.get('TRIMTAB_RESIZED', '0')} {env['TRIMTAB_GPUS']}\n")
    saved_s = time.monotonic()
    while step < total:
        time.sleep(0.1)
        step = min(total, step + world)
        report = {"samples_per_s": 100.0 * world, "batch_size": 32 * world}
        if util is not None:
            report["gpu_util"] = util
        write_atomic(Path(env["TRIMTAB_PROGRESS_FILE"]), report)
        if time.monotonic() - saved_s >= 1.0 or step >= total:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the checkpoint and its log line, or neither
            write_atomic(state, {"step": step})
            with (out / "checkpoints.log").open("a") as f:
                f.write(f"{attempt} {step}\n")
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            saved_s = time.monotonic()
    with (out / "done.log").open("a") as f:
        f.write("done\n")
    finished.touch()
    leave(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
