"""What one HTTP request may cost `trimtab serve`, and the headers every answer carries.

Owns the bounds on the wire (each refusal a 4xx whose body names the bound and its flag): the request head
(`BoundedH11`: its size, and the time to send it), the request body (`BodyLimit`: its size, and the time to send
it), and `SecurityHeaders` (CSP, frame, sniffing and referrer headers). What the body may hold once read (nesting,
documents, numbers) is bounded where it is parsed, in trimtab.serve.intake.submission; `ParseGate` lets each tenant have
one manifest parsed at a time."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import h11
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from trimtab.serve.errors import ServeError

# JSON and other non-HTML answers: nothing may be loaded, run or framed on their account.
API_CSP = "default-src 'none'; frame-ancestors 'none'"
_HEAD_END = re.compile(rb"\n\r?\n")  # h11 takes bare \n line ends too
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)
_FIXED_HEADERS = ((b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
                  (b"referrer-policy", b"no-referrer"))


def page_csp(html: str) -> str:
    """The Content-Security-Policy of one of the server's own HTML pages (the dashboard, /docs): scripts from
    this server or inline ones of exactly this page (by hash), styles from this server or inline (the pages
    colour elements with style attributes), requests and images to this server only, never framed."""
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'"
                      for s in _INLINE_SCRIPT.findall(html))
    return (f"default-src 'self'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


def _error_body(detail: str) -> bytes:
    return json.dumps({"detail": detail, "field": ""}).encode()


def _refusal(status: int, reason: str, detail: str) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, written before (or instead of) the app's."""
    body = _error_body(detail)
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode()
    return head + body


class BoundedH11(H11Protocol):
    """uvicorn's h11 protocol with bounds on the request head. A connection that has not sent a whole request
    line and headers `header_timeout_s` after it opened (or after its first byte of a next request) gets 408 and
    is closed; a head over `max_header_bytes` gets 431 (h11's own bound covers only a head not yet complete, and
    answers a bare 400). uvicorn runs one instance per connection; `configured`
    makes the class for one server's bounds."""

    header_timeout_s = 5.0
    max_header_bytes = 16 << 10
    _head_timer: asyncio.TimerHandle | None = None

    @classmethod
    def configured(cls, header_timeout_s: float, max_header_bytes: int) -> type[BoundedH11]:
        return type("BoundedH11", (cls,), {"header_timeout_s": header_timeout_s,
                                           "max_header_bytes": max_header_bytes})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch_head()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE and self._head_bytes(data) > self.max_header_bytes:
            self._stop_head_timer()
            self.transport.write(_refusal(431, "Request Header Fields Too Large", f"request head larger than "
                                          f"{self.max_header_bytes} bytes (--max-header-bytes)"))
            self.transport.close()
            return
        super().data_received(data)
        self._watch_head()

    def _head_bytes(self, data: bytes) -> int:
        """The size of the request head being read, once `data` is added: up to its blank line if in sight."""
        buffered = self.conn.trailing_data[0]
        tail = buffered[-3:]
        end = _HEAD_END.search(tail + data)
        return len(buffered) + (len(data) if end is None else end.end() - len(tail))

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _watch_head(self) -> None:
        """Arm the head timer while a request head is awaited and none is armed; stop it once a head is in."""
        waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if waiting and self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)
        elif not waiting:
            self._stop_head_timer()

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.write(_refusal(408, "Request Timeout", f"request head not received within "
                                          f"{self.header_timeout_s:g} s (--header-timeout-s)"))
            self.transport.close()

class BodyLimit:
    """Reads the request body before the app sees it: over `max_bytes` is 413 (whether or not the client sent a
    Content-Length), not all in within `timeout_s` of the first read is 408 (a slow body, or a Content-Length
    larger than what was sent). Either way the connection is closed."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await _refuse(send, 413, f"request body larger than {self.max_bytes} bytes (--max-body-bytes)")
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        body = bytearray()
        more = True
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.0))
            except TimeoutError:
                await _refuse(send, 408, f"request body not received within {self.timeout_s:g} s "
                                         "(--body-timeout-s)")
                return
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                await _refuse(send, 413, f"request body larger than {self.max_bytes} bytes (--max-body-bytes)")
                return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _refuse(send: Send, status: int, detail: str) -> None:
    payload = _error_body(detail)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": payload})


class SecurityHeaders:
    """Adds to every answer: X-Content-Type-Options nosniff, X-Frame-Options DENY, Referrer-Policy no-referrer,
    and API_CSP unless the route set its own Content-Security-Policy (the HTML pages: see page_csp)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                names = {name.lower() for name, _ in headers}
                if b"content-security-policy" not in names:
                    headers.append((b"content-security-policy", API_CSP.encode()))
                headers += [h for h in _FIXED_HEADERS if h[0] not in names]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class ParseGate:
    """At most one manifest parsed at a time per tenant (the admin counts as one), so a tenant sending many large
    manifests at once holds one parsing thread, not all of them: `with gate.enter(who):` raises ServeError 429
    while that tenant has a parse in flight."""

    def __init__(self) -> None:
        self._busy: set[str] = set()
        self._lock = threading.Lock()

    @contextmanager
    def enter(self, who: str) -> Iterator[None]:
        with self._lock:
            if who in self._busy:
                raise ServeError(429, f"{who} has a manifest being read already: one at a time per tenant (send "
                                 "it again once that one is answered)")
            self._busy.add(who)
        try:
            yield
        finally:
            with self._lock:
                self._busy.discard(who)
