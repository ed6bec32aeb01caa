"""Shared builders for tests: small clusters and jobs with readable defaults."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trimtab.model import Job, Node, Resources

TRACES = Path(os.environ.get("TRIMTAB_TRACES", Path(__file__).resolve().parents[2] / "shared" / "traces"))


def trace_path(relative: str) -> Path:
    """A file under the shared traces folder, or skip the test saying which file is missing."""
    path = TRACES / relative
    if not path.exists():
        pytest.skip(f"trace {path} is absent (set TRIMTAB_TRACES to the traces folder)")
    return path


def nodes(count: int = 1, gpus: int = 8, racks: int = 1, model: str = "", cpu_milli: int = 64_000,
          mem_mib: int = 512 * 1024) -> list[Node]:
    per_rack = max(1, -(-count // racks))
    return [Node(f"n{i:03d}", Resources(gpus, cpu_milli, mem_mib), gpu_model=model, rack=f"r{i // per_rack}")
            for i in range(count)]


def job(jid: str | int, gpus: int = 1, submit_s: float = 0.0, duration_s: float = 100.0, tenant: str = "default",
        priority: int = 0, **kw: object) -> Job:
    return Job(id=str(jid), submit_s=submit_s, tasks=gpus, task=Resources(gpus=1), duration_s=duration_s,
               tenant=tenant, priority=priority, **kw)  # type: ignore[arg-type]
