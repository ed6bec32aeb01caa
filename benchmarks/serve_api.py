"""Benchmark of the `trimtab serve` API on loopback: sustained submissions per second, and API latency (p50, p99)
under an open-loop load of 100 requests per second. Prints one JSON line.

Usage (from the project root):
    .venv/bin/python benchmarks/serve_api.py [--submissions 2000] [--clients 4] [--rate 100] [--seconds 20]
        [--db URL]

A blocker job holds every GPU, so submitted jobs stay queued: the numbers measure the API, the store commit and
the scheduler's enqueue, not process start-up. Latency is measured from each request's scheduled send time, so a
slow answer also delays the clock of the requests behind it (no coordinated omission)."""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GPUS = 8


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(data_dir: Path, port: int, db: str | None) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "trimtab.cli", "serve", "--data-dir", str(data_dir), "--port", str(port),
           "--gpus", str(GPUS)]
    if db:
        cmd += ["--db", db]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not start")


def submissions_per_s(url: str, token: str, count: int, clients: int) -> float:
    """`count` submissions from `clients` keep-alive connections, as fast as answered."""
    per_client = count // clients
    spec = {"command": ["true"], "gpus": 1}

    def run(_: int) -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as c:
            for _ in range(per_client):
                r = c.post("/v1/jobs", json=spec)
                r.raise_for_status()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(run, range(clients)))
    return per_client * clients / (time.perf_counter() - t0)


def latency_at_rate(url: str, token: str, rate_per_s: float, seconds: float, job_ids: list[int]) -> dict[str, float]:
    """Open-loop load: a request every 1/rate s for `seconds`: half job reads, a quarter lists of the queue,
    a quarter submissions. Returns latency percentiles in ms and the rate achieved. One keep-alive client is
    shared by the sending threads and warmed up first (client start-up is not the server's latency)."""
    rng = random.Random(1)
    latencies: list[float] = []
    lock = threading.Lock()
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30,
                          limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))

    def one(scheduled: float, kind: float) -> None:
        delay = scheduled - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        if kind < 0.5:
            r = client.get(f"/v1/jobs/{rng.choice(job_ids)}")
        elif kind < 0.75:
            r = client.get("/v1/queues")
        else:
            r = client.post("/v1/jobs", json={"command": ["true"], "gpus": 1})
        r.raise_for_status()
        with lock:
            latencies.append((time.perf_counter() - scheduled) * 1000.0)

    count = int(rate_per_s * seconds)
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda _: client.get("/healthz"), range(64)))  # threads and connections up
        t0 = time.perf_counter() + 0.2
        for i in range(count):
            pool.submit(one, t0 + i / rate_per_s, rng.random())
    wall = time.perf_counter() - t0
    client.close()
    lat = np.array(latencies)
    return {"requests": int(lat.size), "rate_per_s": round(lat.size / wall, 1),
            "p50_ms": round(float(np.percentile(lat, 50)), 2), "p99_ms": round(float(np.percentile(lat, 99)), 2),
            "max_ms": round(float(lat.max()), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--submissions", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--db", default=None, help="store URL (default: SQLite in a temporary data dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc = start_server(Path(tmp) / "data", port, args.db)
        url = f"http://127.0.0.1:{port}"
        token = (Path(tmp) / "data" / "admin.token").read_text().strip()
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as c:
                blocker = c.post("/v1/jobs", json={"command": ["sleep", "3600"], "gpus": GPUS}).json()["id"]
                time.sleep(0.5)
            rate = submissions_per_s(url, token, args.submissions, args.clients)
            latency = latency_at_rate(url, token, args.rate, args.seconds, list(range(1, args.submissions)))
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as c:
                c.post(f"/v1/jobs/{blocker}/cancel")
                time.sleep(0.5)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    print(json.dumps({"benchmark": "serve_api", "store": "postgresql" if args.db else "sqlite",
                      "submissions": args.submissions, "clients": args.clients,
                      "submissions_per_s": round(rate, 1), "load_rate_per_s": args.rate,
                      "latency": latency, "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
