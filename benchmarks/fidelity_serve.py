"""The serve world of benchmarks/fidelity.py: `trimtab serve --policy P` on virtual GPUs shaped as the manifests'
nodes, each workload posted to its API at its `trimtab.io/submit-time`, each task a process that sleeps for its
`trimtab.io/duration` (a container without a command is given `sleep <duration>`).

A submission is one workload as the server reads it: a Pod, a Job, or a PodGroup with the pods that name it. The
namespace is the tenant. The run's record is the store's, read back through the API at the end: each job's runs
(start and end of every task of every attempt) and its preemptions."""

from __future__ import annotations

import copy
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from fidelity_kube import submit_s
from trimtab.formats.k8s import load_manifests
from trimtab.formats.k8s.workloads import COSCHED_GROUP
from trimtab.units import parse_duration_s

ROOT = Path(__file__).resolve().parents[1]
DURATION = "trimtab.io/duration"
POD_KINDS = ("Pod", "Job")


def cluster_file(manifests_path: Path, out: Path) -> Path:
    """The manifests' nodes as a YAML node-group file (`trimtab serve --cluster`), one named group per node."""
    nodes = load_manifests(manifests_path).nodes
    groups = [{"name": n.name, "gpus": n.capacity.gpus, "cpu": f"{n.capacity.cpu_milli}m",
               "memory": f"{n.capacity.mem_mib}Mi", "rack": n.rack} for n in nodes]
    out.write_text(yaml.safe_dump({"nodes": groups}, sort_keys=False))
    return out


def _with_sleep(pod_meta: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """The pod spec with `sleep <duration>` as the command of each container that has none."""
    spec = copy.deepcopy(spec)
    seconds = parse_duration_s(str((pod_meta.get("annotations") or {}).get(DURATION, "0s")))
    for container in spec.get("containers") or []:
        container.setdefault("command", ["sleep", f"{seconds:g}"])
    return spec


def submissions(docs: list[dict[str, Any]]) -> list[tuple[float, list[dict[str, Any]]]]:
    """(submit time, documents) of each workload: a Pod or a Job alone, a PodGroup with its pods."""
    members: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for doc in docs:
        group = ((doc.get("metadata") or {}).get("labels") or {}).get(COSCHED_GROUP)
        if doc["kind"] == "Pod" and group:
            members.setdefault((doc["metadata"].get("namespace", "default"), group), []).append(doc)
    out = []
    for doc in docs:
        meta = doc.get("metadata") or {}
        key = (meta.get("namespace", "default"), meta.get("name"))
        if doc["kind"] == "PodGroup":
            out.append((submit_s(doc), [doc] + [_pod(p) for p in members.get(key, [])]))
        elif doc["kind"] == "Pod" and not (meta.get("labels") or {}).get(COSCHED_GROUP):
            out.append((submit_s(doc), [_pod(doc)]))
        elif doc["kind"] == "Job":
            job = copy.deepcopy(doc)
            template = job["spec"]["template"]
            template["spec"] = _with_sleep(template.get("metadata") or {}, template["spec"])
            out.append((submit_s(doc), [job]))
    return sorted(out, key=lambda item: item[0])


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "spec": _with_sleep(doc["metadata"], doc["spec"])}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_server(workdir: Path, cluster: Path, policy: str) -> tuple[subprocess.Popen[bytes], str, str]:
    port = _free_port()
    data = workdir / "data"
    cmd = [sys.executable, "-m", "trimtab.serve", "serve", "--data-dir", str(data), "--port", str(port),
           "--cluster", str(cluster), "--policy", policy, "--grace-s", "2"]
    if os.geteuid() == 0:
        cmd.append("--shared-identity")
    log = open(workdir / "serve.log", "ab")  # noqa: SIM115 (the server's log outlives this call)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"trimtab serve exited with {proc.returncode}: see {workdir / 'serve.log'}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url, (data / "admin.token").read_text().strip()
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"trimtab serve did not answer in 60 s: see {workdir / 'serve.log'}")


def run_serve(docs: list[dict[str, Any]], manifests_path: Path, policy: str,
              workdir: Path) -> dict[str, dict[str, Any]]:
    """The live run on trimtab serve: per job (tenant/name) its submit time (as the store booked it), its first
    start, the start of its last attempt, its end and its preemptions, in seconds from the workload's start."""
    proc, url, token = _start_server(workdir, cluster_file(manifests_path, workdir / "cluster.yaml"), policy)
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
            start = time.time()
            for at_s, group in submissions(docs):
                time.sleep(max(start + at_s - time.time(), 0.0))
                body = yaml.safe_dump_all(group, sort_keys=False)
                r = client.post("/v1/jobs", content=body, headers={"Content-Type": "application/yaml"})
                if r.status_code not in (200, 201):
                    raise RuntimeError(f"{group[0]['metadata'].get('name')}: {r.status_code} {r.text}")
            jobs = _wait_all(client, 600.0)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {f"{j['tenant']}/{j['name']}": _record(j, start) for j in jobs}


def _wait_all(client: httpx.Client, timeout_s: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    jobs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        jobs = client.get("/v1/jobs", params={"limit": 10000}).json()["jobs"]
        done = sum(1 for j in jobs if j["state"] in ("completed", "failed", "cancelled"))
        print(f"{done} of {len(jobs)} jobs done", file=sys.stderr)
        if done == len(jobs):
            return jobs
        time.sleep(5.0)
    return jobs


def _record(job: dict[str, Any], start: float) -> dict[str, Any]:
    runs = job["runs"]
    last = max((r["attempt"] for r in runs), default=None)
    last_runs = [r for r in runs if r["attempt"] == last]
    ended = job["state"] == "completed" and all(r["end_s"] is not None for r in last_runs)
    return {"first_start": min(r["start_s"] for r in runs) - start if runs else None,
            "last_start": min(r["start_s"] for r in last_runs) - start if last_runs else None,
            "end": max(r["end_s"] for r in last_runs) - start if ended else None,
            "preemptions": job["preemptions"], "submit": job["submit_s"] - start}
