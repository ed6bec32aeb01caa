"""The end-to-end story of `trimtab serve` against PostgreSQL: a throwaway cluster of Debian's `postgresql`
started for the test (skipped, saying why, when its binaries are absent)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_helpers import free_port
from test_serve_e2e import _run_mix


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server on a free loopback port with a database `trimtab`; stopped at the end."""
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'psycopg[binary]')")
    root = Path(tempfile.mkdtemp(prefix="trimtab-pg-"))
    as_postgres: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL as the postgres user")
        shutil.chown(root, "postgres", "postgres")
        as_postgres = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", free_port()

    def run(*cmd: str) -> None:
        subprocess.run([*as_postgres, *cmd], check=True, capture_output=True, timeout=120)

    run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
    run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "-o",
        f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
    try:
        run(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "trimtab")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/trimtab"
    finally:
        run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


def test_a_mix_of_jobs_completes_with_the_store_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    """The end-to-end story (jobs and gangs over HTTP, no GPU shared) with the store on PostgreSQL."""
    _run_mix(tmp_path, 30, 8, db=postgres_url)
