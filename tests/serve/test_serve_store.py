"""The serve store and the GPU inventory: Alembic migrations create exactly the schema the models describe (and
run again harmlessly), SQLite runs in WAL mode, and NVML discovery (with a stand-in NVML) lists whole GPUs and MIG
instances, with virtual GPUs when there is no driver."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from serve_helpers import OLD_JOB, store_at_revision
from sqlalchemy import text

from trimtab.serve.run import gpus
from trimtab.serve.store import MIGRATIONS_DIR, Base, Store, sqlite_url


def test_migrations_build_the_schema_of_the_models_and_may_run_twice(tmp_path: Path) -> None:
    store = Store(sqlite_url(tmp_path / "t.db"))
    store.upgrade()
    store.upgrade()
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert diff == [], diff
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        head = ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == head
    assert store.ensure_admin_token(0.0) is not None
    assert store.ensure_admin_token(0.0) is None, "one admin token, made once"


class _FakeNvml(types.ModuleType):
    """Two GPUs: GPU 0 whole, GPU 1 in MIG mode with two instances (slot 1 empty)."""

    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self) -> None:
        super().__init__("pynvml")

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        return ("gpu", i)

    def nvmlDeviceGetName(self, h: Any) -> bytes:
        return b"NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        return types.SimpleNamespace(total=(141 if h[0] == "gpu" else 35) * 1024**3)

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return f"GPU-{h[1]}" if h[0] == "gpu" else f"MIG-{h[1]}-{h[2]}"

    def nvmlDeviceGetMigMode(self, h: Any) -> tuple[int, int]:
        return (1, 1) if h[1] == 1 else (0, 0)

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:
        return 3

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, i: int) -> Any:
        if i == 1:
            raise RuntimeError("not found")
        return ("mig", h[1], i)


def test_nvml_discovery_lists_whole_gpus_and_mig_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml())
    found = gpus.nvml_devices()
    assert found is not None
    assert [(d.id, d.memory_mib) for d in found] == [("0", 141 * 1024), ("MIG-1-0", 35 * 1024),
                                                      ("MIG-1-2", 35 * 1024)]
    inventory = gpus.discover()
    assert inventory.source == "nvml" and inventory.nodes[0].capacity.gpus == 3


def test_without_a_driver_discovery_falls_back_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = _FakeNvml()

    def fail() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    broken.nvmlInit = fail  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    assert gpus.nvml_devices() is None
    inventory = gpus.discover()
    assert inventory.nodes[0].capacity.gpus == 0 and "--gpus" in inventory.source
    assert gpus.discover(gpus=3).describe().endswith("3 x virtual")
    two = gpus.discover(cluster="2x4")
    assert [len(two.devices[n.name]) for n in two.nodes] == [4, 4]


def test_live_summary_metrics_follow_their_definitions(tmp_path: Path) -> None:
    """Two one-hour windows between the first and the last submission (a job still pending, submitted at 2 h):
    1 then 3 completions (throughput_cv = std/mean = 1/2); goodput counts the GPU-seconds of completed attempts
    only; backlogged_util averages samples taken while a job waited. Windows after the last submission do not
    count (DESIGN.md)."""
    from trimtab.serve.http.views import summary
    from trimtab.serve.store import JobRow, RunRow, SampleRow

    store = Store(sqlite_url(tmp_path / "t.db"))
    store.upgrade()
    ends = [1000.0, 4000.0, 5000.0, 6000.0]
    with store.session() as s:
        for i, end in enumerate(ends):
            job = JobRow(tenant="t", state="completed", tasks=1, gpus_per_task=2, command=["x"], gpu_models=[],
                         node_selector={}, env={}, submit_s=float(i * 10), first_start_s=end - 100, end_s=end)
            s.add(job)
            s.flush()
            s.add(RunRow(job_id=job.id, attempt=1, rank=0, node="n", gpu_ids=["0", "1"], state="exited",
                         start_s=end - 100, end_s=end, outcome="completed"))
        s.add(RunRow(job_id=job.id, attempt=0, rank=0, node="n", gpu_ids=["0"], state="exited", start_s=0.0,
                     end_s=3000.0, outcome="preempted"))
        s.add(JobRow(tenant="t", state="pending", tasks=1, gpus_per_task=1, command=["x"], gpu_models=[],
                     node_selector={}, env={}, submit_s=7200.0))
        for t, alloc, pending in ((0.0, 8, 1), (10.0, 4, 0), (20.0, 6, 2)):
            s.add(SampleRow(t_s=t, gpus_allocated=alloc, gpus_total=8, pending=pending, running=1, completed_total=0))
    with store.reader() as s:
        got = summary(s, now_s=7300.0)
    assert got["jobs_completed"] == 4 and got["jobs_lost"] == 0 and got["jobs_pending"] == 1
    assert got["throughput_cv"] == pytest.approx(0.5)
    assert got["goodput_cv"] == pytest.approx(0.5), "1 x 200 GPU-s then 3 x 200 GPU-s; the preempted run is lost"
    assert got["backlogged_util"] == pytest.approx(14 / 16)
    assert got["gpu_util"] == pytest.approx(18 / 24)
    assert got["avg_wait_s"] is not None and got["p99_jct_s"] is not None
    with store.reader() as s:
        later = summary(s, now_s=5 * 3600.0)
    assert later["throughput_cv"] == pytest.approx(0.5), "empty windows after the last submission do not count"


def test_a_store_of_the_first_schema_is_upgraded_and_its_jobs_ask_for_whole_gpus(tmp_path: Path) -> None:
    """Revision 0002 adds `jobs.gpu_milli`; jobs stored before it read as whole-GPU jobs (0)."""
    from trimtab.serve.store import JobRow

    store = store_at_revision(tmp_path / "old.db", "0001", OLD_JOB % "{}")
    store.upgrade()
    with store.reader() as s:
        [job] = s.query(JobRow).all()
        assert (job.gpus_per_task, job.gpu_milli) == (2, 0)
