"""Why pending jobs wait, against a real `trimtab serve`: a quota-blocked, a taint-blocked, a capacity-blocked job
and a gang each carry their reason in the API (`reason`, GET /v1/jobs/{id}/why) and the CLI (`trimtab jobs`,
`job --json`, `why`); the reason is written to the store when it changes, and a started job's is cleared."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import httpx
import pytest
from serve_helpers import Server, trimtab

CLUSTER = """nodes:
  - {name: big, gpus: 4}
  - {name: small, gpus: 2}
  - {name: tainted, gpus: 2, taints: [{key: dedicated, value: infer, effect: NoSchedule}]}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("reasons")
    (root / "cluster.yaml").write_text(CLUSTER)
    server = Server(root / "data", "--cluster", str(root / "cluster.yaml")).start()
    yield server
    server.stop()



def submit(admin: httpx.Client, gpus: int, tasks: int = 1, **spec: object) -> int:
    r = admin.post("/v1/jobs", json={"command": ["sleep", "300"], "gpus": gpus, "tasks": tasks, **spec})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def wait_for(admin: httpx.Client, job_id: int, field: str, want: str, timeout_s: float = 20) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = admin.get(f"/v1/jobs/{job_id}").json()
        if re.search(want, str(job[field])):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id}: {field} is {job[field]!r}, not /{want}/")


@pytest.fixture(scope="module")
def blocked(server: Server, admin: httpx.Client) -> Iterator[dict[str, int]]:
    """big holds 4 of 4 GPUs, small 1 of 2 (team-a at its quota of 1), tainted 0 of 2 (no job tolerates it)."""
    assert admin.put("/v1/tenants/team-a", json={"quota_gpus": 1}).status_code == 200
    ids = {"filler": submit(admin, 4)}
    wait_for(admin, ids["filler"], "state", "running")
    ids["team-a"] = submit(admin, 1, tenant="team-a")
    wait_for(admin, ids["team-a"], "state", "running")
    ids |= {"quota": submit(admin, 1, tenant="team-a"), "taint": submit(admin, 2),
            "capacity": submit(admin, 4, priority_class="high"), "gang": submit(admin, 1, tasks=2)}
    yield ids
    for job_id in ids.values():
        admin.post(f"/v1/jobs/{job_id}/cancel")


EXPECTED = {
    "quota": ("quota", r"^quota: team-a holds 1 of 1 GPUs$",
              "needs 1 GPU: starts when team-a's running jobs free 1 or the admin raises the quota to 2"),
    "taint": ("fit", r"^0/3 nodes are available: 1 are tainted, 2 have too few free GPUs\.$",
              "needs 2 GPUs on one node; largest free: 1 on node small (of 2 nodes it may use)"),
    "capacity": ("fit", r"^0/3 nodes are available: 1 are tainted, 2 have too few free GPUs\.$",
                 "needs 4 GPUs on one node; largest free: 1 on node small (of 2 nodes it may use)"),
    "gang": ("fit", r"^waiting for room for the gang's 2 members: room for 1 on 1/3 nodes; 1 are tainted, 1 have "
                    r"too few free GPUs\.$",
             "needs 1 GPU for each of 2 members, all at once; largest free: 1 on node small (of 2 nodes it may use)"),
}


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_each_blocked_job_says_why_in_the_api(admin: httpx.Client, blocked: dict[str, int], kind: str) -> None:
    cause, reason, hint = EXPECTED[kind]
    job = wait_for(admin, blocked[kind], "reason", reason)
    assert job["state"] == "pending"
    why = admin.get(f"/v1/jobs/{blocked[kind]}/why").json()
    assert (why["state"], why["cause"], why["hint"]) == ("pending", cause, hint)
    assert re.search(reason, why["reason"]), why


def test_the_cli_lists_the_reasons_and_why_says_what_would_let_a_job_start(server: Server, admin: httpx.Client,
                                                                           blocked: dict[str, int]) -> None:
    for kind in EXPECTED:
        wait_for(admin, blocked[kind], "reason", EXPECTED[kind][1])
    listed = trimtab(server, "jobs", "--state", "pending", "--json")
    assert listed.exit_code == 0, listed.stderr
    reasons = {j["id"]: j["reason"] for j in json.loads(listed.stdout)}
    assert reasons[blocked["quota"]] == "quota: team-a holds 1 of 1 GPUs"
    table = trimtab(server, "jobs", "--state", "pending")
    assert table.exit_code == 0 and "reason" in table.stdout and "quota: team-a" in table.stdout, table.stdout
    shown = json.loads(trimtab(server, "job", str(blocked["taint"]), "--json").stdout)
    assert "1 are tainted" in shown["reason"]
    why = trimtab(server, "why", str(blocked["capacity"]))
    assert why.exit_code == 0, why.stderr
    assert why.stdout.splitlines() == [
        f"job {blocked['capacity']} waits (fit): 0/3 nodes are available: 1 are tainted, 2 have too few free GPUs.",
        f"to start: {EXPECTED['capacity'][2]}"]
    running = trimtab(server, "why", str(blocked["filler"]))
    assert running.stdout.strip() == f"job {blocked['filler']} is running (not waiting)"
    assert json.loads(trimtab(server, "why", str(blocked["quota"]), "--json").stdout)["cause"] == "quota"


def test_a_job_that_starts_loses_its_reason_and_a_raised_quota_lets_it_start(admin: httpx.Client,
                                                                             blocked: dict[str, int]) -> None:
    wait_for(admin, blocked["quota"], "reason", "^quota: ")
    assert admin.put("/v1/tenants/team-a", json={"quota_gpus": 2}).status_code == 200
    job = wait_for(admin, blocked["quota"], "state", "running")
    assert job["reason"] == ""
    assert admin.get(f"/v1/jobs/{blocked['quota']}/why").json() == {
        "id": blocked["quota"], "state": "running", "cause": "", "reason": "", "hint": ""}


def test_why_answers_only_for_jobs_the_token_may_see(server: Server, admin: httpx.Client,
                                                     blocked: dict[str, int]) -> None:
    token = admin.post("/v1/tokens", json={"tenant": "team-b"}).json()["token"]
    with server.client(token) as team_b:
        assert team_b.get(f"/v1/jobs/{blocked['taint']}/why").status_code == 404
    assert admin.get("/v1/jobs/999999/why").status_code == 404


def test_a_reason_is_saved_once_until_it_changes_and_a_skipped_job_takes_its_shapes() -> None:
    """ReasonBook: the daemon writes only what `unsaved` returns; a job the cycle skipped for a blocked job of
    its request shape says what that job says; a job no cycle has spoken of is behind others."""
    from trimtab.model import Job, Resources
    from trimtab.policy import Cause, Code, Decision, Status
    from trimtab.waits import ReasonBook

    jobs = [Job(id=str(k), submit_s=0.0, tasks=1, task=Resources(gpus=1), tenant=t) for k, t in
            ((3, "team-a"), (4, "team-a"), (5, "team-b"))]
    book = ReasonBook(lambda job: job.tenant)
    quota = Status(Code.WAIT, "quota: team-a holds 2 of 2 GPUs", cause=Cause.QUOTA)
    book.note(Decision(waiting={"3": quota}), jobs)
    assert book.unsaved(jobs) == [("3", quota.reason), ("4", quota.reason), ("5", "behind a higher-priority job")]
    book.note(Decision(), jobs)  # a cycle that reached none of them: nothing changes, nothing to write
    assert book.unsaved(jobs) == []
    fit = Status(Code.WAIT, "0/3 nodes are available: 3 have too few free GPUs.", cause=Cause.FIT)
    book.note(Decision(stalled={"3": fit, "5": fit}), jobs)  # a stall replaces only "behind"
    assert book.unsaved(jobs) == [("5", fit.reason)]
    book.note(Decision(), jobs[1:])  # 3 started: forgotten
    assert book.latest("3").cause is Cause.ORDER and book.unsaved(jobs[1:]) == []
