"""A TLS proxy on loopback between `trimtab kube` and the API server, which a test controls: `cut()` closes every
connection through it at once (every watch with them), `refuse(code, seconds)` answers every request with that
HTTP status (429, 503, ...) for a while, as an overloaded or failing API server does, then relays again.

It ends TLS itself (its own self-signed certificate; the test kubeconfig skips verification, as the control
plane's own does) and opens a TLS connection of its own to the API server for each one it relays."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path


class FaultProxy:
    def __init__(self, upstream_port: int, workdir: Path) -> None:
        self.upstream_port = upstream_port
        cert, key = workdir / "proxy.crt", workdir / "proxy.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
        self._server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._server_tls.load_cert_chain(cert, key)
        self._client_tls = ssl.create_default_context()
        self._client_tls.check_hostname, self._client_tls.verify_mode = False, ssl.CERT_NONE
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._refuse_until, self._refuse_code = 0.0, 0
        self.refused = 0  # requests answered with the refusal
        threading.Thread(target=self._accept, daemon=True).start()

    def kubeconfig(self, original: Path, out: Path) -> Path:
        """A copy of `original` whose cluster server is this proxy."""
        config = json.loads(original.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        out.write_text(json.dumps(config))
        return out

    def cut(self) -> int:
        """Close every connection through the proxy now; how many there were."""
        with self._lock:
            socks, self._open = list(self._open), set()
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        return len(socks) // 2

    def refuse(self, code: int, seconds: float) -> None:
        """Answer every request with `code` for `seconds` from now (open connections are cut first)."""
        self._refuse_code, self._refuse_until = code, time.monotonic() + seconds
        self.cut()

    def _accept(self) -> None:
        while True:
            raw, _ = self._listener.accept()
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            client = self._server_tls.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()
            return
        if time.monotonic() < self._refuse_until:
            self._answer_refusal(client)
            return
        try:
            upstream = self._client_tls.wrap_socket(socket.create_connection(("127.0.0.1", self.upstream_port)))
        except OSError:
            client.close()
            return
        with self._lock:
            self._open.update((client, upstream))
        _relay(client, upstream)

    def _answer_refusal(self, client: socket.socket) -> None:
        try:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = client.recv(4096)
                if not chunk:
                    break
                head += chunk
            body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": self._refuse_code,
                               "message": "the proxy refuses this request (a test fault)"}).encode()
            head = (f"HTTP/1.1 {self._refuse_code} Refused\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n").encode()
            client.sendall(head + body)
            self.refused += 1
        except OSError:
            pass
        finally:
            client.close()


def _relay(a: ssl.SSLSocket, b: ssl.SSLSocket) -> None:
    """Copy bytes both ways between `a` and `b` on this one thread (an SSL socket must not be read and written
    from two threads at once) until either side closes, then close both."""
    other = {a: b, b: a}
    for sock in (a, b):
        sock.setblocking(False)  # a readable socket may hold TLS records that are no data (session tickets)
    try:
        while True:
            ready = [sock for sock in (a, b) if sock.pending()] or select.select([a, b], [], [], 1.0)[0]
            for sock in ready:
                try:
                    data = sock.recv(65536)
                except ssl.SSLWantReadError:
                    continue
                if not data:
                    return
                sink = other[sock]
                sink.setblocking(True)
                sink.sendall(data)
                sink.setblocking(False)
    except (OSError, ValueError):
        pass
    finally:
        for sock in (a, b):
            with contextlib.suppress(OSError):
                sock.close()
