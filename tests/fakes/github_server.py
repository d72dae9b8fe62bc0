"""A GitHub-compatible REST server on 127.0.0.1 for the pull-request controller (DESIGN §7).

A real threaded HTTP server on an ephemeral port, so the controller goes
through httpx and sockets exactly as it would against api.github.com. It
implements the three endpoints the pull-request controller uses:

    GET /repos/{o}/{r}/pulls/{n}              {number, state, merged, mergeable, title,
                                               head: {sha}, merge_commit_sha}, with an ETag
    GET /repos/{o}/{r}/commits/{sha}/status   {state: success | pending | failure, sha}
    PUT /repos/{o}/{r}/pulls/{n}/merge        body {sha}:
        200 {merged: true, sha}               the merge happened
        409 "Head branch was modified. Review and try the merge again."  sha != head
        405 "Pull Request is not mergeable"   mergeable is false (or already merged)

and two more for effect tests, one per kind of provider safety:

    PATCH /repos/{o}/{r}/pulls/{n}            body {title}; a conditional request:
        200 the pull (new ETag)               If-Match absent or equal to the ETag
        412 "Precondition Failed"             If-Match names an older ETag
    POST /repos/{o}/{r}/issues/{n}/comments   body {body} -> 201 {id, body}; with
                                              `idempotency_keys` on, a repeated
                                              `Idempotency-Key` replays the first answer
                                              (`Idempotent-Replayed: true`) and creates
                                              nothing; the same key with another body
                                              is 422

Tests set the state (`add_pull`, `set_head`, `set_checks`, `set_title`,
`pull.mergeable`, `pull.merged`) and read `requests` (method, path, headers, body,
the answer's status) and `comments` afterwards. `on_request(method, path)` runs
before each answer (to race a push in); `merge_fault` and `comment_fault` simulate
a provider whose answer is lost: `"apply_then_500"` does it and answers 500, `"500"`
answers 500 without doing it.

Use the `github` fixture, or `FakeGitHub.start()` / `.stop()` by hand.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

HEAD_MODIFIED = "Head branch was modified. Review and try the merge again."
NOT_MERGEABLE = "Pull Request is not mergeable"

_PULL = re.compile(r"^/repos/([^/]+)/([^/]+)/pulls/(\d+)$")
_MERGE = re.compile(r"^/repos/([^/]+)/([^/]+)/pulls/(\d+)/merge$")
_STATUS = re.compile(r"^/repos/([^/]+)/([^/]+)/commits/([^/]+)/status$")
_COMMENTS = re.compile(r"^/repos/([^/]+)/([^/]+)/issues/(\d+)/comments$")
Answer = tuple[int, Any, dict[str, str]]


@dataclass
class Pull:
    repository: str
    number: int
    head_sha: str
    state: str = "open"
    merged: bool = False
    mergeable: bool | None = True
    merge_commit_sha: str | None = None
    title: str = "Widgets"

    def to_json(self) -> dict[str, Any]:
        return {"number": self.number, "state": self.state, "merged": self.merged,
                "mergeable": self.mergeable, "title": self.title,
                "head": {"sha": self.head_sha}, "merge_commit_sha": self.merge_commit_sha}

    @property
    def etag(self) -> str:
        """Changes with every change of the pull request (a strong validator)."""
        text = json.dumps(self.to_json(), sort_keys=True)
        return '"' + hashlib.sha1(text.encode()).hexdigest() + '"'


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int = 0  # the answer's status code, once answered


@dataclass
class FakeGitHub:
    pulls: dict[tuple[str, int], Pull] = field(default_factory=dict)
    checks: dict[str, str] = field(default_factory=dict)  # commit sha -> combined state
    default_checks: str = "pending"
    merge_fault: str | None = None  # None | "apply_then_500" | "500"
    comment_fault: str | None = None  # None | "apply_then_500" | "500"
    # Honour `Idempotency-Key` on comment creation (a provider that dedupes on tokens).
    idempotency_keys: bool = False
    comments: list[dict[str, Any]] = field(default_factory=list)
    _replays: dict[str, tuple[Any, Answer]] = field(default_factory=dict, repr=False)
    # Called with (method, path) before each request is answered (to race a push in).
    on_request: Callable[[str, str], None] | None = None
    requests: list[Recorded] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _server: ThreadingHTTPServer | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    # -- state, set by tests ---------------------------------------------------------
    def add_pull(self, repository: str, number: int, head_sha: str, *,
                 checks: str | None = None, mergeable: bool | None = True) -> Pull:
        pull = Pull(repository, number, head_sha, mergeable=mergeable)
        with self._lock:
            self.pulls[(repository, number)] = pull
            if checks is not None:
                self.checks[head_sha] = checks
        return pull

    def pull(self, repository: str, number: int) -> Pull:
        return self.pulls[(repository, number)]

    def set_head(self, repository: str, number: int, head_sha: str) -> None:
        with self._lock:
            self.pulls[(repository, number)].head_sha = head_sha

    def set_checks(self, sha: str, state: str) -> None:
        assert state in ("success", "pending", "failure"), state
        with self._lock:
            self.checks[sha] = state

    def set_title(self, repository: str, number: int, title: str) -> None:
        """Another writer edits the pull request (its ETag moves)."""
        with self._lock:
            self.pulls[(repository, number)].title = title

    # -- what happened --------------------------------------------------------------
    def calls(self, method: str | None = None, suffix: str = "") -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests
                    if (method is None or r.method == method) and r.path.endswith(suffix)]

    def merges(self) -> list[Recorded]:
        return self.calls("PUT", "/merge")

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    # -- server ----------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None, "the server is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeGitHub:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_PUT(self) -> None:
                fake._handle(self, "PUT")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

            def do_PATCH(self) -> None:
                fake._handle(self, "PATCH")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True,
                                        name="fake-github")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        path = h.path.split("?", 1)[0]
        if self.on_request is not None:
            self.on_request(method, path)
        headers = dict(h.headers.items())
        with self._lock:
            code, answer, extra = self._route(method, path, body, h.headers)
            self.requests.append(Recorded(method, path, headers, body, code))
        data = json.dumps(answer).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for name, value in extra.items():
            h.send_header(name, value)
        h.end_headers()
        h.wfile.write(data)

    def _route(self, method: str, path: str, body: Any, headers: Any) -> Answer:
        if (method in ("GET", "PATCH")) and (m := _PULL.match(path)):
            pull = self.pulls.get((f"{m[1]}/{m[2]}", int(m[3])))
            if pull is None:
                return 404, {"message": "Not Found"}, {}
            if method == "PATCH":
                return self._edit(pull, body, headers.get("If-Match"))
            return 200, pull.to_json(), {"ETag": pull.etag}
        if method == "GET" and (m := _STATUS.match(path)):
            sha = m[3]
            return 200, {"state": self.checks.get(sha, self.default_checks), "sha": sha}, {}
        if method == "PUT" and (m := _MERGE.match(path)):
            pull = self.pulls.get((f"{m[1]}/{m[2]}", int(m[3])))
            if pull is None:
                return 404, {"message": "Not Found"}, {}
            code, answer = self._merge(pull, body)
            return code, answer, {}
        if method == "POST" and (m := _COMMENTS.match(path)):
            return self._comment(f"{m[1]}/{m[2]}", int(m[3]), body,
                                 headers.get("Idempotency-Key"))
        return 404, {"message": "Not Found"}, {}

    def _edit(self, pull: Pull, body: Any, if_match: str | None) -> Answer:
        if if_match is not None and if_match != pull.etag:
            return 412, {"message": "Precondition Failed"}, {"ETag": pull.etag}
        if isinstance(body, dict) and isinstance(body.get("title"), str):
            pull.title = body["title"]
        return 200, pull.to_json(), {"ETag": pull.etag}

    def _comment(self, repository: str, number: int, body: Any, key: str | None) -> Answer:
        if self.idempotency_keys and key is not None and key in self._replays:
            first_body, (code, answer, extra) = self._replays[key]
            if first_body != body:
                return 422, {"message": "Idempotency-Key reused with different parameters"}, {}
            return code, answer, {**extra, "Idempotent-Replayed": "true"}
        if self.comment_fault == "500":
            return 500, {"message": "Server Error"}, {}
        comment = {"id": len(self.comments) + 1, "repository": repository, "number": number,
                   "body": body.get("body") if isinstance(body, dict) else None}
        self.comments.append(comment)
        done: Answer = (201, {"id": comment["id"], "body": comment["body"]}, {})
        if self.idempotency_keys and key is not None:
            self._replays[key] = (body, done)  # what the first call did, answer lost or not
        if self.comment_fault == "apply_then_500":
            return 500, {"message": "Server Error"}, {}
        return done

    def _merge(self, pull: Pull, body: Any) -> tuple[int, Any]:
        if self.merge_fault == "500":
            return 500, {"message": "Server Error"}
        if pull.merged or pull.mergeable is False:
            return 405, {"message": NOT_MERGEABLE}
        sha = body.get("sha") if isinstance(body, dict) else None
        if sha is not None and sha != pull.head_sha:
            return 409, {"message": HEAD_MODIFIED}
        pull.merged = True
        pull.state = "closed"
        pull.merge_commit_sha = hashlib.sha1(f"merge:{pull.head_sha}".encode()).hexdigest()
        if self.merge_fault == "apply_then_500":
            return 500, {"message": "Server Error"}
        return 200, {"merged": True, "sha": pull.merge_commit_sha,
                     "message": "Pull Request successfully merged"}


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub().start()
    try:
        yield fake
    finally:
        fake.stop()
