"""The light write path: the bodies and paths KubeApi sends, the server's Status as ApiError, credentials asked
again after a 401, a kept-alive connection the server closed sent again once; Events best effort (dropped, never
waited for, when the queue is full); Lease renewals on a rate limit of their own."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the kube extra (lightkube) is not installed")

from lightkube import ApiError
from lightkube.resources.core_v1 import Pod

from trimtab.kube.api import KubeApi, Unanswered
from trimtab.kube.events import EventRecorder
from trimtab.kube.wire import Wire


class Server:
    """An HTTP server on 127.0.0.1 that records each request and answers from `answers` (status, body) in turn,
    201 {} once they run out; `close_after` closes the connection after that many requests on it."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self.close_after = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the API server

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                server.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                                        "body": json.loads(self.rfile.read(length) or b"null")})
                status, body = server.answers.pop(0) if server.answers else (201, {})
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.served = getattr(self, "served", 0) + 1
                if server.close_after and self.served >= server.close_after:
                    self.close_connection = True

            do_POST = do_PATCH = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.http.shutdown()
    s.http.server_close()


class Reads:
    """The reads of a KubeApi: `get` answers each pod as bound to `nodes[name]` ("" none), or raises `failure`."""

    def __init__(self, nodes: dict[str, str] | None = None, failure: Exception | None = None) -> None:
        self.nodes, self.failure, self.gets = nodes or {}, failure, 0

    def get(self, kind: Any, name: str, namespace: str) -> Pod:
        self.gets += 1
        if self.failure is not None:
            raise self.failure
        return Pod.from_dict({"metadata": {"name": name, "namespace": namespace, "uid": "u"},
                              "spec": {"containers": [], "nodeName": self.nodes.get(name) or None}})


def api_for(server: Server, credentials: list[str], qps: float = 0, burst: int = 0,
            reads: Reads | None = None) -> KubeApi:
    """A KubeApi whose writes go to `server`; each credentials() call takes the next token of `credentials`."""
    tokens = iter(credentials)
    wire = Wire(server.url, None, lambda: {"Authorization": f"Bearer {next(tokens)}"})
    return KubeApi(reads or Reads(), wire, "trimtab", qps, burst)  # type: ignore[arg-type]


def test_a_binding_posts_the_binding_subresource_with_the_credentials(server: Server) -> None:
    api = api_for(server, ["t1"])
    api.bind("team-a", "p1", "uid-1", "n3")
    api.mark_unschedulable("team-a", "p2", "0/4 nodes are available")
    sent = server.requests
    assert sent[0]["method"] == "POST"
    assert sent[0]["path"] == "/api/v1/namespaces/team-a/pods/p1/binding?fieldManager=trimtab"
    assert sent[0]["headers"]["Authorization"] == "Bearer t1"
    assert sent[0]["body"] == {"apiVersion": "v1", "kind": "Binding",
                               "metadata": {"name": "p1", "namespace": "team-a", "uid": "uid-1"},
                               "target": {"apiVersion": "v1", "kind": "Node", "name": "n3"}}
    assert sent[1]["method"] == "PATCH" and sent[1]["path"].startswith("/api/v1/namespaces/team-a/pods/p2/status")
    assert sent[1]["headers"]["Content-Type"] == "application/strategic-merge-patch+json"
    condition = sent[1]["body"]["status"]["conditions"][0]
    assert (condition["reason"], condition["message"]) == ("Unschedulable", "0/4 nodes are available")


def test_a_refusal_raises_the_servers_status_and_a_401_asks_for_credentials_again(server: Server) -> None:
    api = api_for(server, ["old", "new"], reads=Reads({"p1": "n1"}))
    server.answers = [(409, {"kind": "Status", "code": 409, "message": "pod p1 is already assigned to node n1"}),
                      (401, {"kind": "Status", "code": 401, "message": "Unauthorized"})]
    with pytest.raises(ApiError) as refused:
        api.bind("default", "p1", "u", "n2")
    assert (refused.value.status.code, refused.value.status.message) == (409, "pod p1 is already assigned to node n1")
    api.evict("default", "p2")  # 401, then sent again with the new token
    assert [r["headers"]["Authorization"] for r in server.requests[1:]] == ["Bearer old", "Bearer new"]
    assert server.requests[-1]["path"].startswith("/api/v1/namespaces/default/pods/p2/eviction")


def test_a_kept_alive_connection_the_server_closed_is_replaced_and_the_request_sent_once(server: Server) -> None:
    api = api_for(server, ["t"])
    server.close_after = 1  # every connection closed after its first answer, without saying so
    for i in range(3):
        api.bind("default", f"p{i}", "u", "n1")
    assert [r["body"]["metadata"]["name"] for r in server.requests] == ["p0", "p1", "p2"]


def test_events_never_hold_up_the_caller_and_are_dropped_when_the_queue_is_full() -> None:
    """client-go's rule: at most so many Events wait; one recorded while the queue is full is dropped."""
    release, writing = threading.Event(), threading.Event()
    written: list[str] = []

    def write(pod: dict[str, Any], reason: str, message: str, warning: bool) -> None:
        writing.set()
        release.wait(10)
        written.append(pod["metadata"]["name"])

    recorder = EventRecorder(write, capacity=2)
    pod = {"metadata": {"name": "p0", "namespace": "default"}}
    recorder.record(pod, "Scheduled", "m")
    assert writing.wait(5)  # the writer holds p0: two more fit in the queue
    started = time.monotonic()
    kept = [recorder.record({"metadata": {"name": f"p{i}", "namespace": "default"}}, "Scheduled", "m")
            for i in range(1, 6)]
    assert time.monotonic() - started < 0.5
    assert kept == [True, True, False, False, False] and recorder.dropped == 3
    release.set()
    recorder.flush()
    assert written == ["p0", "p1", "p2"]


def test_lease_renewals_do_not_wait_behind_a_burst_of_bindings() -> None:
    """kube-scheduler's leader election has a client (and rate limit) of its own; so has trimtab's."""

    class NoLease:
        def get(self, *args: Any, **kwargs: Any) -> None:
            from lightkube.models.meta_v1 import Status
            raise ApiError(status=Status(code=404, message="not found"))

    api = KubeApi(NoLease(), None, "trimtab", qps=1, burst=1)  # type: ignore[arg-type]
    api.limit.take()  # the bindings have taken the burst: the next write waits a second
    started = time.monotonic()
    assert api.get_lease("kube-system", "trimtab") is None
    assert time.monotonic() - started < 0.5


def test_a_binding_refused_after_it_landed_is_read_back_as_bound(server: Server) -> None:
    """A cut connection loses the answer of a binding that landed; sent again, it is refused as a second binding
    (409). The pod read back is bound to the node asked for: the binding stands."""
    reads = Reads({"p1": "n2"})
    server.answers = [(409, {"kind": "Status", "code": 409, "message": "pod p1 is already assigned to node n2"})]
    api_for(server, ["t"], reads=reads).bind("default", "p1", "u", "n2")
    assert reads.gets == 1


def test_a_binding_that_did_not_land_raises_its_error(server: Server) -> None:
    server.answers = [(429, {"kind": "Status", "code": 429, "message": "too many requests"})]
    with pytest.raises(ApiError) as refused:
        api_for(server, ["t"], reads=Reads({"p1": ""})).bind("default", "p1", "u", "n2")
    assert refused.value.status.code == 429


def test_a_binding_whose_pod_cannot_be_read_back_is_unanswered(server: Server,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the binding's answer nor the pod: the binding may have landed, and the caller must hold its GPUs."""
    import trimtab.kube.api

    monkeypatch.setattr(trimtab.kube.api, "READBACK_S", 1.0)
    reads = Reads(failure=ConnectionResetError("cut"))
    server.answers = [(503, {"kind": "Status", "code": 503, "message": "unavailable"})]
    with pytest.raises(Unanswered, match="could not be read back"):
        api_for(server, ["t"], reads=reads).bind("default", "p1", "u", "n2")
    assert reads.gets >= 2  # read again after a pause
