"""`trimtab serve --backend ray` on a real Ray cluster started here: a head and two worker raylets with 4 virtual
GPUs each. Gangs spread over both workers start together with the right environment; a lost node's job is requeued
without spending a retry.

`RayCluster` (also used by the compare test) starts every node in its own session and kills those sessions at the
end, so nothing it started outlives the test."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_helpers import Server, free_port

pytest.importorskip("ray")

RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
# Quick failure detection: a raylet that stops answering is declared dead after about 1.5 s instead of ~30 s.
FAST_HEALTH = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "3",
               "RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_timeout_ms": "500"}


START_TIMEOUT_S = 20  # the server fails a task that Ray has not started by then (its GPUs held by others)
# Other Ray work (a driver of its own) holding every GPU of every alive GPU node, until it is killed.
HOG = """
import ray, sys, time
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
ips = [n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU", 0) > 0]
hogs = [ray.remote(num_gpus=4, num_cpus=0, resources={f"node:{ip}": 0.001})(type("Hog", (), {"ping": lambda self: 1}))
        .remote() for ip in ips]
ray.get([h.ping.remote() for h in hogs])
print("holding", len(hogs), flush=True)
time.sleep(600)
"""


class RayCluster:
    """A head (no GPUs) and `workers` worker raylets on this machine, each started by `ray start` in its own
    session. Worker i (named w1, w2..) advertises its own address, 127.0.0.<i+1>, as a machine of its own would;
    with `server_node` a GPU-less raylet "srv" at 127.0.0.9 is started too, for a server to join through.
    `kill(name)` SIGKILLs a node's raylet and everything it started; `stop()` kills them all."""

    SERVER_NODE_IP = "127.0.0.9"

    def __init__(self, root: Path, workers: int = 2, gpus: int = 4, cpus: int = 2, head_cpus: int = 1,
                 server_node: bool = False) -> None:
        self.root = root
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.groups: dict[str, int] = {}  # process group of each node, by name
        self.env = {**os.environ, **FAST_HEALTH, "RAY_USAGE_STATS_ENABLED": "0"}
        self.temp_dir = tempfile.mkdtemp(prefix="tt-ray-")  # short: Ray's socket paths must fit in 107 bytes
        self._start(["--head", "--port", str(self.port), "--num-gpus", "0", "--num-cpus", str(head_cpus),
                     "--temp-dir", self.temp_dir, "--include-dashboard=false",
                     "--dashboard-port", str(free_port()), "--ray-client-server-port", str(free_port())], "head")
        for _ in range(workers):
            self.add_worker(gpus, cpus, wait=False)
        if server_node:
            self._start(["--address", self.address, "--node-ip-address", self.SERVER_NODE_IP, "--num-gpus", "0",
                         "--num-cpus", "0"], "srv")
        self.head_ip = self.wait_nodes(len(self.groups))

    def add_worker(self, gpus: int = 4, cpus: int = 2, wait: bool = True) -> str:
        """Start the next worker raylet (w1, w2..) and return its name."""
        number = sum(name.startswith("w") for name in self.groups) + 1
        name = f"w{number}"
        self._start(["--address", self.address, "--node-ip-address", self.worker_ip(number),
                     "--num-gpus", str(gpus), "--num-cpus", str(cpus)], name)
        if wait:
            deadline = time.monotonic() + 60
            while self.worker_ip(number) not in {n["ip"] for n in self.nodes() if n["alive"]}:
                assert time.monotonic() < deadline, f"{name} did not join"
                time.sleep(0.5)
        return name

    @staticmethod
    def worker_ip(number: int) -> str:
        return f"127.0.0.{number + 1}"

    def _start(self, args: list[str], name: str) -> None:
        assert RAY is not None
        cmd = [RAY, "start", *args, "--object-store-memory", str(80 << 20), "--disable-usage-stats",
               "--dashboard-agent-listen-port", str(free_port()), "--metrics-export-port", str(free_port())]
        log = open(self.root / f"ray-{name}.log", "ab")  # noqa: SIM115 - kept open by the node's processes
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**self.env, "TRIMTAB_TEST_NODE": name})
        self.groups[name] = proc.pid
        if proc.wait(timeout=120) != 0:
            self.stop()
            raise RuntimeError(f"ray start {name} failed:\n{(self.root / f'ray-{name}.log').read_text()[-3000:]}")

    def _ask(self, setup: str, expression: str) -> Any:
        """Run `setup`, then print `expression` as JSON, in a driver of its own on the cluster."""
        code = (f"import json, ray; ray.init(address={self.address!r}, logging_level='ERROR', log_to_driver=False); "
                f"{setup}; print(json.dumps({expression}))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             env=self.env)
        return json.loads(out.stdout.strip().splitlines()[-1])

    def nodes(self) -> list[dict[str, Any]]:
        return self._ask("pass", "[{'alive': n['Alive'], 'ip': n['NodeManagerAddress'], "
                                 "'head': 'node:__internal_head__' in n['Resources']} for n in ray.nodes()]")

    def placement_groups(self) -> dict[str, dict[str, Any]]:
        """Every placement group by name: its state and the address of the node of each bundle."""
        return self._ask("ips = {n['NodeID']: n['NodeManagerAddress'] for n in ray.nodes()}",
                         "{g['name']: {'state': g['state'], 'nodes': [ips.get(g['bundles_to_node_id'].get(i)) "
                         "for i in range(len(g['bundles']))]} for g in ray.util.placement_group_table().values()}")

    def wait_nodes(self, alive: int, timeout_s: float = 60) -> str:
        """Wait until `alive` nodes are alive; returns the head's address."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            nodes = self.nodes()
            if sum(n["alive"] for n in nodes) == alive:
                return next(n["ip"] for n in nodes if n["head"])
            time.sleep(0.5)
        raise RuntimeError(f"the Ray cluster did not reach {alive} alive nodes")

    def kill(self, name: str) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.groups[name], signal.SIGKILL)

    def stop(self) -> None:
        for group in reversed(self.groups.values()):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def leftover_tasks(marker: str) -> list[int]:
    """Processes whose environment holds `marker` (a path of this test's data dir)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry.name))
            except OSError:
                continue
    return [p for p in found if p != os.getpid()]


RECORD = (
    'f="$0/$TRIMTAB_JOB_ID.$RANK.$TRIMTAB_ATTEMPT"; '
    'echo "$TRIMTAB_TEST_NODE $CUDA_VISIBLE_DEVICES $RANK $LOCAL_RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT '
    '$TRIMTAB_JOB_ID $TRIMTAB_CHECKPOINT_DIR $(date +%s.%N)" > "$f"; '
    'echo "hello from rank $RANK"; sleep "$1"; echo "$(date +%s.%N)" >> "$f"'
)


def record_cmd(out: Path, sleep_s: float) -> list[str]:
    return ["sh", "-c", RECORD, str(out), str(sleep_s)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RayCluster, Server, Path]]:
    root = tmp_path_factory.mktemp("raycluster")
    ray_cluster = RayCluster(root, server_node=True)
    server: Server | None = None
    try:
        server = Server(root / "data", "--backend", "ray", "--ray-address", ray_cluster.address,
                        "--ray-node-ip", RayCluster.SERVER_NODE_IP, "--policy", "priority",
                        env={**FAST_HEALTH, "TRIMTAB_RAY_LOG_DIR": str(root / "nodelogs"),
                             "TRIMTAB_RAY_START_TIMEOUT_S": str(START_TIMEOUT_S)}).start(timeout_s=90)
        out = root / "out"
        out.mkdir()
        yield ray_cluster, server, out
    finally:
        if server is not None:
            server.stop()
        ray_cluster.stop()
        time.sleep(0.5)
        for pid in leftover_tasks(str(root)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def wait_job(client: httpx.Client, job_id: int, states: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in states:
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} not {states} in {timeout_s} s: {job}")


def records(out: Path, job_id: int, attempt: int = 1) -> dict[int, list[str]]:
    found = {}
    for path in out.glob(f"{job_id}.*.{attempt}"):
        found[int(path.name.split(".")[1])] = path.read_text().split()
    return found


def wait_records(out: Path, job_id: int, tasks: int, attempt: int = 1, timeout_s: float = 60) -> None:
    """Wait until `tasks` tasks of the attempt have started (written their record)."""
    deadline = time.monotonic() + timeout_s
    while len(records(out, job_id, attempt)) < tasks:
        assert time.monotonic() < deadline, f"job {job_id} attempt {attempt}: not {tasks} tasks started"
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.ray_cluster
def test_gangs_spread_over_both_workers_start_together_with_the_right_environment(
        cluster: tuple[RayCluster, Server, Path]) -> None:
    _, server, out = cluster
    with server.client() as client:
        nodes = client.get("/v1/nodes").json()["nodes"]
        assert sorted(n["gpus"] for n in nodes) == [4, 4], nodes
        big = client.post("/v1/jobs", json={"command": record_cmd(out, 3), "gpus": 1, "tasks": 8}).json()["id"]
        job = wait_job(client, big, ("completed", "failed"), 120)
        assert job["state"] == "completed", job
        pair = client.post("/v1/jobs", json={"command": record_cmd(out, 1), "gpus": 2, "tasks": 2}).json()["id"]
        assert wait_job(client, pair, ("completed", "failed"), 120)["state"] == "completed"
        log = client.get(f"/v1/jobs/{big}/logs", params={"rank": 5}).text
    recs = records(out, big)
    assert sorted(recs) == list(range(8))
    assert {r[0] for r in recs.values()} == {"w1", "w2"}, "the gang of 8 spans both workers"
    by_run = {r["rank"]: r for r in job["runs"]}
    for rank, r in recs.items():
        _node, gpus, rank_s, _local, world, addr, port, job_s, ckpt, start, end = r
        assert (int(rank_s), world, job_s) == (rank, "8", str(big))
        assert gpus == ",".join(by_run[rank]["gpus"]) and len(gpus.split(",")) == 1
        assert ckpt == str(server.data_dir.absolute() / "tenants" / "default" / "checkpoints" / str(big))
        assert (addr, port) == (recs[0][5], recs[0][6]), "one rendezvous for the whole gang"
        assert addr == RayCluster.worker_ip(int(recs[0][0][1:])), "MASTER_ADDR is rank 0's node"
        assert float(end) - float(start) >= 3
    for node in ("w1", "w2"):  # on each worker, the gang's tasks hold distinct GPUs and local ranks 0..3
        mine = [r for r in recs.values() if r[0] == node]
        assert sorted(r[1] for r in mine) == ["0", "1", "2", "3"]
        assert sorted(r[3] for r in mine) == ["0", "1", "2", "3"]
    starts = [float(r[9]) for r in recs.values()]
    assert max(starts) - min(starts) < 1.5, "the gang's commands start together, once every actor is up"
    assert "hello from rank 5" in log
    pair_recs = records(out, pair)
    assert sorted(len(r[1].split(",")) for r in pair_recs.values()) == [2, 2]


@pytest.mark.slow
@pytest.mark.ray_cluster
def test_a_high_priority_gang_preempts_a_low_one_and_a_tenant_over_quota_waits(
        cluster: tuple[RayCluster, Server, Path]) -> None:
    ray_cluster, server, out = cluster
    with server.client() as client:
        token = client.post("/v1/tokens", json={"tenant": "team-q", "quota_gpus": 2}).json()["token"]
        low = client.post("/v1/jobs", json={"command": record_cmd(out, 60), "gpus": 1, "tasks": 8,
                                             "priority_class": "low"}).json()["id"]
        wait_job(client, low, ("running",), 60)
        wait_records(out, low, 8)
        # the gang holds one placement group, each bundle on the node of its task
        group = ray_cluster.placement_groups()[f"trimtab-gang-{low}.1"]
        ranks = sorted(client.get(f"/v1/jobs/{low}").json()["runs"], key=lambda r: r["rank"])
        assert group == {"state": "CREATED", "nodes": [r["node"].split("-")[0] for r in ranks]}, group
        assert set(group["nodes"]) == {RayCluster.worker_ip(1), RayCluster.worker_ip(2)}
        high = client.post("/v1/jobs", json={"command": record_cmd(out, 1), "gpus": 2, "tasks": 2,
                                              "priority_class": "high"}).json()["id"]
        assert wait_job(client, high, ("completed", "failed"), 90)["state"] == "completed"
        low_job = client.get(f"/v1/jobs/{low}").json()
        assert low_job["preemptions"] >= 1, low_job
        client.post(f"/v1/jobs/{low}/cancel")
        wait_job(client, low, ("cancelled",), 60)
    with server.client(token) as tenant:
        first = tenant.post("/v1/jobs", json={"command": record_cmd(out, 3), "gpus": 2}).json()["id"]
        second = tenant.post("/v1/jobs", json={"command": record_cmd(out, 1), "gpus": 1}).json()["id"]
        wait_job(tenant, first, ("running",), 60)
        time.sleep(1.0)
        assert tenant.get(f"/v1/jobs/{second}").json()["state"] == "pending", "over quota: it waits"
        assert wait_job(tenant, second, ("completed",), 60)["state"] == "completed"
    deadline = time.monotonic() + 20  # every gang's placement group is removed once its tasks are gone
    while any(g["state"] != "REMOVED" for g in ray_cluster.placement_groups().values()):
        assert time.monotonic() < deadline, ray_cluster.placement_groups()
        time.sleep(0.5)
    first_end = float(records(out, first)[0][-1])
    second_start = float(records(out, second)[0][9])
    assert second_start >= first_end - 0.5


@pytest.mark.slow
@pytest.mark.ray_cluster
def test_a_server_killed_mid_job_adopts_its_running_tasks_at_restart(
        cluster: tuple[RayCluster, Server, Path]) -> None:
    _, server, out = cluster
    with server.client() as client:
        job_id = client.post("/v1/jobs", json={"command": record_cmd(out, 6), "gpus": 1, "tasks": 2}).json()["id"]
        wait_records(out, job_id, 2)
    server.kill()
    server.start(timeout_s=90)
    with server.client() as client:
        job = wait_job(client, job_id, ("completed", "failed"), 90)
        log = client.get(f"/v1/jobs/{job_id}/logs", params={"rank": 1}).text
    assert (job["state"], job["attempts"]) == ("completed", 1), job
    assert "hello from rank 1" in log
    assert all(len(r) == 11 for r in records(out, job_id).values()), "both tasks ran to their end, once"


@pytest.mark.slow
@pytest.mark.ray_cluster
def test_a_lost_worker_node_requeues_its_job_without_a_retry_and_it_completes_on_the_survivor(
        cluster: tuple[RayCluster, Server, Path]) -> None:
    """Failover: a job submitted without retries runs on a worker whose raylet is killed. The lost node is the
    cluster's failure, not the job's: the attempt ends node-lost, no retry is spent, and the job completes on the
    surviving worker."""
    ray_cluster, server, out = cluster
    with server.client() as client:
        job_id = client.post("/v1/jobs", json={"command": record_cmd(out, 8), "gpus": 2, "tasks": 1}).json()["id"]
        wait_records(out, job_id, 1)
        first_node = records(out, job_id)[0][0]
        ray_cluster.kill(first_node)
        wait_records(out, job_id, 1, attempt=2)
        assert leftover_tasks(f"TRIMTAB_RUN_ID={job_id}.1.0") == [], "the lost node's task died with its node"
        job = wait_job(client, job_id, ("completed", "failed"), 120)
        assert job["state"] == "completed", json.dumps(job, indent=1)  # whole: its runs say why
        assert (job["attempts"], job["failures"], job["retries"]) == (2, 0, 0)
        assert [r["outcome"] for r in sorted(job["runs"], key=lambda r: r["attempt"])] == ["node-lost", "completed"]
        assert records(out, job_id, 2)[0][0] != first_node
        nodes = {n["name"]: n["healthy"] for n in client.get("/v1/nodes").json()["nodes"]}
        assert sorted(nodes.values()) == [False, True]
    # every ended task's actor removed its node-side log, except the one whose node died with it
    deadline = time.monotonic() + 15
    while len(list((out.parent / "nodelogs").iterdir())) > 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [p.name.split("-")[0] for p in (out.parent / "nodelogs").iterdir()] == [f"{job_id}.1.0"]


@pytest.mark.slow
@pytest.mark.ray_cluster
def test_a_server_whose_ray_node_is_lost_exits_and_its_restart_adopts_the_running_job(
        cluster: tuple[RayCluster, Server, Path]) -> None:
    """The server joined the cluster through the GPU-less node "srv": when that raylet dies, Ray drops the server's
    driver, so the server exits (code 3) saying why; started again through the head, it adopts the job, whose
    tasks ran on without it."""
    ray_cluster, server, out = cluster
    with server.client() as client:
        job_id = client.post("/v1/jobs", json={"command": record_cmd(out, 8), "gpus": 1, "tasks": 2}).json()["id"]
        wait_records(out, job_id, 2)
    ray_cluster.kill("srv")
    assert server.proc is not None
    assert server.proc.wait(timeout=30) == 3
    assert "joined the cluster through" in server.log.read_text()
    at = server.args.index("--ray-node-ip")
    server.args[at + 1] = ray_cluster.head_ip
    server.start(timeout_s=90)
    with server.client() as client:
        job = wait_job(client, job_id, ("completed", "failed"), 90)
    assert (job["state"], job["attempts"]) == ("completed", 1), job
    assert all(len(r) == 11 for r in records(out, job_id).values()), "both tasks ran to their end, once"


@pytest.mark.slow
@pytest.mark.ray_cluster
def test_a_worker_that_joins_is_taken_in_and_a_gang_spans_it(cluster: tuple[RayCluster, Server, Path]) -> None:
    """After the earlier stories one worker is left (4 GPUs). A third worker joins the running cluster: the server
    takes it in, and a gang of 2 tasks x 4 GPUs, which needs it, runs on the survivor and on it."""
    ray_cluster, server, out = cluster
    with server.client() as client:
        before = {n["name"] for n in client.get("/v1/nodes").json()["nodes"]}
        name = ray_cluster.add_worker()
        deadline = time.monotonic() + 30
        while len(client.get("/v1/nodes").json()["nodes"]) == len(before):
            assert time.monotonic() < deadline, "the new worker was not taken in"
            time.sleep(0.3)
        nodes = client.get("/v1/nodes").json()["nodes"]
        new = [n for n in nodes if n["name"] not in before]
        assert [(n["name"].split("-")[0], n["gpus"], n["healthy"]) for n in new] == \
            [(RayCluster.worker_ip(int(name[1:])), 4, True)]
        job_id = client.post("/v1/jobs", json={"command": record_cmd(out, 1), "gpus": 4, "tasks": 2}).json()["id"]
        job = wait_job(client, job_id, ("completed", "failed"), 90)
    assert job["state"] == "completed", json.dumps(job, indent=1)
    spans = {r[0] for r in records(out, job_id).values()}
    assert len(spans) == 2 and name in spans, spans


@pytest.mark.slow
@pytest.mark.ray_cluster
def test_a_task_that_ray_cannot_start_fails_in_time_and_the_next_one_runs(
        cluster: tuple[RayCluster, Server, Path]) -> None:
    """Other Ray work takes every GPU behind trimtab's back: the job's task, which trimtab placed on GPUs it thinks
    free, is never started by Ray, so the server fails the attempt after START_TIMEOUT_S and says why (it does not
    stay "running" for ever). Once the GPUs are back, the next job runs."""
    ray_cluster, server, out = cluster
    hog = subprocess.Popen([sys.executable, "-c", HOG, ray_cluster.address], stdout=subprocess.PIPE, text=True,
                           env=ray_cluster.env, start_new_session=True)
    try:
        assert hog.stdout is not None and hog.stdout.readline().startswith("holding"), "the GPUs were not taken"
        with server.client() as client:
            stuck = client.post("/v1/jobs", json={"command": record_cmd(out, 1), "gpus": 1}).json()["id"]
            job = wait_job(client, stuck, ("completed", "failed"), START_TIMEOUT_S + 40)
        assert job["state"] == "failed" and "not started by Ray" in job["reason"], job
        assert not records(out, stuck)
    finally:
        os.killpg(hog.pid, signal.SIGKILL)
        hog.wait()
    with server.client() as client:
        after = client.post("/v1/jobs", json={"command": record_cmd(out, 1), "gpus": 1}).json()["id"]
        assert wait_job(client, after, ("completed", "failed"), 90)["state"] == "completed"


@pytest.mark.slow
@pytest.mark.ray_cluster
def test_an_elastic_job_on_ray_is_shrunk_toward_its_target_and_resumes_from_its_checkpoint(
        cluster: tuple[RayCluster, Server, Path]) -> None:
    """A resize on the Ray backend is the same restart as on local GPUs (docs/elastic.md, "Live"): the elastic
    trainer reports 30% GPU utilisation against a target of 80%, and is restarted on Ray tasks at 2 (then 1), each
    start resuming from the last checkpoint with the new WORLD_SIZE and TRIMTAB_RESIZED=1."""
    _, server, out = cluster
    trainer = Path(__file__).with_name("elastic_trainer.py")
    elastic_out = out / "elastic"
    elastic_out.mkdir()
    with server.client() as client:
        job = client.post("/v1/jobs", json={"command": [sys.executable, str(trainer), str(elastic_out), "1200", "0.3"],
                                            "gpus": 1, "tasks": 4, "min_tasks": 1, "max_tasks": 4,
                                            "target_gpu_util": 0.8}).json()
        done = wait_job(client, job["id"], ("completed", "failed"), 180)
    assert done["state"] == "completed", done
    assert done["resizes"] >= 1
    starts = [line.split() for line in (elastic_out / "starts.log").read_text().splitlines()]
    worlds = [int(world) for _, world, _, _, _ in starts]
    assert worlds[:2] == [4, 2] and worlds == sorted(worlds, reverse=True), worlds
    assert [resized for _, _, _, resized, _ in starts] == ["0"] + ["1"] * (len(starts) - 1)
    saved = [line.split() for line in (elastic_out / "checkpoints.log").read_text().splitlines()]
    for (attempt, _, resumed, _, _), (before, _, _, _, _) in zip(starts[1:], starts, strict=False):
        last = max((int(step) for a, step in saved if int(a) <= int(before)), default=0)
        assert int(resumed) == last, f"attempt {attempt} resumed from {resumed}, the last checkpoint was {last}"
    assert (elastic_out / "done.log").read_text().count("done") == 1
