"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 (reference §9).

It is a real HTTP server on an ephemeral port, so the executor under test
goes through httpx, sockets, SSE framing and chunked tool-call arguments
exactly as it would against a real provider. The "model" is a Python
function of the request's messages: it finds the step contract
(`Workflow step contract (workflow: X, step: Y, attempt: Z)`) in the last
user message and answers with a `workflow` tool call carrying that attempt,
or with text, an HTTP error, or a hang. Every request (path, headers, body)
is recorded for assertions.

Use the `openai_server` fixture; set `server.script` to one of the script
factories below (or any function of the message list).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from runner.engine._agent import CONTRACT_RE

ARG_CHUNKS = (5, 6, 12)  # argument pieces cycle through these sizes, like the upstream mock
Messages = list[dict[str, Any]]


# -- what the fake model can do ------------------------------------------------------
@dataclass
class Answer:
    """A 200 answer: optional reasoning, then text, then tool calls (name, arguments)."""

    text: str = ""
    calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    reasoning: str | None = None
    # Streamed: the text is sent, then the answer waits for this event (set by the
    # test) before its tool calls and its end; a live view is seen mid-answer.
    hold: threading.Event | None = None
    # Streamed: after this many characters of the text, wait for `midway` (set by the
    # test) before the rest of the text; a live view is seen to grow.
    midway: threading.Event | None = None
    midway_at: int = 0


@dataclass
class Status:
    """An HTTP error answer."""

    code: int
    message: str = "internal error"


@dataclass
class Hang:
    """Wait `seconds` (or until the server stops) before answering, optionally mid-stream."""

    seconds: float
    after_headers: bool = False


Reply = Answer | Status | Hang
Script = Callable[[Messages], Reply]


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]  # lower-cased names
    body: dict[str, Any]

    @property
    def messages(self) -> Messages:
        return list(self.body.get("messages", []))


# -- reading the conversation --------------------------------------------------------
def last_user_text(messages: Messages) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return str(message.get("content") or "")
    return ""


def contract_of(messages: Messages) -> dict[str, str] | None:
    """workflow/step/attempt from the contract in the last user message."""
    found = CONTRACT_RE.search(last_user_text(messages))
    return found.groupdict() if found else None


def tool_results(messages: Messages) -> list[dict[str, Any]]:
    """The tool results sent since the last user message, parsed."""
    results: list[dict[str, Any]] = []
    for message in reversed(messages):
        if message.get("role") == "user":
            break
        if message.get("role") == "tool":
            results.insert(0, json.loads(message["content"]))
    return results


def call(action: str, contract: dict[str, str], **extra: Any) -> tuple[str, dict[str, Any]]:
    return ("workflow", {"action": action, "step": contract["step"],
                         "attempt": contract["attempt"], **extra})


# -- scripts -------------------------------------------------------------------------
def submit_valid(output: Any, reasoning: str | None = None) -> Script:
    def script(messages: Messages) -> Reply:
        if tool_results(messages):
            return Answer(text="Submitted.")
        contract = contract_of(messages)
        if contract is None:
            return Answer(text="I see no step contract.")
        return Answer(calls=[call("submit", contract, output=output)], reasoning=reasoning)
    return script


def invalid_then_valid(bad: Any, good: Any) -> Script:
    def script(messages: Messages) -> Reply:
        contract = contract_of(messages)
        assert contract is not None
        results = tool_results(messages)
        if not results:
            return Answer(text="Trying.", calls=[call("submit", contract, output=bad)])
        if results[-1]["ok"]:
            return Answer(text="Done.")
        return Answer(calls=[call("submit", contract, output=good)])
    return script


def text_only(text: str = "Here is my answer in prose, without calling any tool.") -> Script:
    return lambda messages: Answer(text=text)


def stale_attempt(output: Any) -> Script:
    def script(messages: Messages) -> Reply:
        if tool_results(messages):
            return Answer(text="Oh well.")
        contract = contract_of(messages)
        assert contract is not None
        stale = dict(contract, attempt="0000stale0000")
        return Answer(calls=[call("submit", stale, output=output)])
    return script


def update_then_submit(update: dict[str, Any], output: Any) -> Script:
    def script(messages: Messages) -> Reply:
        contract = contract_of(messages)
        assert contract is not None
        done = len(tool_results(messages))
        if done == 0:
            return Answer(calls=[call("update", contract, update=update)])
        if done == 1:
            return Answer(calls=[call("submit", contract, output=output)])
        return Answer(text="Finished.")
    return script


def http_error(code: int = 500, message: str = "the fake model fell over") -> Script:
    return lambda messages: Status(code, message)


def hang(seconds: float, after_headers: bool = False) -> Script:
    return lambda messages: Hang(seconds, after_headers)


# -- the server ----------------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        body = json.loads(raw) if raw else {}
        fake = self.server.fake
        fake.record(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            reply = fake.script(list(body.get("messages", [])))
        except Exception as exc:  # a broken script is a test bug: answer, and remember it
            fake.script_errors.append(f"{type(exc).__name__}: {exc}")
            reply = Status(599, "the fake model's script failed")
        try:
            self._answer(reply, bool(body.get("stream")))
        except (BrokenPipeError, ConnectionResetError):
            fake.disconnects += 1  # the client went away (cancel, timeout): expected

    def _answer(self, reply: Reply, stream: bool) -> None:
        fake = self.server.fake
        if isinstance(reply, Status):
            self._json(reply.code, {"error": {"message": reply.message, "type": "server_error"}})
            return
        if isinstance(reply, Hang):
            if reply.after_headers:
                self._start_stream()
                self._event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
            fake.hanging.set()
            fake.stopping.wait(reply.seconds)
            if not reply.after_headers:
                self._json(200, _completion(Answer(text="too late")))
            return
        if not stream or not fake.streaming:
            self._json(200, _completion(reply))
            return
        self._start_stream()
        held = reply.hold is None
        sent = 0
        for chunk in _chunks(reply):
            piece = chunk["choices"][0]["delta"].get("content")
            if piece and reply.midway is not None and sent >= reply.midway_at:
                reply.midway.wait(60)
            sent += len(piece or "")
            if not held and "content" not in chunk["choices"][0]["delta"] and \
                    chunk["choices"][0]["delta"].get("role") is None:
                held = True  # the text is out: wait for the test before the rest
                assert reply.hold is not None
                reply.hold.wait(60)
            self._event(chunk)
            time.sleep(fake.delay)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _json(self, code: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self) -> None:
        # HTTP/1.0 semantics: no length, the body ends when the connection closes.
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.flush()

    def _event(self, doc: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
        self.wfile.flush()


def _pieces(text: str, sizes: tuple[int, ...]) -> Iterator[str]:
    at = 0
    for size in itertools.cycle(sizes):
        if at >= len(text):
            return
        yield text[at:at + size]
        at += size


def _delta(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _chunks(answer: Answer) -> Iterator[dict[str, Any]]:
    yield _delta({"role": "assistant"})
    for piece in _pieces(answer.reasoning or "", (7,)):
        yield _delta({"reasoning_content": piece})
    for piece in _pieces(answer.text, (6,)):
        yield _delta({"content": piece})
    for index, (name, arguments) in enumerate(answer.calls):
        args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        yield _delta({"tool_calls": [{"index": index, "id": f"call_{index}_fake",
                                      "type": "function",
                                      "function": {"name": name, "arguments": ""}}]})
        for piece in _pieces(args, ARG_CHUNKS):
            yield _delta({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield _delta({}, "tool_calls" if answer.calls else "stop")


def _completion(answer: Answer) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
    if answer.calls:
        message["tool_calls"] = [
            {"id": f"call_{i}_fake", "type": "function",
             "function": {"name": name, "arguments": args if isinstance(args, str)
                          else json.dumps(args)}}
            for i, (name, args) in enumerate(answer.calls)]
    return {"id": "chatcmpl-fake", "object": "chat.completion", "model": "fake",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if answer.calls else "stop"}]}


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a hanging handler must not block shutdown
    fake: FakeOpenAI


class FakeOpenAI:
    """The server; `base_url` ends in /v1 like a real provider's."""

    def __init__(self, script: Script | None = None, delay: float = 0.002) -> None:
        self.script: Script = script or text_only()
        self.delay = delay
        self.streaming = True  # False: answer with one JSON document even when asked to stream
        self.requests: list[Recorded] = []
        self.disconnects = 0
        self.script_errors: list[str] = []
        self.stopping = threading.Event()
        self.hanging = threading.Event()  # set once a `hang` reply is hanging (headers sent)
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def record(self, request: Recorded) -> None:
        with self._lock:
            self.requests.append(request)

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()  # releases hanging handlers
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()
    assert not server.script_errors, server.script_errors
