"""A scripted Anthropic Messages API server on 127.0.0.1 (`/v1/messages`).

A real HTTP server on an ephemeral port, so a real client (Claude Code) goes
through its own HTTP stack, SSE framing and chunked `input_json_delta` tool
arguments exactly as against the real provider. The "model" is a Python
function of the request body that returns text and tool calls; every request is
recorded for assertions. Requests that are not the conversation (a token count,
a one-token probe) get small fixed answers so clients start cleanly.

    server = FakeAnthropic(script).start()
    env["ANTHROPIC_BASE_URL"] = server.base_url
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Body = dict[str, Any]
ARG_CHUNKS = (4, 9, 15)  # tool arguments arrive in pieces of these sizes, cycling


@dataclass
class Answer:
    """A 200 answer: text, then tool calls (name, input) in one assistant message."""

    text: str = ""
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass
class Status:
    code: int
    message: str = "overloaded"


Reply = Answer | Status
Script = Callable[[Body], Reply]


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]
    body: Body


# -- reading a conversation ------------------------------------------------------------
def blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def block_text(block: dict[str, Any]) -> str:
    if block.get("type") == "text":
        return str(block.get("text", ""))
    if block.get("type") == "tool_result":
        inner = block.get("content")
        if isinstance(inner, str):
            return inner
        return "\n".join(str(b.get("text", "")) for b in inner or [] if isinstance(b, dict))
    return ""


def user_texts(body: Body) -> list[str]:
    """Every text block the user side sent (prompts, hook feedback), oldest first;
    tool results are not included."""
    out: list[str] = []
    for message in body.get("messages", []):
        if message.get("role") != "user":
            continue
        out.extend(block_text(b) for b in blocks(message) if b.get("type") == "text")
    return out


def last_turn_results(body: Body) -> list[str]:
    """The tool results in the last user message (empty when it holds none)."""
    messages = body.get("messages", [])
    if not messages or messages[-1].get("role") != "user":
        return []
    return [block_text(b) for b in blocks(messages[-1]) if b.get("type") == "tool_result"]


def last_user_text(body: Body) -> str:
    """The text of the last user message that is not only tool results."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") != "user":
            continue
        texts = [block_text(b) for b in blocks(message) if b.get("type") == "text"]
        if texts and not any(b.get("type") == "tool_result" for b in blocks(message)):
            return "\n".join(texts)
    return ""


def tool_names(body: Body) -> list[str]:
    return [str(t.get("name")) for t in body.get("tools", []) if isinstance(t, dict)]


# -- the server ------------------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:  # connectivity probes
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._json(404, {"type": "error", "error": {"type": "not_found_error",
                                                    "message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        fake = self.server.fake
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/count_tokens"):
            self._json(200, {"input_tokens": 100})
            return
        if path != "/v1/messages":
            self._json(404, {"type": "error", "error": {"type": "not_found_error",
                                                        "message": f"no route {path}"}})
            return
        fake.record(Recorded(path, {k.lower(): v for k, v in self.headers.items()}, body))
        try:
            reply = fake.answer(body)
        except Exception as exc:  # a broken script is a test bug: answer, and remember it
            fake.script_errors.append(f"{type(exc).__name__}: {exc}")
            reply = Status(500, "the fake model's script failed")
        try:
            if isinstance(reply, Status):
                self._json(reply.code, {"type": "error", "error": {"type": "api_error",
                                                                   "message": reply.message}})
            elif body.get("stream"):
                self._stream(reply, str(body.get("model", "fake")))
            else:
                self._json(200, _message(reply, str(body.get("model", "fake")), fake.next_id()))
        except (BrokenPipeError, ConnectionResetError):
            fake.disconnects += 1

    def _json(self, code: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _stream(self, answer: Answer, model: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for event in _events(answer, model, self.server.fake.next_id()):
            self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()


def _pieces(text: str, sizes: tuple[int, ...]) -> Iterator[str]:
    at = 0
    for size in itertools.cycle(sizes):
        if at >= len(text):
            return
        yield text[at:at + size]
        at += size


def _usage(output: int = 1) -> dict[str, int]:
    return {"input_tokens": 100, "output_tokens": output, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0}


def _events(answer: Answer, model: str, msg_id: str) -> Iterator[dict[str, Any]]:
    yield {"type": "message_start", "message": {
        "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": _usage()}}
    index = 0
    if answer.text or not answer.calls:
        yield {"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": ""}}
        for piece in _pieces(answer.text or "ok", (8,)):
            yield {"type": "content_block_delta", "index": 0,
                   "delta": {"type": "text_delta", "text": piece}}
        yield {"type": "content_block_stop", "index": 0}
        index = 1
    for n, (name, args) in enumerate(answer.calls):
        yield {"type": "content_block_start", "index": index, "content_block": {
            "type": "tool_use", "id": f"toolu_{msg_id[-8:]}_{n}", "name": name, "input": {}}}
        for piece in _pieces(json.dumps(args), ARG_CHUNKS):
            yield {"type": "content_block_delta", "index": index,
                   "delta": {"type": "input_json_delta", "partial_json": piece}}
        yield {"type": "content_block_stop", "index": index}
        index += 1
    yield {"type": "message_delta",
           "delta": {"stop_reason": "tool_use" if answer.calls else "end_turn",
                     "stop_sequence": None}, "usage": {"output_tokens": 20}}
    yield {"type": "message_stop"}


def _message(answer: Answer, model: str, msg_id: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if answer.text or not answer.calls:
        content.append({"type": "text", "text": answer.text or "ok"})
    for n, (name, args) in enumerate(answer.calls):
        content.append({"type": "tool_use", "id": f"toolu_{msg_id[-8:]}_{n}", "name": name,
                        "input": args})
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": "tool_use" if answer.calls else "end_turn",
            "stop_sequence": None, "usage": _usage(20)}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeAnthropic


class FakeAnthropic:
    """The server; `base_url` is the origin (clients append /v1/messages)."""

    def __init__(self, script: Script | None = None) -> None:
        self.script: Script = script or (lambda body: Answer("ok"))
        self.requests: list[Recorded] = []
        self.script_errors: list[str] = []
        self.disconnects = 0
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def next_id(self) -> str:
        with self._lock:
            return f"msg_fake{next(self._ids):08d}"

    def record(self, request: Recorded) -> None:
        with self._lock:
            self.requests.append(request)

    def answer(self, body: Body) -> Reply:
        # Side requests (no tools offered, e.g. a title or a one-token probe) are not
        # the conversation under test: answer them plainly.
        if not body.get("tools") and int(body.get("max_tokens") or 0) <= 1:
            return Answer("ok")
        return self.script(body)

    def conversation(self) -> list[Recorded]:
        """The recorded requests that offered tools (the agent loop's own calls)."""
        with self._lock:
            return [r for r in self.requests if r.body.get("tools")]

    def start(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
