"""Tenants cannot reach the server's secrets or each other's files: run as root, each tenant's tasks run as its own
Unix user and a job that tries to read the admin token, the store, or another tenant's logs and checkpoints fails;
the data dir's modes are enforced at start; tokens are stored as digests and can be listed and revoked; the task
wrapper records a job's exit whatever the job's environment, across a crash of the server."""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_helpers import SRC, Server

from trimtab.serve.http.server import secure_data_dir
from trimtab.serve.run.identity import Identities, parse_tenant_users, user_name_for

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="tasks run as per-tenant Unix users only when the server "
                                                           "runs as root (this test process is not root)")
CONFIGURED_USER = "ttsec-b"  # made by the test, mapped to tenant sec-b with --tenant-user


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def wait_job(client: httpx.Client, job_id: int, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("completed", "failed", "cancelled"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not end in {timeout_s} s")


def submit(client: httpx.Client, script: str, **extra: Any) -> int:
    r = client.post("/v1/jobs", json={"command": ["sh", "-c", script], "gpus": 1, **extra})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def cli(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trimtab.cli", *args, "--server", server.url, "--token",
                           server.admin_token], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(SRC)})


@pytest.fixture
def isolated_server() -> Iterator[Server]:
    """A root server with per-tenant users, its data dir pre-created 0755 with a stray 0644 file (the modes must
    be enforced anyway), under a folder other users may pass through (pytest's own temp folders are 0700)."""
    base = Path(tempfile.mkdtemp(prefix="trimtab-sec-", dir="/tmp"))
    os.chmod(base, 0o711)
    data = base / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    (data / "logs").mkdir(mode=0o755)
    stray = data / "notes.txt"
    stray.write_text("the server's\n")
    os.chmod(stray, 0o644)
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", CONFIGURED_USER],
                   capture_output=True, check=False)
    server = Server(data, "--gpus", "4", "--tenant-user", f"sec-b={CONFIGURED_USER}", isolated=True)
    try:
        yield server.start()
    finally:
        server.stop()
        for user in (CONFIGURED_USER, user_name_for("sec-a")):
            subprocess.run(["userdel", user], capture_output=True, check=False)
        shutil.rmtree(base, ignore_errors=True)


PROBE = (
    'echo "uid=$(id -u)"; D="$0"; '
    'for f in "$D/admin.token" "$D/trimtab.db" "$D"/logs/"$1"/*.log "$D/tenants/sec-b/checkpoints/$1/secret" '
    '"$TRIMTAB_CHECKPOINT_DIR/../../../../admin.token"; do '
    'if cat "$f"; then echo "READ $f"; else echo "DENIED $f"; fi; done; ls "$D" && echo LISTED; exit 0'
)


@needs_root
def test_a_tenants_job_cannot_read_the_admin_token_the_store_or_another_tenants_files(
        isolated_server: Server) -> None:
    server = isolated_server
    data = server.data_dir
    admin_token = server.admin_token
    with server.client() as admin:
        tokens = {t: admin.post("/v1/tokens", json={"tenant": t}).json()["token"] for t in ("sec-a", "sec-b")}
        nodes = admin.get("/v1/nodes").json()
    assert nodes["identity"]["isolated"] is True and "CUDA_VISIBLE_DEVICES only" in nodes["identity"]["gpu_pinning"]
    shown = cli(server, "nodes")
    assert "each tenant's tasks run as its own Unix user" in shown.stdout.replace("\n", " "), shown.stdout
    with server.client(tokens["sec-b"]) as b:
        b_job = submit(b, 'echo "uid=$(id -u)"; echo b-secret-output; echo b-ckpt > "$TRIMTAB_CHECKPOINT_DIR/secret"')
        ended = wait_job(b, b_job)
        assert ended["state"] == "completed", ended
        b_log = b.get(f"/v1/jobs/{b_job}/logs").text
    with server.client(tokens["sec-a"]) as a:
        a_job = a.post("/v1/jobs", json={"command": ["sh", "-c", PROBE, str(data), str(b_job)], "gpus": 1}).json()["id"]
        assert wait_job(a, a_job)["state"] == "completed"
        a_log = a.get(f"/v1/jobs/{a_job}/logs").text

    b_uid = int(b_log.split("uid=")[1].split()[0])
    a_uid = int(a_log.split("uid=")[1].split()[0])
    assert b_uid == pwd.getpwnam(CONFIGURED_USER).pw_uid, "the configured user runs sec-b's tasks"
    assert a_uid == pwd.getpwnam(user_name_for("sec-a")).pw_uid, "trimtab-sec-a was made for sec-a"
    assert len({a_uid, b_uid, 0}) == 3
    assert "b-secret-output" in b_log
    assert admin_token not in a_log and "b-secret" not in a_log and "b-ckpt" not in a_log
    assert "SQLite format" not in a_log
    assert "READ" not in a_log and "LISTED" not in a_log, a_log
    assert a_log.count("DENIED") == 5, a_log
    assert "Permission denied" in a_log

    assert mode(data) == 0o711 and mode(data / "tenants") == 0o711
    for private in ("admin.token", "trimtab.db", "notes.txt"):
        assert mode(data / private) == 0o600, private
    for folder in ("logs", "runs"):
        assert mode(data / folder) == 0o700, folder
    for log in (data / "logs").glob("*/*.log"):
        assert mode(log) == 0o600 and os.stat(log).st_uid == 0
    for tenant, uid in (("sec-a", a_uid), ("sec-b", b_uid)):
        tree = data / "tenants" / tenant
        assert (mode(tree), os.stat(tree).st_uid) == (0o700, uid)
        assert os.stat(tree / "checkpoints" / str(b_job if tenant == "sec-b" else a_job)).st_uid == uid


def test_the_data_dir_is_made_private_at_start_even_when_it_exists(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "logs" / "1").mkdir(parents=True)
    for path in (data, data / "logs"):
        os.chmod(path, 0o755)
    (data / "admin.token").write_text("x\n")
    os.chmod(data / "admin.token", 0o644)
    (data / "elsewhere").symlink_to(tmp_path)
    secure_data_dir(data, isolated=False)
    assert mode(data) == 0o700 and mode(data / "logs") == 0o700 and mode(data / "admin.token") == 0o600
    assert mode(data / "runs") == 0o700 and mode(data / "tenants") == 0o700
    assert mode(tmp_path) != 0o600, "a link in the data dir is not followed"
    secure_data_dir(data, isolated=True)
    assert mode(data) == 0o711 and mode(data / "tenants") == 0o711 and mode(data / "logs") == 0o700


def test_a_workdir_at_the_root_or_in_the_data_dir_is_refused_naming_the_field(tmp_path: Path) -> None:
    server = Server(tmp_path / "data", "--gpus", "2").start()
    try:
        with server.client() as admin:
            for workdir in ("/", str(tmp_path / "data"), str(tmp_path / "data" / "tenants" / "x"), "relative/dir"):
                r = admin.post("/v1/jobs", json={"command": ["true"], "workdir": workdir})
                assert r.status_code == 422 and r.json()["field"] == "workdir", (workdir, r.text)
            assert admin.post("/v1/jobs", json={"command": ["true"], "workdir": str(tmp_path)}).status_code == 201
    finally:
        server.stop()


def test_tokens_are_stored_as_digests_listed_without_secrets_and_revoked(tmp_path: Path) -> None:
    server = Server(tmp_path / "data", "--gpus", "2").start()
    try:
        with server.client() as admin:
            made = admin.post("/v1/tokens", json={"tenant": "team-a", "name": "ci"}).json()["token"]
            other = admin.post("/v1/tokens", json={"tenant": "team-b"}).json()["token"]
            with server.client(made) as tenant:
                assert tenant.get("/v1/jobs").status_code == 200
                assert tenant.get("/v1/tokens").status_code == 403
            listed = admin.get("/v1/tokens").json()["tokens"]
            assert [(t["tenant"], t["admin"], t["name"]) for t in listed] == [
                (None, True, "admin"), ("team-a", False, "ci"), ("team-b", False, "")]
            assert listed[1]["last_used_s"] is not None and listed[2]["last_used_s"] is None
            assert made not in str(listed) and server.admin_token not in str(listed)
            r = admin.delete(f"/v1/tokens/{listed[0]['id']}")
            assert r.status_code == 409 and r.json()["field"] == "token_id"
            assert admin.delete("/v1/tokens/999").status_code == 404
        shown = cli(server, "token", "list", "--json")
        assert shown.returncode == 0 and '"team-b"' in shown.stdout and other not in shown.stdout
        revoked = cli(server, "token", "revoke", str(listed[1]["id"]))
        assert revoked.returncode == 0 and "revoked" in revoked.stdout
        with server.client(made) as tenant:
            r = tenant.get("/v1/jobs")
            assert r.status_code == 401 and r.json()["detail"] == "unknown token"
        with server.client(other) as tenant:
            assert tenant.get("/v1/jobs").status_code == 200
    finally:
        server.stop()
    with sqlite3.connect(tmp_path / "data" / "trimtab.db") as db:
        stored = db.execute("SELECT digest FROM tokens ORDER BY id").fetchall()
        dump = "\n".join(db.iterdump())
    assert [d for (d,) in stored] == [hashlib.sha256(t.encode()).hexdigest() for t in (server.admin_token, other)]
    assert server.admin_token not in dump and other not in dump and made not in dump


def test_a_job_without_a_path_is_recorded_completed_also_across_a_server_sigkill(tmp_path: Path) -> None:
    """The task wrapper runs no program of the job's PATH: a job with PATH=/nonexistent that exits 0 is
    completed, whether it ends while the server runs or while it is down."""
    server = Server(tmp_path / "data", "--gpus", "2").start()
    env = {"PATH": "/nonexistent"}
    try:
        with server.client() as admin:
            quick = admin.post("/v1/jobs", json={"command": ["/bin/sh", "-c", "exit 0"], "env": env}).json()["id"]
            slow = admin.post("/v1/jobs", json={"command": ["/bin/sh", "-c", "/bin/sleep 2; exit 0"],
                                                "env": env}).json()["id"]
            deadline = time.monotonic() + 30
            while not all(r.get("pid") for r in admin.get(f"/v1/jobs/{slow}").json()["runs"] or [{}]):
                assert time.monotonic() < deadline, "the slow job did not start"
                time.sleep(0.1)
            assert admin.get("/v1/nodes").json()["identity"]["isolated"] is False
        server.kill()
        time.sleep(3)  # the job ends while the server is down
        server.start()
        with server.client() as admin:
            for job_id in (quick, slow):
                job = wait_job(admin, job_id)
                assert (job["state"], job["exit_code"]) == ("completed", 0), job
    finally:
        server.stop()
    log = server.log.read_text()
    assert "tenants share one identity" in log and "ended while down" in log


def test_tenant_user_names_and_options() -> None:
    assert user_name_for("team-a") == "trimtab-team-a"
    odd = user_name_for("Team.A")
    assert odd.startswith("trimtab-team-a-") and len(odd) <= 32 and odd != user_name_for("team.A")
    assert len(user_name_for("a" * 100)) <= 32
    assert parse_tenant_users(["a=alice", "b=bob"]) == {"a": "alice", "b": "bob"}
    with pytest.raises(ValueError, match="--tenant-user"):
        parse_tenant_users(["a"])
    with pytest.raises(ValueError, match="root"):
        Identities(Path("/tmp/x"), isolated=True, users={"a": "root"})
    with pytest.raises(ValueError, match="no Unix user"):
        Identities(Path("/tmp/x"), isolated=True, users={"a": "no-such-user-here"})
    with pytest.raises(ValueError, match="needs a server running as root"):
        Identities(Path("/tmp/x"), users={"a": "alice"})


@needs_root
def test_tenant_users_are_one_per_tenant_recorded_and_never_adopted(tmp_path: Path) -> None:
    """`Team_A`'s first-try user name is computable, so a tenant literally named after it (less the prefix) must
    get another user, as must a tenant whose first-try name is a user the server did not create; a restarted
    server finds the same users in its record."""
    made: list[str] = []
    squatter = "trimtab-squat-x"  # made by someone else before tenant squat-x first runs
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", squatter],
                   capture_output=True, check=True)
    try:
        ids = Identities(tmp_path, isolated=True)
        team = ids.user_of("Team_A")
        made.append(team.name)
        lookalike = ids.user_of(team.name.removeprefix("trimtab-"))
        made.append(lookalike.name)
        squat = ids.user_of("squat-x")
        made.append(squat.name)
        assert len({team.uid, lookalike.uid, squat.uid, pwd.getpwnam(squatter).pw_uid}) == 4
        assert squat.name != squatter and lookalike.name != team.name
        assert mode(tmp_path / "tenant-users.json") == 0o600
        again = Identities(tmp_path, isolated=True)
        assert [again.user_of(t) for t in ("Team_A", team.name.removeprefix("trimtab-"), "squat-x")] == [
            team, lookalike, squat]
    finally:
        for user in (*made, squatter):
            subprocess.run(["userdel", user], capture_output=True, check=False)
