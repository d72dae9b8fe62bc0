"""A scriptable HTTP server on 127.0.0.1 for the `http` step (runner/steps/http.py).

A real threaded server on an ephemeral port: the step goes through httpx and
sockets as it would against any API. Tests queue answers per path (`answer`),
read what arrived (`requests`: method, path, headers, body), and can make a path
hang until released (`hang`), for timeouts and cancels.
"""

from __future__ import annotations

import json
import select
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeHttp:
    answers: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)
    hanging: dict[str, threading.Event] = field(default_factory=dict)
    arrived: threading.Event = field(default_factory=threading.Event)
    # Set when a client closed its connection while its path hung (it let the request go).
    dropped: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def answer(self, path: str, status: int, body: Any = None, *,
               headers: dict[str, str] | None = None, raw: bytes | None = None) -> None:
        if raw is None:
            raw = json.dumps(body).encode()
            headers = {"Content-Type": "application/json", **(headers or {})}
        self.answers[path] = (status, headers or {}, raw)

    def hang(self, path: str) -> threading.Event:
        """The path answers only once the returned event is set."""
        release = threading.Event()
        self.hanging[path] = release
        return release

    def start(self) -> FakeHttp:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size) if size else b""
                path = self.path.split("?", 1)[0]
                fake.requests.append(Seen(self.command, self.path, dict(self.headers), body))
                fake.arrived.set()
                release = fake.hanging.get(path)
                if release is not None:
                    self._hold(release)
                status, headers, raw = fake.answers.get(path, (404, {}, b"no such path"))
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(raw)
                except OSError:
                    pass  # the client gave up (a cancelled or timed-out step)

            def _hold(self, release: threading.Event) -> None:
                # Wait for the release, watching the client: a read that finds the end
                # of its stream means it closed the connection.
                sock = self.connection
                while not release.is_set():
                    ready, _, _ = select.select([sock], [], [], 0.05)
                    if ready and not sock.recv(1, socket.MSG_PEEK):
                        fake.dropped.set()
                        return

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _serve

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        for release in self.hanging.values():
            release.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

