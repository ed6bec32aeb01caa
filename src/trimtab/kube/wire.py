"""The light write path to the API server: JSON bodies built directly and sent on kept-alive HTTP/1.1 connections,
one per writer thread, with the TLS and credentials of the client's kubeconfig.

Owns Wire. A binding through lightkube's models and httpx costs about 0.75 ms of Python; on a plain http.client
connection about 0.26 ms, and it gives up the GIL fewer times, so the writes a burst queues drain while the
cycle, the informers and the other writers run. KubeApi sends its hot writes (bindings, status, Events) here."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import httpx2
from lightkube import ApiError
from lightkube.config.client_adapter import user_auth, verify_cluster
from lightkube.config.kubeconfig import SingleConfig
from lightkube.models.meta_v1 import Status

IDLE_S = 30.0  # a connection idle this long is opened afresh: the server may have closed it (its idle timeout)
TIMEOUT_S = 10.0  # lightkube's default
# what a kept-alive connection the server closed meanwhile raises, before an answer: the request is sent again once
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class Wire:
    """`send(method, path, body)` from any thread: raises lightkube's ApiError (with the server's Status) on an
    answer that is not 2xx, OSError or http.client.HTTPException when the server cannot be reached. `credentials()`
    gives the request headers that authenticate (the Authorization header); it is asked again after a 401 (a
    rotated service-account token, an expired exec token)."""

    def __init__(self, server: str, context: ssl.SSLContext | None, credentials: Callable[[], dict[str, str]]) -> None:
        url = urllib.parse.urlsplit(server)
        if url.scheme not in ("https", "http") or not url.hostname:
            raise ValueError(f"kubeconfig: cluster server {server!r} is not an http(s) URL")
        self._host, self._port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
        self._prefix = url.path.rstrip("/")
        # the environment's proxy for the server, as httpx (and so the reads) honour it: a CONNECT tunnel
        proxy = None if urllib.request.proxy_bypass(url.hostname) else urllib.request.getproxies().get(url.scheme)
        self._proxy = urllib.parse.urlsplit(proxy) if proxy else None
        self._context = context if url.scheme == "https" else None
        self._credentials = credentials
        self._headers = {"Content-Type": "application/json", "Accept": "application/json", **credentials()}
        self._local = threading.local()  # this thread's (connection, monotonic time of its last answer)

    @classmethod
    def from_config(cls, config: SingleConfig) -> Wire:
        """The server, TLS (CA, client certificate) and credentials of a kubeconfig context, as lightkube reads
        them."""
        def credentials() -> dict[str, str]:
            auth = user_auth(config.user)  # a fresh one: it reads its token file or runs its exec command again
            if auth is None:
                return {}  # client certificates: in the TLS context
            request = next(auth.sync_auth_flow(httpx2.Request("GET", config.cluster.server)))
            return {"Authorization": request.headers["Authorization"]} if "Authorization" in request.headers else {}

        context = verify_cluster(config.cluster, config.user, config.abs_file) \
            if config.cluster.server.startswith("https") else None
        return cls(config.cluster.server, context, credentials)

    def send(self, method: str, path: str, body: dict[str, Any], content_type: str = "application/json") -> Any:
        """Send one request; the decoded JSON answer (None when it is not JSON). Raises ApiError when refused."""
        data = json.dumps(body, separators=(",", ":")).encode()
        status, answer = self._exchange(method, path, data, content_type)
        if status == 401:
            self._headers = {**self._headers, **self._credentials()}
            status, answer = self._exchange(method, path, data, content_type)
        if not 200 <= status < 300:
            raise ApiError(status=_status(status, answer))
        try:
            return json.loads(answer) if answer else None
        except ValueError:
            return None

    def _exchange(self, method: str, path: str, data: bytes, content_type: str) -> tuple[int, bytes]:
        conn = getattr(self._local, "conn", None)
        if conn is not None and time.monotonic() - self._local.last_s > IDLE_S:
            conn.close()
            conn = None
        headers = {**self._headers, "Content-Type": content_type}
        if conn is not None:
            try:
                return self._round_trip(conn, method, path, data, headers)
            except STALE:
                pass  # closed by the server while idle, before it read the request: sent again on a new one
        return self._round_trip(self._connect(), method, path, data, headers)

    def _round_trip(self, conn: http.client.HTTPConnection, method: str, path: str, data: bytes,
                    headers: dict[str, str]) -> tuple[int, bytes]:
        """One request on `conn`, kept as this thread's connection while the server keeps it open."""
        self._local.conn = None
        try:
            conn.request(method, self._prefix + path, data, headers)
            response = conn.getresponse()
            answer = response.read()
        except BaseException:
            conn.close()
            raise
        if response.will_close:
            conn.close()
        else:
            self._local.conn, self._local.last_s = conn, time.monotonic()
        return response.status, answer

    def _connect(self) -> http.client.HTTPConnection:
        host, port = (self._proxy.hostname or "", self._proxy.port or 80) if self._proxy else (self._host, self._port)
        conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S) if self._context is None \
            else http.client.HTTPSConnection(host, port, timeout=TIMEOUT_S, context=self._context)
        if self._proxy:
            conn.set_tunnel(self._host, self._port)
        return conn


def _status(code: int, answer: bytes) -> Status:
    """The Status the server answered, or one made of the bare code when the body is not one."""
    try:
        data = json.loads(answer)
        if isinstance(data, dict) and data.get("kind") == "Status":
            status: Status = Status.from_dict(data)
            status.code = status.code or code
            return status
    except ValueError:
        pass
    return Status(code=code, message=answer[:200].decode(errors="replace") or http.client.responses.get(code, ""))
