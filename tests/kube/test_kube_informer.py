"""The informer's list + watch: events applied in order, a watch resumed from the last resourceVersion, 410 Gone
answered by a fresh list, a kind the cluster does not serve read as empty."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the kube extra (lightkube) is not installed")

from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from trimtab.kube.api import KINDS, Kind
from trimtab.kube.informer import Informer


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
