"""The informer's list + watch: events applied in order, a watch resumed from the last resourceVersion, 410 Gone
answered by a fresh list, a kind the cluster does not serve read as empty,
whatever error type the client raises for its 404."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the kube extra (lightkube) is not installed")

from lightkube import ApiError, Client, KubeConfig
from lightkube.models.meta_v1 import Status

from trimtab.kube.api import KINDS, Kind, KubeApi, status_code
from trimtab.kube.informer import Informer
from trimtab.kube.wire import Wire


def obj(name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "resourceVersion": version}}


class ListWatchApi:
    """Lists answer in turn from `lists`; watches from `watches` (a list of events, then an exception or None)."""

    def __init__(self, lists: list[Any], watches: list[tuple[list[tuple[str, dict[str, Any]]], Exception | None]]):
        self.lists, self.watches = lists, watches
        self.watched_from: list[str] = []
        self.idle = threading.Event()

    def list(self, kind: Kind) -> tuple[list[dict[str, Any]], str]:
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def watch(self, kind: Kind, version: str, timeout_s: int) -> Iterator[tuple[str, dict[str, Any]]]:
        self.watched_from.append(version)
        if not self.watches:
            self.idle.set()
            time.sleep(0.05)
            return
        events, end = self.watches.pop(0)
        yield from events
        if end is not None:
            raise end


def gone() -> ApiError:
    return ApiError(status=Status(code=410, message="too old resource version"))


def run_until_idle(api: ListWatchApi) -> Informer:
    informer = Informer(api, KINDS["pods"], lambda: None, backoff_max_s=0.01)  # type: ignore[arg-type]
    informer.start()
    assert api.idle.wait(5)
    informer.stop()
    return informer


def test_watch_events_apply_and_a_410_lists_again() -> None:
    api = ListWatchApi(
        lists=[([obj("a", "1")], "1"), ([obj("a", "7"), obj("b", "6")], "7")],
        watches=[([("ADDED", obj("c", "2")), ("MODIFIED", obj("a", "3"))], ConnectionError("cut")),
                 ([("DELETED", obj("c", "4"))], gone())])
    informer = run_until_idle(api)
    assert api.watched_from[:3] == ["1", "3", "7"]  # resumed after the cut from the last version, then re-listed
    assert informer.lists == 2
    assert sorted(o["metadata"]["name"] for o in informer.items()) == ["a", "b"]


def test_a_kind_the_cluster_does_not_serve_reads_as_empty() -> None:
    absent = ApiError(status=Status(code=404, message="the server could not find the requested resource"))
    api = ListWatchApi(lists=[absent], watches=[])
    informer = Informer(api, KINDS["podgroups"], lambda: None, absent_retry_s=60)  # type: ignore[arg-type]
    informer.start()
    assert informer.synced.wait(5)
    assert informer.items() == []
    informer.stop()


class GroupServer(ThreadingHTTPServer):
    """A loopback API server for one kind's list and watch: until `serve_kind` is set it answers as the API
    server answers for a group it does not serve (404, `404 page not found` in plain text, no JSON Status)."""

    serve_kind = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _GroupHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _GroupHandler(BaseHTTPRequestHandler):
    server: GroupServer

    def do_GET(self) -> None:
        if not self.server.serve_kind:
            self._send(404, "text/plain; charset=utf-8", b"404 page not found\n")
        elif "watch=" in self.path:
            time.sleep(0.2)  # an idle watch that the server ends
            self._send(200, "application/json", b"")
        else:
            body = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroupList",
                    "metadata": {"resourceVersion": "5"},
                    "items": [{"metadata": {"name": "g", "namespace": "default", "resourceVersion": "5"},
                               "spec": {"minMember": 2}}]}
            self._send(200, "application/json", json.dumps(body).encode())

    def _send(self, code: int, kind: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_group_the_api_server_does_not_serve_reads_as_empty_and_is_looked_for_again() -> None:
    """The API server answers an unserved group's list with a plain-text 404, which the client raises as an HTTP
    status error rather than an ApiError: it still reads as absent (synced and empty, so /readyz does not wait
    for it), and the kind is found once it is served."""
    server = GroupServer()
    config = KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "current-context": "x"}).get()
    api = KubeApi(Client(config=config), Wire.from_config(config), "trimtab")
    with pytest.raises(Exception) as raised:
        api.list(KINDS["podgroups"])
    assert status_code(raised.value) == 404
    informer = Informer(api, KINDS["podgroups"], lambda: None, absent_retry_s=0.3, backoff_max_s=60).start()
    try:
        assert informer.synced.wait(5)
        assert informer.items() == [] and informer.lists == 0
        server.serve_kind = True
        deadline = time.monotonic() + 5
        while not informer.items() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [o["metadata"]["name"] for o in informer.items()] == ["g"]
    finally:
        informer.stop()
        server.shutdown()
