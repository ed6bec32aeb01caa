"""Stories of the tenant limits beyond GPUs against a real server on loopback: priority classes kept to the tenants
the admin allows them for, caps on tasks, CPU and memory that hold jobs with their reason, a cap on pending jobs, a
submission no node could ever run refused with the reason, and limits that survive a restart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_helpers import Server, store_at_revision

from trimtab.serve.intake.limits import TenantLimits, limits_of_flags
from trimtab.serve.store import TenantRow

CLUSTER = """\
nodes:
  - {name: a, gpus: 4, cpu: 8, memory: 16Gi, labels: {zone: a}}
  - {name: b, gpus: 4, cpu: 8, memory: 16Gi, labels: {zone: b},
     taints: [{key: dedicated, value: infra, effect: NoSchedule}]}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("limits")
    (root / "cluster.yaml").write_text(CLUSTER)
    server = Server(root / "data", "--cluster", str(root / "cluster.yaml"), "--tenant-max-pending-jobs", "50",
                    "--tenant-max-task-log", "64Mi").start()
    yield server
    with server.client() as admin:  # no task outlives the module
        for job in admin.get("/v1/jobs", params={"limit": 10000}).json()["jobs"]:
            if job["state"] in ("pending", "running"):
                admin.post(f"/v1/jobs/{job['id']}/cancel")
        wait_until(lambda: all(j["state"] not in ("pending", "running") for j in
                               admin.get("/v1/jobs", params={"limit": 10000}).json()["jobs"]), 20)
    server.stop()


def tenant(server: Server, admin: httpx.Client, name: str, **limits: Any) -> httpx.Client:
    """A client with a new token of tenant `name`, whose limits the admin sets first (when given)."""
    if limits:
        r = admin.put(f"/v1/tenants/{name}", json=limits)
        assert r.status_code == 200, r.text
    r = admin.post("/v1/tokens", json={"tenant": name})
    assert r.status_code == 201, r.text
    return server.client(r.json()["token"])


def wait_until(check: Any, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not so within {timeout_s} s")
        time.sleep(0.1)


def job(client: httpx.Client, job_id: int) -> dict[str, Any]:
    return client.get(f"/v1/jobs/{job_id}").json()


def submit(client: httpx.Client, **spec: Any) -> int:
    r = client.post("/v1/jobs", json={"command": ["sleep", "60"], "gpus": 0, **spec})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def test_a_tenant_may_not_use_a_class_above_normal_until_the_admin_grants_it(server: Server,
                                                                               admin: httpx.Client) -> None:
    """As Kubernetes limits PriorityClass consumption by default (the ResourceQuota admission plugin's
    `limitedResources` with `matchScopes` on PriorityClass: a pod of such a class is refused with 403 in a namespace
    without a ResourceQuota whose `scopeSelector` matches the class), the classes that outrank other tenants'
    jobs (`high`, `system`) are refused to a tenant until the admin lists them in the tenant's
    `priority_classes`; a manifest naming one is refused the same way."""
    with tenant(server, admin, "prio") as prio:
        for name in ("high", "system"):
            r = prio.post("/v1/jobs", json={"command": ["true"], "gpus": 0, "priority_class": name})
            assert r.status_code == 403, r.text
            assert r.json() == {"detail": f"tenant prio may not use priority class {name}; its classes: low, normal",
                                "field": "priority_class"}
        pod = ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  priorityClassName: system\n  containers:\n"
               "  - {name: c, image: x, command: [\"true\"]}\n")
        r = prio.post("/v1/jobs", content=pod, headers={"Content-Type": "application/yaml"})
        assert r.status_code == 403 and "priority class system" in r.json()["detail"], r.text
        assert prio.get("/v1/jobs").json()["jobs"] == [], "nothing stored"
        r = admin.put("/v1/tenants/prio", json={"priority_classes": ["low", "normal", "high", "system"]})
        assert r.status_code == 200 and r.json()["priority_classes"][-1] == "system", r.text
        job_id = submit(prio, command=["true"], priority_class="system")
        assert job(prio, job_id)["priority"] == 1000
        r = admin.put("/v1/tenants/prio", json={"priority_classes": ["gold"]})
        assert r.status_code == 422 and r.json()["field"] == "priority_classes", r.text
        r = admin.put("/v1/tenants/prio", json={"priority_classes": None})
        assert r.json()["priority_classes"] == ["low", "normal"], "null: back to the server's default"


def test_a_job_of_1024_cpu_only_tasks_is_refused_and_running_tasks_are_held_to_the_cap(server: Server,
                                                                                       admin: httpx.Client,
                                                                                       tmp_path: Path) -> None:
    """`gpus: 0, tasks: 1024` asks for no GPU, so the GPU quota cannot stop it: the per-job task cap refuses it by
    default, and a tenant allowed such jobs is still held to its running-task cap (the processes are counted)."""
    with tenant(server, admin, "many") as many:
        r = many.post("/v1/jobs", json={"command": ["true"], "gpus": 0, "tasks": 1024})
        assert r.status_code == 403 and r.json()["field"] == "tasks", r.text
        assert "max_tasks_per_job is 256" in r.json()["detail"]
        admin.put("/v1/tenants/many", json={"max_tasks_per_job": 1024, "max_running_tasks": 6})
        r = many.post("/v1/jobs", json={"command": ["true"], "gpus": 0, "tasks": 1024})
        assert r.status_code == 403 and "max_running_tasks is 6" in r.json()["detail"], r.text
        started = tmp_path / "started"
        started.mkdir()
        command = ["sh", "-c", 'touch "$0/$TRIMTAB_JOB_ID.$RANK"; sleep 60', str(started)]
        ids = [submit(many, command=command, tasks=3) for _ in range(4)]
        wait_until(lambda: len(list(started.iterdir())) >= 6)
        time.sleep(1.5)  # the scheduler has had many cycles to start the third job, were it not held
        assert len(list(started.iterdir())) == 6, "6 tasks run, never more"
        reason = "tenant many: max_running_tasks is 6; its running jobs hold 6 and this job asks for 3 more"
        for held in (job(many, ids[2]), job(many, ids[3])):  # the same ask, the same answer
            assert (held["state"], held["reason"]) == ("pending", reason)
        many.post(f"/v1/jobs/{ids[0]}/cancel")
        wait_until(lambda: job(many, ids[2])["state"] == "running")
        assert job(many, ids[2])["reason"] == ""
        assert (job(many, ids[3])["state"], job(many, ids[3])["reason"]) == ("pending", reason)


def test_cpu_and_memory_caps_hold_jobs_with_a_reason_naming_the_cap(server: Server, admin: httpx.Client) -> None:
    """Running jobs' CPU and memory requests count against the tenant's caps; a job that would go over waits, and
    says which cap holds it. A job without a request of a capped resource is refused, as Kubernetes refuses a pod
    without requests in a namespace whose quota counts them; a job over the cap alone could never start (403)."""
    with tenant(server, admin, "cpus", max_cpu_milli=2000, max_mem_mib=4096) as cpus:
        r = cpus.post("/v1/jobs", json={"command": ["true"], "gpus": 0, "mem_mib": 64})
        assert r.status_code == 422 and r.json()["field"] == "cpu_milli", r.text
        assert "max_cpu_milli of 2000: its jobs must request cpu_milli" in r.json()["detail"]
        r = cpus.post("/v1/jobs", json={"command": ["true"], "gpus": 0, "cpu_milli": 1500, "mem_mib": 64, "tasks": 2})
        assert r.status_code == 403 and "asks for 3000 cpu_milli in all" in r.json()["detail"], r.text
        first = submit(cpus, cpu_milli=1500, mem_mib=1024)
        wait_until(lambda: job(cpus, first)["state"] == "running")
        by_cpu = submit(cpus, cpu_milli=1000, mem_mib=64)
        by_mem = submit(cpus, cpu_milli=100, mem_mib=3500)
        wait_until(lambda: job(cpus, by_mem)["reason"] != "")
        assert job(cpus, by_cpu)["reason"] == ("tenant cpus: max_cpu_milli is 2000; its running jobs hold 1500 and "
                                               "this job asks for 1000 more")
        assert job(cpus, by_mem)["reason"] == ("tenant cpus: max_mem_mib is 4096; its running jobs hold 1024 and "
                                               "this job asks for 3500 more")
        assert (job(cpus, by_cpu)["state"], job(cpus, by_mem)["state"]) == ("pending", "pending")
        r = admin.put("/v1/tenants/cpus", json={"max_cpu_milli": 4000})
        assert r.json()["max_cpu_milli"] == 4000 and r.json()["max_mem_mib"] == 4096, "other limits kept"
        wait_until(lambda: job(cpus, by_cpu)["state"] == "running")
        assert job(cpus, by_mem)["state"] == "pending"


def test_a_tenant_at_its_pending_job_cap_is_refused_with_429(server: Server, admin: httpx.Client) -> None:
    """Pending jobs are capped per tenant: one more is refused (429) until one of them starts or is cancelled; a
    resubmission with the idempotency key of an accepted job still answers that job."""
    with tenant(server, admin, "queue", max_pending_jobs=2, max_running_tasks=1) as queue:
        running = submit(queue)
        wait_until(lambda: job(queue, running)["state"] == "running")
        waiting = [submit(queue, idempotency_key="k0"), submit(queue)]
        r = queue.post("/v1/jobs", json={"command": ["sleep", "60"], "gpus": 0})
        assert r.status_code == 429, r.text
        assert r.json()["detail"] == ("tenant queue has 2 pending jobs; its max_pending_jobs is 2 (submit again once "
                                      "some have started)")
        again = queue.post("/v1/jobs", json={"command": ["sleep", "60"], "gpus": 0, "idempotency_key": "k0"})
        assert (again.status_code, again.json()["id"]) == (200, waiting[0])
        queue.post(f"/v1/jobs/{waiting[1]}/cancel")
        submit(queue)


def test_a_new_tenant_has_the_servers_defaults(admin: httpx.Client) -> None:
    """`trimtab serve --tenant-max-pending-jobs 50 --tenant-max-task-log 64Mi` sets those limits for every tenant;
    the rest are built in."""
    r = admin.put("/v1/tenants/fresh", json={})
    assert r.status_code == 200, r.text
    assert r.json() == {"name": "fresh", "quota_gpus": None, "priority_classes": ["low", "normal"],
                        "max_tasks_per_job": 256, "max_running_tasks": 512, "max_cpu_milli": None,
                        "max_mem_mib": None, "max_pending_jobs": 50, "max_task_log_bytes": 64 << 20,
                        "max_log_bytes": 20 << 30}


@pytest.mark.parametrize(("spec", "detail"), [
    ({"node_selector": {"gpu": "a100"}},
     "no node has label gpu=a100; labels present: trimtab.io/rack=rack-0, zone=a, zone=b"),
    ({"node_selector": {"zone": "b"}},
     "no node meets all of the job's constraints (node selector, GPU models, tolerations, node affinity) together, "
     "though each is met by some node (a, b)"),
    ({"node_selector": {"zone": "a"}, "gpus": 2, "tasks": 3},
     "the job's 3 tasks (2 GPUs each) cannot all run at once: the nodes it may use (a) hold 2 such tasks when empty"),
    ({"cpu_milli": 9000},
     "the job's task (no GPU, 9000 milli-CPU) fits on none of the nodes it may use (a), even empty"),
])
def test_a_job_no_node_could_ever_run_is_refused_with_the_reason(server: Server, admin: httpx.Client,
                                                                 spec: dict[str, Any], detail: str) -> None:
    """The scheduler's own node filters (node selector, GPU model, taints: node b is tainted and these jobs carry
    no tolerations) run over the inventory at submission; a job none of them lets anywhere, or whose gang the nodes
    they allow cannot hold when empty, is refused (422) instead of pending forever."""
    def stored() -> int:
        return len(admin.get("/v1/jobs", params={"tenant": "picky"}).json()["jobs"])

    before = stored()
    r = admin.post("/v1/jobs", json={"command": ["true"], "gpus": 0, "tenant": "picky", **spec})
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == detail
    assert stored() == before
    ok = admin.post("/v1/jobs", json={"command": ["true"], "tenant": "picky", "node_selector": {"zone": "a"}})
    assert ok.status_code == 201, ok.text


def test_limits_and_holds_survive_a_restart(tmp_path: Path) -> None:
    """The admin's limits are stored with the tenant: after a SIGKILL and a restart they hold as before, and a job
    they held is still held with its reason."""
    server = Server(tmp_path / "data", "--gpus", "2").start()
    try:
        with server.client() as admin:
            admin.put("/v1/tenants/kept", json={"priority_classes": ["low", "system"], "max_running_tasks": 1})
            token = admin.post("/v1/tokens", json={"tenant": "kept"}).json()["token"]
            with server.client(token) as kept:
                first = submit(kept, priority_class="system")
                wait_until(lambda: job(kept, first)["state"] == "running")
                second = submit(kept, priority_class="low")
                wait_until(lambda: job(kept, second)["reason"] != "")
        server.kill()
        server.start()
        with server.client() as admin, server.client(token) as kept:
            [row] = admin.get("/v1/tenants").json()["tenants"]
            assert (row["priority_classes"], row["max_running_tasks"]) == (["low", "system"], 1)
            r = kept.post("/v1/jobs", json={"command": ["true"], "gpus": 0})
            assert r.status_code == 403 and "its classes: low, system" in r.json()["detail"], r.text
            time.sleep(1)
            assert job(kept, second)["state"] == "pending"
            assert "max_running_tasks is 1" in job(kept, second)["reason"]
            for job_id in (first, second):
                kept.post(f"/v1/jobs/{job_id}/cancel")
            wait_until(lambda: job(kept, first)["state"] == "cancelled")
    finally:
        server.stop()


def test_a_store_of_the_second_schema_is_upgraded_and_its_tenants_keep_the_defaults(tmp_path: Path) -> None:
    """Revision 0003 adds `tenants.limits`; tenants stored before it have no overrides."""
    store = store_at_revision(tmp_path / "old.db", "0002",
                              "INSERT INTO tenants (name, quota_gpus, created_s) VALUES ('old', 2, 1.0)")
    store.upgrade()
    with store.reader() as s:
        [row] = s.query(TenantRow).all()
        assert (row.quota_gpus, row.limits) == (2, {})
    store.close()


def test_the_serve_flags_set_every_tenants_defaults() -> None:
    limits = limits_of_flags("low,normal", 8, 0, "1.5", "64Gi", None)
    assert limits == TenantLimits(priority_classes=("low", "normal"), max_tasks_per_job=8, max_running_tasks=None,
                                  max_cpu_milli=1500, max_mem_mib=64 * 1024)
    assert limits.caps == (("cpu_milli", 1500, "max_cpu_milli"), ("mem_mib", 65536, "max_mem_mib"))
    with pytest.raises(ValueError, match="--tenant-max-memory: quantity 'lots' does not parse"):
        limits_of_flags(max_memory="lots")
    with pytest.raises(ValueError, match="--tenant-priority-classes: unknown class 'gold'"):
        limits_of_flags("gold")


def test_a_cluster_whose_every_node_is_tainted_refuses_jobs_with_the_taints(tmp_path: Path) -> None:
    """The taints filter of the scheduler, run at submission: a job without tolerations tolerates no NoSchedule
    taint."""
    from trimtab.model import Job, Resources
    from trimtab.serve.intake.feasible import Feasibility
    from trimtab.serve.run.gpus import from_cluster_file

    (tmp_path / "c.yaml").write_text("nodes:\n  - {name: x, gpus: 2, taints: [{key: gpu, value: h100}]}\n")
    nodes = from_cluster_file(str(tmp_path / "c.yaml")).nodes
    job = Job(id="1", submit_s=0.0, tasks=1, task=Resources(gpus=1))
    refusal = Feasibility(["gpu-model", "node-selector", "taints"]).refusal(job, nodes)
    assert refusal is not None and refusal.status == 422
    assert refusal.detail == ("every node has a taint the job does not tolerate (x: gpu=h100:NoSchedule); the job's "
                              "tolerations: none")
    assert Feasibility(["gpu-model", "node-selector"]).refusal(job, nodes) is None, "a policy without the taints filter"
