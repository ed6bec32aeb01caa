"""A real Kubernetes control plane on loopback for the kube tests and benchmarks: etcd, kube-apiserver,
kube-controller-manager, optionally kube-scheduler, and KWOK as the kubelets of fake GPU nodes.

Owns KubeEnv (start, the admin kubeconfig, fake nodes, stop by pid) and the binaries' lookup. The binaries come
from `make kube-env` (tools/kube-env/build.sh) in $TRIMTAB_KUBE_CACHE/bin, by default
~/.cache/trimtab-kube/<release>/bin. Run as a script to keep one up by hand:
    python tests/kube/kube_env.py start DIR [--scheduler]   (prints the kubeconfig path; pids in DIR/pids)
    python tests/kube/kube_env.py stop DIR
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "v1.37.2"  # tools/kube-env/go.mod and build.sh pin the same
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
KWOK_NODE = {"kwok.x-k8s.io/node": "fake"}  # the annotation kwok manages nodes by
DURATION = "trimtab.io/duration"


def bin_dir() -> Path:
    cache = os.environ.get("TRIMTAB_KUBE_CACHE") or str(Path.home() / ".cache" / "trimtab-kube" / RELEASE)
    return Path(cache) / "bin"


def missing_binaries() -> list[str]:
    """The control-plane binaries not built yet (empty: the environment can start)."""
    return [name for name in BINARIES if not os.access(bin_dir() / name, os.X_OK)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# kwok nodes: Ready at once, their capacity kept, and their Ready condition's heartbeat renewed every 6-10 s,
# well inside the controller-manager's 20 s grace period (without it each node went NotReady every grace period,
# its pods were marked not Ready and kwok started their completion delays again: a 20 s pod ran 40 s). A node
# kwok no longer manages (its annotation removed, as the failover tests do) is NotReady 20 s later. Pods on them:
# Running once bound; Succeeded after their trimtab.io/duration (a Go duration, e.g. "30s"); deleted once
# deleted (no kubelet waits for containers to stop).
_STAGES = f"""
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {{name: trimtab-node-ready}}
spec:
  resourceRef: {{apiGroup: v1, kind: Node}}
  selector:
    matchExpressions:
    - {{key: '.status.conditions.[] | select( .type == "Ready" ) | .status', operator: NotIn, values: ["True"]}}
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      {{{{ range NodeConditions }}}}
      - {{type: {{{{ .type | Quote }}}}, status: {{{{ .status | Quote }}}}, reason: {{{{ .reason | Quote }}}},
         message: {{{{ .message | Quote }}}}, lastHeartbeatTime: {{{{ $now | Quote }}}},
         lastTransitionTime: {{{{ $now | Quote }}}}}}
      {{{{ end }}}}
      addresses:
      - {{type: InternalIP, address: {{{{ NodeIP | Quote }}}}}}
      - {{type: Hostname, address: {{{{ NodeName | Quote }}}}}}
      allocatable:
      {{{{ YAML .status.allocatable 1 }}}}
      capacity:
      {{{{ YAML .status.capacity 1 }}}}
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {{name: trimtab-node-heartbeat}}
spec:
  resourceRef: {{apiGroup: v1, kind: Node}}
  selector:
    matchExpressions:
    - {{key: '.status.conditions.[] | select( .type == "Ready" ) | .status', operator: In, values: ["True"]}}
  delay: {{durationMilliseconds: 6000, jitterDurationMilliseconds: 10000}}
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      {{{{ range .status.conditions }}}}
      - {{type: {{{{ .type | Quote }}}}, status: {{{{ .status | Quote }}}}, reason: {{{{ .reason | Quote }}}},
         message: {{{{ .message | Quote }}}}, lastHeartbeatTime: {{{{ $now | Quote }}}},
         lastTransitionTime: {{{{ .lastTransitionTime | Quote }}}}}}
      {{{{ end }}}}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {{name: trimtab-pod-running}}
spec:
  resourceRef: {{apiGroup: v1, kind: Pod}}
  selector:
    matchExpressions:
    - {{key: .metadata.deletionTimestamp, operator: DoesNotExist}}
    - {{key: .status.podIP, operator: DoesNotExist}}
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      - {{type: Initialized, status: "True", lastTransitionTime: {{{{ $now | Quote }}}}}}
      - {{type: Ready, status: "True", lastTransitionTime: {{{{ $now | Quote }}}}}}
      - {{type: ContainersReady, status: "True", lastTransitionTime: {{{{ $now | Quote }}}}}}
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - {{name: {{{{ .name | Quote }}}}, image: {{{{ .image | Quote }}}}, ready: true, restartCount: 0,
         state: {{running: {{startedAt: {{{{ $now | Quote }}}}}}}}}}
      {{{{ end }}}}
      hostIP: {{{{ NodeIPWith .spec.nodeName | Quote }}}}
      podIP: {{{{ PodIPWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace | Quote }}}}
      phase: Running
      startTime: {{{{ $now | Quote }}}}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {{name: trimtab-pod-complete}}
spec:
  resourceRef: {{apiGroup: v1, kind: Pod}}
  selector:
    matchExpressions:
    - {{key: .metadata.deletionTimestamp, operator: DoesNotExist}}
    - {{key: .status.phase, operator: In, values: [Running]}}
    - {{key: '.metadata.annotations["{DURATION}"]', operator: Exists}}
  delay:
    durationMilliseconds: 0
    durationFrom: {{expressionFrom: '.metadata.annotations["{DURATION}"]'}}
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      - {{type: Ready, status: "False", lastTransitionTime: {{{{ $now | Quote }}}}}}
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - {{name: {{{{ .name | Quote }}}}, image: {{{{ .image | Quote }}}}, ready: false, restartCount: 0,
         state: {{terminated: {{exitCode: 0, reason: Completed, finishedAt: {{{{ $now | Quote }}}}}}}}}}
      {{{{ end }}}}
      phase: Succeeded
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {{name: trimtab-pod-delete}}
spec:
  resourceRef: {{apiGroup: v1, kind: Pod}}
  selector:
    matchExpressions:
    - {{key: .metadata.deletionTimestamp, operator: Exists}}
  next:
    delete: true
"""


class KubeEnv:
    """One control plane under `workdir`. `start()` brings it up (raises RuntimeError naming the component and
    its log on failure); `stop()` ends every process it started, by pid. `kubeconfig` is an admin kubeconfig
    (token auth, the apiserver's self-signed certificate not verified: loopback only)."""

    def __init__(self, workdir: Path, *, scheduler: bool = False, crds: bool = True,
                 feature_gates: Sequence[str] = (), runtime_config: Sequence[str] = (),
                 node_grace_s: int = 20) -> None:
        self.dir = workdir
        self.node_grace_s = node_grace_s  # how long a node's heartbeat may lag before it is NotReady
        self.crds = crds  # whether the PodGroup CRDs are (to be) installed; a stock cluster has none
        # `--feature-gates` of the API server and controller-manager, `--runtime-config` of the API server
        self.feature_gates, self.runtime_config = list(feature_gates), list(runtime_config)
        self.bin = bin_dir()
        self.with_scheduler = scheduler
        self.token = secrets.token_hex(16)
        self.api_port = free_port()
        self.kubeconfig = workdir / "kubeconfig"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._args: dict[str, list[str]] = {}  # each component's arguments, to start it again

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def start(self, timeout_s: float = 180.0) -> KubeEnv:
        """Start every component; on failure stop those already started and raise."""
        try:
            return self._start(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout_s: float) -> KubeEnv:
        self.dir.mkdir(parents=True, exist_ok=True)
        etcd_port, peer_port = free_port(), free_port()
        self._spawn("etcd", [
            "--name", "default", "--data-dir", str(self.dir / "etcd"), "--unsafe-no-fsync",
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer_port}"])
        self._write_credentials()
        self._spawn("kube-apiserver", [
            "--etcd-servers", f"http://127.0.0.1:{etcd_port}", "--bind-address", "127.0.0.1",
            "--advertise-address", "127.0.0.1", "--secure-port", str(self.api_port),
            "--endpoint-reconciler-type", "none",  # the reconciler refuses a loopback advertise address
            "--cert-dir", str(self.dir / "certs"), "--token-auth-file", str(self.dir / "tokens.csv"),
            "--authorization-mode", "RBAC", "--service-cluster-ip-range", "10.96.0.0/16",
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-account-key-file", str(self.dir / "sa.pub"),
            "--service-account-signing-key-file", str(self.dir / "sa.key"),
            "--max-requests-inflight", "2000", "--max-mutating-requests-inflight", "1000", *self._gates(),
            *(["--runtime-config", ",".join(self.runtime_config)] if self.runtime_config else [])])
        self._wait_ready(timeout_s)
        self._spawn("kube-controller-manager", [
            "--kubeconfig", str(self.kubeconfig), "--bind-address", "127.0.0.1", "--secure-port", "0",
            "--leader-elect=false", "--use-service-account-credentials=false",
            "--service-account-private-key-file", str(self.dir / "sa.key"),
            "--kube-api-qps", "1000", "--kube-api-burst", "2000",
            "--node-monitor-grace-period", f"{self.node_grace_s}s", "--node-monitor-period", "2s", *self._gates()])
        stages = self.dir / "kwok-stages.yaml"
        stages.write_text(_STAGES)
        self._spawn("kwok", [
            "--kubeconfig", str(self.kubeconfig), "--config", str(stages), "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
            "--server-address", f"127.0.0.1:{free_port()}"])
        if self.with_scheduler:
            self.start_kube_scheduler()
        self._write_pids()
        return self

    def start_kube_scheduler(self) -> None:
        """Start kube-scheduler (stock, no leader election, the same client limits as trimtab is given)."""
        self._spawn("kube-scheduler", [
            "--kubeconfig", str(self.kubeconfig), "--bind-address", "127.0.0.1", "--secure-port", "0",
            "--leader-elect=false", "--kube-api-qps", "1000", "--kube-api-burst", "2000"])
        self._write_pids()

    def _gates(self) -> list[str]:
        return ["--feature-gates", ",".join(f"{gate}=true" for gate in self.feature_gates)] if self.feature_gates \
            else []

    def stop(self) -> None:
        """Ends every process it started, newest first: SIGTERM, then SIGKILL after 10 s."""
        for name, proc in reversed(list(self.procs.items())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self.procs.pop(name)
        (self.dir / "pids").unlink(missing_ok=True)

    def __enter__(self) -> KubeEnv:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------- the API

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None,
                content_type: str = "application/json") -> Any:
        """One call to the API server as the admin; the decoded JSON answer (text for the health paths). Raises
        urllib's HTTPError."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type})
        with urllib.request.urlopen(req, context=_insecure(), timeout=30) as resp:
            answer = resp.read()
            return json.loads(answer) if resp.headers.get_content_type() == "application/json" else answer.decode()

    def apply(self, obj: Mapping[str, Any]) -> Any:
        """Create one object (core, scheduling.k8s.io, policy or a CRD's group) from its manifest."""
        api, kind = obj["apiVersion"], obj["kind"]
        plural = _PLURALS.get(kind, kind.lower() + "s")
        base = f"/api/{api}" if "/" not in api else f"/apis/{api}"
        ns = obj.get("metadata", {}).get("namespace")
        cluster_scoped = kind in ("Node", "Namespace", "PriorityClass", "CustomResourceDefinition", "DeviceClass",
                                  "ResourceSlice", "Queue")
        if not cluster_scoped:
            ns = ns or "default"
            return self.request("POST", f"{base}/namespaces/{ns}/{plural}", obj)
        return self.request("POST", f"{base}/{plural}", obj)

    def add_gpu_nodes(self, count: int, gpus: int = 8, *, prefix: str = "gpu", labels: Mapping[str, str] | None = None,
                      taints: Sequence[Mapping[str, str]] = (), cpu: str = "64", memory: str = "512Gi") -> list[str]:
        """Create `count` kwok nodes with `gpus` allocatable nvidia.com/gpu each; their names."""
        names = [f"{prefix}-{i}" for i in range(count)]
        for name in names:
            capacity = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
            self.apply({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": name, "annotations": dict(KWOK_NODE),
                                     "labels": {"kubernetes.io/hostname": name, "type": "kwok", **(labels or {})}},
                        "spec": {"taints": [dict(t) for t in taints]},
                        "status": {"capacity": capacity, "allocatable": capacity}})
        return names

    def wait_nodes_ready(self, names: Sequence[str], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        pending = set(names)
        while pending:
            for node in self.request("GET", "/api/v1/nodes")["items"]:
                conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
                if conds.get("Ready") == "True":
                    pending.discard(node["metadata"]["name"])
            if pending and time.monotonic() > deadline:
                raise RuntimeError(f"kwok nodes not Ready after {timeout_s:.0f} s: {sorted(pending)[:5]}")
            time.sleep(0.2)

    # ------------------------------------------------------------------------------------------- internals

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115 - the child writes to it until stopped
        self.procs[name] = subprocess.Popen([str(self.bin / name), *args], stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        self._args[name] = args
        log.close()

    def kill_and_restart(self, name: str, down_s: float) -> None:
        """SIGKILL component `name` (etcd, kube-apiserver, ...), leave it down `down_s`, start it again with the
        same arguments and data (the API server: until it is ready again)."""
        proc = self.procs[name]
        proc.kill()
        proc.wait()
        time.sleep(down_s)
        self._spawn(name, self._args[name])
        self._write_pids()
        if name in ("etcd", "kube-apiserver"):
            self._wait_ready(120.0)

    def _write_credentials(self) -> None:
        key, pub = self.dir / "sa.key", self.dir / "sa.pub"
        if not key.exists():
            subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
            subprocess.run(["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)], check=True,
                           capture_output=True)
        (self.dir / "tokens.csv").write_text(f'{self.token},admin,admin,"system:masters"\n')
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "trimtab-test",
            "clusters": [{"name": "local", "cluster": {"server": self.server, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "trimtab-test", "context": {"cluster": "local", "user": "admin"}}]}, indent=1))

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    log = (self.dir / f"{name}.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"{name} exited with {proc.returncode}; its log ends:\n{log}")
            try:
                self.request("GET", "/readyz")
                self.request("GET", "/api/v1/namespaces/default")  # made by the apiserver once it has started
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"kube-apiserver not ready after {timeout_s:.0f} s; see "
                                       f"{self.dir / 'kube-apiserver.log'}") from None
                time.sleep(0.2)

    def _write_pids(self) -> None:
        (self.dir / "pids").write_text(json.dumps({n: p.pid for n, p in self.procs.items()}))

    def wait_served(self, path: str, timeout_s: float = 30.0) -> None:
        """Wait until the API server answers GET `path` (a CRD's kind is served a moment after it is created)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.request("GET", path)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{path} not served after {timeout_s:.0f} s") from None
                time.sleep(0.2)

    def wait_service_account(self, namespace: str = "default") -> None:
        """Pods are refused in a namespace until the controller-manager has made its default ServiceAccount."""
        self.wait_served(f"/api/v1/namespaces/{namespace}/serviceaccounts/default")


def needs_crds(env: KubeEnv) -> None:
    """Skip a story that needs PodGroup objects on a stock control plane (its Job form runs there instead)."""
    import pytest  # the benchmarks use this module without pytest

    if not env.crds:
        pytest.skip("a PodGroup of bare pods needs the PodGroup CRDs; this control plane is stock (no CRDs)")


def run_trimtab_kube(kube_env: KubeEnv, *args: str, log_name: str = "trimtab-kube") -> subprocess.Popen[bytes]:
    """`trimtab kube` for the environment, as a user runs it; its log is kube_env.dir/<log_name>.log."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with open(kube_env.dir / f"{log_name}.log", "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "trimtab.cli", "kube", "--kubeconfig", str(kube_env.kubeconfig),
                                 "--resync-s", "1", "--endpoints", "", "-v", *args], stdout=log,
                                stderr=subprocess.STDOUT, env=env)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


_PLURALS = {"PriorityClass": "priorityclasses", "ResourceQuota": "resourcequotas", "DeviceClass": "deviceclasses",
            "PodDisruptionBudget": "poddisruptionbudgets", "CustomResourceDefinition": "customresourcedefinitions"}


def _insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _stop_from_pids(workdir: Path, grace_s: float = 15.0) -> None:
    """Stop the processes a `start` from the command line left running, by the pids it wrote: SIGTERM, then
    SIGKILL for those still alive after `grace_s`."""
    pids = list(json.loads((workdir / "pids").read_text()).values())
    for pid in reversed(pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if _alive(pid)]
        time.sleep(0.2)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    (workdir / "pids").unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False

if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in ("start", "stop"):
        sys.exit("usage: kube_env.py start DIR [--scheduler] | stop DIR")
    folder = Path(sys.argv[2]).resolve()
    if sys.argv[1] == "stop":
        _stop_from_pids(folder)
    else:
        if missing_binaries():
            sys.exit(f"missing {', '.join(missing_binaries())} in {bin_dir()}: run `make kube-env`")
        env = KubeEnv(folder, scheduler=sys.argv[3:] == ["--scheduler"]).start()
        env.procs.clear()  # they keep running after this process exits; `stop DIR` ends them
        print(env.kubeconfig)
