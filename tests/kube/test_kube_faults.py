"""trimtab kube under control-plane faults, each during a burst of gangs and single pods on a pool of its own:
the API server SIGKILLed and restarted (same etcd), etcd SIGKILLed and restarted, every watch connection cut at
once and the API server answering 429 and 503 for a while (through fault_proxy.FaultProxy), a node flapping
NotReady and back, trimtab itself SIGKILLed mid-binding with one replica and restarted, and the leader of two
replicas SIGSTOPped past its lease and resumed once the standby leads. Checked from the API server, sampled
every 0.2 s: no pod bound twice (its node never changes; at most one Scheduled Event each), no node's GPUs
over-committed at any moment, no gang left partly bound, and every pod bound once the cluster is healthy again."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

import pytest
from fault_proxy import FaultProxy
from kube_env import KWOK_NODE, KubeEnv, run_trimtab_kube, stop_process
from kube_objects import gpu_pod
from test_kube_failover import LEASE_S, RETRY_S, leading, node_condition, pool
from test_kube_live import create_gang, create_pod, wait_for

pytestmark = pytest.mark.kube

NODES, GPUS = 4, 8
GANGS, MEMBERS, SINGLES = 12, 4, 8  # 56 one-GPU pods on 32 GPUs: the last wait for the first to end
RUN_S = 10  # each pod's run (kwok completes it)


class Watch:
    """Samples one scheduler's pods every 0.2 s: each pod's node (it must never change) and the GPUs of running
    pods per node (never above its capacity); a sample the API server cannot answer (it is down) is skipped."""

    def __init__(self, env: KubeEnv, scheduler: str) -> None:
        self.env, self.scheduler = env, scheduler
        self.nodes: dict[str, str] = {}
        self.moved: list[str] = []
        self.over: list[tuple[str, int]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(0.2):
            try:
                pods = self.env.request("GET", "/api/v1/namespaces/default/pods")["items"]
            except Exception:
                continue
            held: dict[str, int] = {}
            for pod in pods:
                name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
                if pod["spec"].get("schedulerName") != self.scheduler or not node:
                    continue
                if self.nodes.setdefault(name, node) != node:
                    self.moved.append(name)
                if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    held[node] = held.get(node, 0) + 1
            self.over += [(node, n) for node, n in held.items() if n > GPUS]


class Story:
    """One fault's run: the pool, the replicas of scheduler `name`, the burst, and what the checks read."""

    def __init__(self, env: KubeEnv, name: str, replicas: int, proxied: bool) -> None:
        self.env, self.name = env, name
        self.proxy = FaultProxy(env.api_port, env.dir) if proxied else None
        taint, self.spec = pool(name)
        self.nodes = env.add_gpu_nodes(NODES, prefix=name, labels={"pool": name}, taints=[taint])
        env.wait_nodes_ready(self.nodes)
        self.logs = [f"{name}-{i}" for i in range(replicas)]
        self.args = ["--scheduler-name", name, "--kube-api-qps", "20", "--kube-api-burst", "10"]
        self.args += ["--lease-namespace", "default"] if replicas > 1 else ["--no-leader-elect"]
        if self.proxy is not None:
            self.args += ["--kubeconfig", str(self.proxy.kubeconfig(env.kubeconfig, env.dir / f"{name}.kubeconfig"))]
        self.procs = [run_trimtab_kube(env, *self.args, log_name=log) for log in self.logs]
        self.gangs: dict[str, list[str]] = {}
        self.singles: list[str] = []

    def create(self, part: int) -> None:
        """Half the burst (`part` 0 or 1): its gangs, then its single pods."""
        member = gpu_pod("m", 1, scheduler=self.name, annotations={"trimtab.io/duration": f"{RUN_S}s"},
                         **self.spec)
        for g in range(part * GANGS // 2, (part + 1) * GANGS // 2):
            self.gangs[f"{self.name}-g{g}"] = create_gang(self.env, f"{self.name}-g{g}", MEMBERS, member)
        for i in range(part * SINGLES // 2, (part + 1) * SINGLES // 2):
            single = f"{self.name}-s{i}"
            create_pod(self.env, {**member, "metadata": {**member["metadata"], "name": single}})
            self.singles.append(single)

    def pods(self) -> list[str]:
        return [pod for pods in self.gangs.values() for pod in pods] + self.singles

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGCONT)
            stop_process(proc)


def run_story(env: KubeEnv, name: str, fault: Callable[[Story], str], replicas: int = 1,
              proxied: bool = False) -> None:
    """The burst's first half, the fault once a first gang is bound, the second half once it is over (the fault
    says what it did), then the checks; prints the time from the end of the fault to every pod bound."""
    story = Story(env, name, replicas, proxied)
    try:
        wait_for("a leader", lambda: replicas == 1 or leading(env, story.logs), timeout_s=60)
        with Watch(env, name) as watch:
            story.create(0)
            wait_for("a first gang bound", lambda: len(watch.nodes) >= MEMBERS, timeout_s=60)
            what = fault(story)
            recovered_at = time.monotonic()
            story.create(1)
            wait_for("every pod bound", lambda: set(watch.nodes) >= set(story.pods()), timeout_s=180)
            bound_s = time.monotonic() - recovered_at
            time.sleep(3)  # anything still meant to be written has been
        events = env.request("GET", "/api/v1/namespaces/default/events?fieldSelector=reason=Scheduled")["items"]
        scheduled = [e["involvedObject"]["name"] for e in events if e["involvedObject"]["name"] in story.pods()]
        twice = len(scheduled) - len(set(scheduled))
        print(f"{name}: {what}; every pod bound {bound_s:.1f} s after it; Scheduled Events written twice: {twice}")
        assert watch.moved == [] and watch.over == [], (watch.moved, watch.over)
        # A cut connection may lose the answer to an Event's POST, which the write path then sends once more: the
        # Event is recorded twice though the pod was bound once (a second binding the API server refuses, 409).
        assert twice == 0 or fault is cut_watches, "no pod bound twice"
        for gang, pods in story.gangs.items():
            assert {watch.nodes.get(pod) is not None for pod in pods} == {True}, f"gang {gang} bound whole"
        # the burst is 56 pods of RUN_S on 32 GPUs: the last wave waits for the first to end
        assert bound_s < 30 + 2 * RUN_S, bound_s
    finally:
        story.stop()


def restart(component: str, down_s: float) -> Callable[[Story], str]:
    def fault(story: Story) -> str:
        story.env.kill_and_restart(component, down_s)
        return f"{component} SIGKILLed, down {down_s:.0f} s, restarted"
    return fault


def cut_watches(story: Story) -> str:
    """Close every connection between trimtab and the API server at once, watches and writes alike."""
    assert story.proxy is not None
    time.sleep(1)  # bindings in flight
    return f"every connection cut at once ({story.proxy.cut()})"


def refuse(code: int, seconds: float) -> Callable[[Story], str]:
    def fault(story: Story) -> str:
        assert story.proxy is not None
        story.proxy.refuse(code, seconds)
        time.sleep(seconds)
        return f"the API server answering {code} for {seconds:.0f} s ({story.proxy.refused} requests refused)"
    return fault


def kill_trimtab(story: Story) -> str:
    """SIGKILL the one replica while it binds (its writes paced at 20 a second), and start it again."""
    story.procs[0].kill()
    story.procs[0].wait()
    story.procs[0] = run_trimtab_kube(story.env, *story.args, log_name=f"{story.name}-again")
    return "trimtab SIGKILLed mid-binding and started again"


def flap_node(story: Story) -> str:
    """One node stops its heartbeat until it is NotReady (and tainted), then is Ready again, twice."""
    node, env = story.nodes[0], story.env
    for _ in range(2):
        for marks in ({key: None for key in KWOK_NODE}, KWOK_NODE):
            env.request("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"annotations": marks}},
                        content_type="application/merge-patch+json")
            ready = marks is KWOK_NODE
            wait_for(f"{node} {'Ready' if ready else 'NotReady'}",
                     lambda ready=ready: (node_condition(env, node) == "True") == ready, timeout_s=90)
    return f"node {node} NotReady and back, twice"


def pause_leader(story: Story) -> str:
    """SIGSTOP the leader (its writes in flight stop with it) past its lease; SIGCONT once the standby leads."""
    first = leading(story.env, story.logs)
    assert first is not None
    paused, other = story.procs[story.logs.index(first)], story.logs[1 - story.logs.index(first)]
    paused.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    wait_for("the standby leading", lambda: "leading as" in (story.env.dir / f"{other}.log").read_text(),
             timeout_s=LEASE_S + 4 * RETRY_S + 30)
    led_s = time.monotonic() - stopped_at
    time.sleep(max(0.0, stopped_at + LEASE_S + 2 - time.monotonic()))
    paused.send_signal(signal.SIGCONT)
    time.sleep(2)
    refused = (story.env.dir / f"{first}.log").read_text().count("not holding the Lease")
    return f"leader SIGSTOPped, standby leading {led_s:.1f} s later, resumed: {refused} writes refused by its fence"


FAULTS: dict[str, tuple[Callable[[Story], str], int, bool]] = {  # (the fault, replicas, through the proxy)
    "apiserver": (restart("kube-apiserver", 3.0), 1, False),
    "etcd": (restart("etcd", 3.0), 1, False),
    "watches-cut": (cut_watches, 1, True),
    "429": (refuse(429, 8.0), 1, True),
    "503": (refuse(503, 8.0), 1, True),
    "node-flap": (flap_node, 1, False),
    "trimtab-kill": (kill_trimtab, 1, False),
    "leader-stop": (pause_leader, 2, False),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_no_pod_bound_twice_no_node_over_committed_no_gang_half_bound_under_a_fault(kube_env: KubeEnv,
                                                                                   fault: str) -> None:
    if kube_env.crds:
        pytest.skip("each fault runs once, on the stock control plane (its gangs are Jobs)")
    action, replicas, proxied = FAULTS[fault]
    run_story(kube_env, f"f-{fault}", action, replicas, proxied)
