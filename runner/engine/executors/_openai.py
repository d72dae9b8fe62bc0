"""The `openai` executor: any OpenAI-compatible `/chat/completions` endpoint (DESIGN §4).

One conversation per step attempt, kept across its turns: the step prompt
first, then each reminder or resume as a further user message. A turn streams
the model's answer (SSE), reassembles text and tool-call argument deltas,
runs every `workflow` tool call through `AgentStep.handle_tool_call`, sends
the tool results back and asks again, until the model answers without tool
calls, the step is accepted, or the round-trip cap is reached.

Nothing the model or the server does raises out of `run_turn`: HTTP errors,
refused connections, timeouts and malformed streams end the turn without a
submission and leave a redacted, bounded reason in `last_error`. The API key
is only ever placed in the Authorization header.

The request runs on a private asyncio loop so that cancel, park and the
deadline can interrupt it mid-stream: a watcher polls `step.should_stop()` and
cancels the request task, which closes the connection. Blocking httpx has no
safe way to abort a read from another thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from runner import _jsonin as jsonin
from runner._safety import safe_message, secret_env_values
from runner.clock import Clock, SystemClock
from runner.engine._agent import STEP_TOOL_SCHEMA, AgentStep, TurnKind, parse_tolerant
from runner.engine._livelog import LiveLog
from runner.errors import InputError

log = logging.getLogger(__name__)

ENV_BASE_URL = "WFRUN_OPENAI_BASE_URL"
ENV_API_KEY = "WFRUN_OPENAI_API_KEY"
ENV_MODEL = "WFRUN_OPENAI_MODEL"
ENV_TIMEOUT = "WFRUN_OPENAI_TIMEOUT"
DEFAULT_TIMEOUT = 120.0
MAX_ROUND_TRIPS = 8
MAX_CONVERSATIONS = 32  # attempts whose conversation we remember (reminders need it)
ERROR_CAP = 2_000
WATCH_POLL = 0.02
MAX_REPLY_CHARS = 2_000_000  # text plus tool arguments of one model answer
LIVE_CHARS = 200_000  # streamed text shown live per turn (`logs --follow`), at most
TOOL_NAME = str(STEP_TOOL_SCHEMA["name"])
T = TypeVar("T")


# Answers that mean the endpoint, key or model is wrong: asking again cannot help.
SETUP_STATUSES = frozenset({401, 403, 404})


class _Stopped(Exception):
    """The step asked us to stop (cancel, park, deadline) while a request was live."""


class OpenAIExecutor:
    """Drives a step through a chat-completions model that can call the `workflow` tool."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        timeout: float = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        clock: Clock | None = None,
        *,
        max_round_trips: int = MAX_ROUND_TRIPS,
    ) -> None:
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise InputError(f"OpenAI base URL must be an http(s) URL, got '{_show_url(url)}'")
        if not model:
            raise InputError("OpenAI model name is empty")
        if timeout <= 0:
            raise InputError("OpenAI HTTP timeout must be positive")
        if max_round_trips < 1:
            raise InputError("max_round_trips must be at least 1")
        # Join on the path so a query some providers need (api-version=...) survives.
        self.endpoint = str(url.copy_with(path=url.path.rstrip("/") + "/chat/completions"))
        self.model = model
        self.timeout = float(timeout)
        self.max_round_trips = max_round_trips
        self.clock: Clock = clock or SystemClock()
        self._headers = {"Accept": "text/event-stream", **dict(headers or {})}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._secrets = [s for s in (api_key, *secret_env_values(dict(headers or {}))) if s]
        self._shown_endpoint = _show_url(httpx.URL(self.endpoint))
        self._conversations: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()  # one executor may serve runs on several threads
        self.last_error: str | None = None
        self.last_round_trips = 0
        self.last_seconds: float | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *,
                 clock: Clock | None = None) -> OpenAIExecutor:
        """Configure from WFRUN_OPENAI_BASE_URL and _MODEL, and the optional _API_KEY
        (a local OpenAI-compatible server takes none: no Authorization header is sent)
        and _TIMEOUT."""
        env = os.environ if environ is None else environ
        values: dict[str, str] = {}
        for var in (ENV_BASE_URL, ENV_MODEL):
            value = env.get(var, "").strip()
            if not value:
                raise InputError(f"{var} is not set; the openai agent needs {ENV_BASE_URL} "
                                 f"and {ENV_MODEL} ({ENV_API_KEY} when the server wants a key)")
            values[var] = value
        values[ENV_API_KEY] = env.get(ENV_API_KEY, "").strip()
        timeout = DEFAULT_TIMEOUT
        raw = env.get(ENV_TIMEOUT, "").strip()
        if raw:
            try:
                timeout = float(raw)
            except ValueError:
                raise InputError(f"{ENV_TIMEOUT} must be a number of seconds, "
                                 f"got '{raw[:40]}'") from None
            if timeout <= 0:
                raise InputError(f"{ENV_TIMEOUT} must be positive")
        return cls(values[ENV_BASE_URL], values[ENV_API_KEY], values[ENV_MODEL],
                   timeout=timeout, clock=clock)

    def __repr__(self) -> str:  # never show the key, even in a debugger or a traceback
        return f"OpenAIExecutor(endpoint={self._shown_endpoint!r}, model={self.model!r})"

    # -- the AgentStepExecutor protocol ------------------------------------------
    def run_turn(self, step: AgentStep, message: str, kind: TurnKind) -> None:
        self.last_error = None
        self.last_round_trips = 0
        started = self.clock.monotonic()
        messages = self._conversation(step, message, kind)
        try:
            _run(self._turn(step, messages))
        finally:
            self.last_seconds = self.clock.monotonic() - started
            if step.accepted:
                self._forget(step.contract.attempt)

    def conversation(self, attempt: str) -> list[dict[str, Any]]:
        """A copy of the messages kept for `attempt` (empty when there are none)."""
        with self._lock:
            return [dict(m) for m in self._conversations.get(attempt, [])]

    # -- conversation --------------------------------------------------------------
    def _conversation(self, step: AgentStep, message: str, kind: TurnKind) -> list[dict[str, Any]]:
        with self._lock:
            return self._start_or_continue(step, message, kind)

    def _start_or_continue(self, step: AgentStep, message: str,
                           kind: TurnKind) -> list[dict[str, Any]]:
        attempt = step.contract.attempt
        messages = self._conversations.get(attempt)
        if kind == "step" or messages is None:
            # A reminder or resume for an attempt we never saw (say, after a restart)
            # still needs the task, so the conversation starts from the step prompt.
            messages = [] if kind == "step" or message == step.prompt else \
                [{"role": "user", "content": step.prompt}]
            self._conversations[attempt] = messages
        self._conversations.move_to_end(attempt)
        while len(self._conversations) > MAX_CONVERSATIONS:
            self._conversations.popitem(last=False)
        messages.append({"role": "user", "content": message})
        return messages

    def _forget(self, attempt: str) -> None:
        with self._lock:
            self._conversations.pop(attempt, None)

    # -- the turn ------------------------------------------------------------------
    async def _turn(self, step: AgentStep, messages: list[dict[str, Any]]) -> None:
        # The answer's text as it streams, for `wfrun logs --follow` (masked and bounded
        # by the live log); removed once the turn ends: the trace keeps the outcome only.
        live = step.open_live(LIVE_CHARS) if step.open_live is not None else None
        try:
            await self._round_trips(step, messages, live)
        finally:
            if live is not None:
                live.remove()

    async def _round_trips(self, step: AgentStep, messages: list[dict[str, Any]],
                           live: LiveLog | None) -> None:
        on_text = None if live is None else (lambda text: live.stdout.feed(text.encode()))
        async with httpx.AsyncClient(follow_redirects=False) as client:
            for _ in range(self.max_round_trips):
                if step.should_stop():
                    self._fail(f"stopped ({_stop_cause(step)}) before the model answered")
                    return
                self.last_round_trips += 1
                try:
                    reply = await _watched(step, self._request(client, step, messages,
                                                               on_text))
                except _Stopped:
                    self._fail(f"stopped ({_stop_cause(step)}) while the model was answering; "
                               "the request was closed")
                    return
                except (httpx.HTTPError, StreamError) as exc:
                    self._fail(_describe(exc, self._shown_endpoint))
                    if isinstance(exc, httpx.ConnectError) and self.last_error:
                        step.give_up(self.last_error)  # nothing listens: a setup problem
                    return
                if reply is None:
                    return  # an HTTP error status, already recorded
                messages.append(reply.assistant_message())
                if not reply.tool_calls:
                    if not step.accepted:
                        self._fail("the model ended its turn without calling the workflow tool")
                    return
                for call in reply.tool_calls:
                    content = self._tool_result(step, call.name, call.arguments)
                    messages.append({"role": "tool", "tool_call_id": call.id,
                                     "content": content})
                if step.accepted:
                    return
        self._fail(f"no accepted submission after {self.max_round_trips} model round-trips")

    def _tool_result(self, step: AgentStep, name: str, arguments: str) -> str:
        if name != TOOL_NAME:
            return json.dumps({"ok": False, "message": f"unknown tool '{name[:80]}'; the only "
                               f"tool available is '{TOOL_NAME}'"})
        try:
            args: Any = jsonin.loads(arguments) if arguments.strip() else {}
        except ValueError:
            args = parse_tolerant(arguments)  # models sometimes wrap or trail the JSON
        if not isinstance(args, dict):
            return json.dumps({"ok": False, "message": "the workflow tool's arguments must be "
                               "a JSON object like the contract shows"})
        return json.dumps(step.handle_tool_call(args).to_json())

    async def _request(self, client: httpx.AsyncClient, step: AgentStep,
                       messages: list[dict[str, Any]],
                       on_text: Callable[[str], None] | None = None) -> Reply | None:
        body = {"model": self.model, "messages": messages, "stream": True,
                "tools": [{"type": "function", "function": STEP_TOOL_SCHEMA}]}
        remaining = step.remaining()
        limit = self.timeout if remaining is None else max(min(self.timeout, remaining), 0.01)
        async with client.stream("POST", self.endpoint, json=body, headers=self._headers,
                                 timeout=httpx.Timeout(limit)) as response:
            if response.status_code >= 400:
                detail = await _error_detail(response)
                self._fail(f"HTTP {response.status_code} from {self._shown_endpoint}"
                           + (f": {detail}" if detail else ""))
                if response.status_code in SETUP_STATUSES and self.last_error:
                    step.give_up(self.last_error)  # a wrong key, URL or model name
                return None
            if "text/event-stream" in response.headers.get("content-type", ""):
                return await read_sse_reply(response.aiter_lines(), on_text)
            # Some servers ignore `stream: true` and answer with one JSON document.
            return await read_json_reply(response.aiter_bytes())

    def _fail(self, reason: str) -> None:
        self.last_error = safe_message(reason, self._secrets, ERROR_CAP)
        log.info("openai agent turn ended without a submission: %s", self.last_error)


def _run(coro: Coroutine[Any, Any, None]) -> None:
    """Run one turn on a private event loop (the engine is synchronous, any thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        nested = False
    else:
        nested = True
    if not nested:
        _run_here(coro)
        return
    # Called from inside an event loop (an async host): a loop cannot nest, so the
    # turn gets its own thread; the caller blocks just as a synchronous call would.
    worker = threading.Thread(target=_run_here, args=(coro,), name="wfrun-openai-turn")
    worker.start()
    worker.join()


def _run_here(coro: Coroutine[Any, Any, None]) -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(coro)
    finally:
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=1.0))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            # Unlike asyncio.run, do not wait for the default executor: a DNS lookup
            # stuck in its worker thread would hold a cancelled turn for seconds.
            loop.close()


async def _watched(step: AgentStep, coro: Coroutine[Any, Any, T]) -> T:
    """Await `coro`, cancelling it (which closes its connection) once the step must stop."""
    task = asyncio.ensure_future(coro)
    while True:
        done, _ = await asyncio.wait({task}, timeout=WATCH_POLL)
        if done:
            return task.result()
        if step.should_stop():
            task.cancel()
            # Let the cancelled request close its stream, but never wait long for it.
            await asyncio.wait({task}, timeout=1.0)
            raise _Stopped


async def _error_detail(response: httpx.Response) -> str:
    raw = b""
    async for chunk in response.aiter_bytes():
        raw += chunk
        if len(raw) > 4096:
            break
    text = raw[:4096].decode("utf-8", errors="replace").strip()
    try:
        doc = jsonin.loads(text)
    except ValueError:
        return text[:500]
    if isinstance(doc, dict) and doc.get("error") is not None:
        return _error_text(doc["error"])
    return text[:500]


def _describe(exc: Exception, endpoint: str) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"request to {endpoint} timed out ({type(exc).__name__})"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect to {endpoint}: {exc}"
    if isinstance(exc, StreamError):
        return f"bad response from {endpoint}: {exc}"
    return f"request to {endpoint} failed: {type(exc).__name__}: {exc}"


def _stop_cause(step: AgentStep) -> str:
    reason = step.control.stop_reason
    return reason if reason is not None else "deadline"


def _show_url(url: httpx.URL) -> str:
    """scheme://host[:port]/path, without credentials or a query that may hold a key."""
    port = f":{url.port}" if url.port else ""
    return f"{url.scheme}://{url.host}{port}{url.path}"


# -- reading the answer ------------------------------------------------------------
class StreamError(Exception):
    """The server's answer could not be understood (not a model mistake we can report)."""


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass
class Reply:
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None

    def assistant_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls]
        return message


class StreamAssembler:
    """Folds chat-completion chunks into one `Reply`.

    Text arrives as `delta.content` pieces; a tool call arrives as pieces keyed
    by `index`, its id and name usually once and its arguments spread over many
    chunks. `reasoning_content` (a thinking trace some servers stream) is not
    part of the answer and is dropped.
    """

    def __init__(self, limit: int = MAX_REPLY_CHARS,
                 on_text: Callable[[str], None] | None = None) -> None:
        self.limit = limit
        self.on_text = on_text  # each piece of text as it arrives (the live log)
        self.done = False
        self._size = 0
        self._text: list[str] = []
        self._calls: dict[int, tuple[list[str], list[str], list[str]]] = {}
        self._finish: str | None = None

    def feed_data(self, data: str) -> None:
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            doc = jsonin.loads(data)
        except ValueError:
            raise StreamError("a stream event is not JSON") from None
        self.feed_chunk(doc)

    def feed_chunk(self, doc: Any) -> None:
        if not isinstance(doc, dict):
            raise StreamError("a stream event is not a JSON object")
        if doc.get("error") is not None:
            raise StreamError("the server reported an error: " + _error_text(doc["error"]))
        choices = doc.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return  # keep-alives and usage-only chunks carry no choices
        choice = choices[0]
        delta: Any = choice.get("delta")
        if not isinstance(delta, dict):
            delta = choice.get("message")  # a non-streaming answer's whole message
        if not isinstance(delta, dict):
            delta = {}
        content = delta.get("content")
        if isinstance(content, str):
            self._grow(len(content))
            self._text.append(content)
            if self.on_text is not None and content:
                self.on_text(content)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for position, call in enumerate(calls):
                if isinstance(call, dict):
                    self._feed_call(position, call)
        if isinstance(choice.get("finish_reason"), str):
            self._finish = choice["finish_reason"]

    def _feed_call(self, position: int, call: dict[str, Any]) -> None:
        index = call.get("index")
        index = index if isinstance(index, int) else position
        ids, names, args = self._calls.setdefault(index, ([], [], []))
        if isinstance(call.get("id"), str) and call["id"]:
            ids[:] = [call["id"]]
        function = call.get("function")
        if not isinstance(function, dict):
            return
        name = function.get("name")
        if isinstance(name, str) and name and "".join(names) != name:
            names.append(name)
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # a few servers send parsed arguments
            arguments = json.dumps(arguments)
        if isinstance(arguments, str):
            self._grow(len(arguments))
            args.append(arguments)

    def _grow(self, size: int) -> None:
        self._size += size
        if self._size > self.limit:
            raise StreamError(f"the answer is longer than {self.limit} characters")

    def reply(self) -> Reply:
        calls = [ToolCall(ids[0] if ids else f"call_{index}", "".join(names), "".join(args))
                 for index, (ids, names, args) in sorted(self._calls.items())]
        return Reply("".join(self._text), calls, self._finish)


async def read_sse_reply(lines: AsyncIterator[str],
                         on_text: Callable[[str], None] | None = None) -> Reply:
    """Read a `text/event-stream` of chunks up to `[DONE]` or the end of the body;
    `on_text` sees each piece of the answer's text as it arrives."""
    assembler = StreamAssembler(on_text=on_text)
    data: list[str] = []
    async for line in lines:
        if line.startswith(":"):
            continue  # an SSE comment (keep-alive)
        if not line.strip():
            if data:
                assembler.feed_data("\n".join(data))
                data = []
        else:
            key, _, value = line.partition(":")
            if key.strip() == "data":
                data.append(value[1:] if value.startswith(" ") else value)
                # Servers that omit the blank line between events still send one
                # complete JSON value per data line: take it as soon as it parses.
                joined = "\n".join(data)
                if joined.strip() == "[DONE]" or _is_json(joined):
                    assembler.feed_data(joined)
                    data = []
        if assembler.done:
            break
    if data:
        assembler.feed_data("\n".join(data))
    return assembler.reply()


async def read_json_reply(chunks: AsyncIterator[bytes]) -> Reply:
    """Read a non-streaming chat completion (one JSON document)."""
    raw = bytearray()
    async for chunk in chunks:
        raw += chunk
        if len(raw) > MAX_REPLY_CHARS * 2:
            raise StreamError(f"the answer is longer than {MAX_REPLY_CHARS * 2} bytes")
    try:
        doc = jsonin.loads(raw.decode("utf-8", errors="replace"))
    except ValueError:
        raise StreamError("the response is neither an event stream nor JSON") from None
    assembler = StreamAssembler()
    assembler.feed_chunk(doc)
    return assembler.reply()


def _is_json(text: str) -> bool:
    try:
        jsonin.loads(text)
    except ValueError:
        return False
    return True


def _error_text(err: Any) -> str:
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return str(err["message"])[:500]
    return str(err)[:500]
