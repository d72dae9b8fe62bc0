"""The part of MCP that `wfrun mcp` speaks: JSON-RPC 2.0, one message per line, on
stdin/stdout (ADR 0007).

A server with one tool needs five methods: `initialize`, `ping`, `tools/list`,
`tools/call` and the `notifications/*` it may ignore. This module answers the first
three on the reading thread, at once and without the session behind the tool, so a
client that waits ~2 s for the server (Claude Code) gets its answer before wfrun has
imported its engine; `tools/call` goes to one worker thread in arrival order (the
session serializes calls anyway) so `ping` is still answered during a long call.
A client that declares the `tasks` capability on revision 2025-11-25 also gets MCP
Tasks (`tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`, a `tools/call` with
`task`): each answered on a thread of its own, by tasks.py behind the session.

Standard library only, on purpose: the official MCP SDK costs ~0.7 s of CPU to
import, which a loaded machine turns into seconds (issue 33). The SDK's own client
is what the tests talk to, so they check this module against the reference.
"""

from __future__ import annotations

import json
import queue
import sys
import threading

from runner import _jsonin as jsonin

TYPE_CHECKING = False  # no typing at run time (start-up time)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import IO, Any

#: Protocol revisions with the `initialize` handshake, oldest first. A client asking
#: for one of them gets it; any other gets the newest (the spec's negotiation).
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
#: The revision whose Tasks (experimental) tasks.py implements: served only to a client
#: that negotiated it and declared the `tasks` capability.
TASKS_VERSION = "2025-11-25"
TASK_METHODS = ("tasks/get", "tasks/result", "tasks/list", "tasks/cancel")
#: The server's `tasks` capability: cancel, list, and task-augmented `tools/call`.
TASKS_CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
MAX_LINE = jsonin.MAX_LINE  # one message: the bridge's limit (16 MiB)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602


# Plain classes: dataclasses import `inspect`, NamedTuple `typing` (start-up time).
class ToolResult:
    __slots__ = ("is_error", "meta", "text")

    def __init__(self, text: str, is_error: bool = False,
                 meta: dict[str, Any] | None = None) -> None:
        self.text = text
        self.is_error = is_error
        self.meta = meta


class ServerInfo:
    """`tools` are MCP `Tool` objects (name, description, inputSchema);
    `on_initialized` is called when the client sends `notifications/initialized` (it
    took our `initialize` answer and goes on): the place to start warming up. A
    client that only probes the server (`wfrun integrate`'s check) never sends it."""

    __slots__ = ("instructions", "name", "on_initialized", "tasks", "tools", "version")

    def __init__(self, name: str, version: str, tools: list[dict[str, Any]],
                 instructions: str | None = None,
                 on_initialized: Callable[[], None] | None = None,
                 tasks: TaskServer | None = None) -> None:
        self.name = name
        self.version = version
        self.tools = tools
        self.instructions = instructions
        self.on_initialized = on_initialized
        self.tasks = tasks


class TaskServer:
    """What serves MCP Tasks (tasks.py behind serve.py's lazy session): each method
    answers one request, raising RpcError for a protocol error."""

    def create(self, name: str, args: dict[str, Any], ttl: Any) -> dict[str, Any]:
        raise NotImplementedError

    def get(self, task_id: Any) -> dict[str, Any]:
        raise NotImplementedError

    def result(self, task_id: Any) -> dict[str, Any]:
        raise NotImplementedError

    def list(self, cursor: Any) -> dict[str, Any]:
        raise NotImplementedError

    def cancel(self, task_id: Any) -> dict[str, Any]:
        raise NotImplementedError


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class StdioServer:
    """Serve one MCP session on a pair of binary streams until the input ends."""

    def __init__(self, info: ServerInfo, call_tool: Callable[[str, dict[str, Any]], ToolResult],
                 reader: IO[bytes], writer: IO[bytes]) -> None:
        self.info = info
        self.call_tool = call_tool
        self.reader = reader
        self.writer = writer
        self._write_lock = threading.Lock()
        self._calls: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._worker = threading.Thread(target=self._work, name="wfrun-mcp-calls", daemon=True)
        self._initialized = False
        self._tasks: TaskServer | None = None  # set when the client speaks Tasks

    def serve(self) -> None:
        """Read until end of input, then let the calls already read finish."""
        self._worker.start()
        try:
            while True:
                line = self.reader.readline(MAX_LINE + 1)
                if not line:
                    break
                if len(line) > MAX_LINE and not line.endswith(b"\n"):
                    self._send_error(None, INVALID_REQUEST, "message larger than 16 MiB")
                    self._skip_rest_of_line()
                    continue
                if line.strip():
                    self._receive(line)
        finally:
            self._calls.put(None)
            self._worker.join()

    def _skip_rest_of_line(self) -> None:
        while True:
            chunk = self.reader.readline(MAX_LINE)
            if not chunk or chunk.endswith(b"\n"):
                return

    # -- reading ---------------------------------------------------------------------
    def _receive(self, line: bytes) -> None:
        try:
            # Twice the arguments' bound: the envelope adds levels, and arguments
            # between the two get the tool's own "nested too deep" reply, with their id.
            message = jsonin.loads(line, max_depth=2 * jsonin.MAX_DEPTH)
        except ValueError:
            self._send_error(None, PARSE_ERROR, "not JSON: send one JSON-RPC message per line")
            return
        if isinstance(message, list):  # a batch (2025-03-26): each in turn
            for item in message:
                self._dispatch(item)
        else:
            self._dispatch(message)

    def _dispatch(self, message: Any) -> None:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self._send_error(None, INVALID_REQUEST, "not a JSON-RPC 2.0 message")
            return
        method = message.get("method")
        if not isinstance(method, str):
            return  # a response to a request we never send: nothing to do
        msg_id = message.get("id")
        if "id" not in message:  # notifications need no answer
            if method == "notifications/initialized" and not self._initialized:
                self._initialized = True
                if self.info.on_initialized is not None:
                    self.info.on_initialized()
            return
        params = message.get("params") or {}
        if not isinstance(params, dict):
            self._send_error(msg_id, INVALID_PARAMS, "params must be an object")
            return
        if method == "tools/call":
            self._calls.put(message)
            return
        if method in TASK_METHODS and self._tasks is not None:
            # Off the reading thread (tasks/result blocks until the run ends), and off
            # the calls' worker (a `submit` must get through while a result waits).
            threading.Thread(target=self._task_request, args=(self._tasks, message),
                             name="wfrun-mcp-task", daemon=True).start()
            return
        try:
            result = self._answer(method, params)
        except RpcError as exc:
            self._send_error(msg_id, exc.code, str(exc))
            return
        self._send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    def _answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "initialize":
            asked = params.get("protocolVersion")
            version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1]
            capabilities: dict[str, Any] = {"tools": {"listChanged": False}}
            declared = params.get("capabilities")
            if (self.info.tasks is not None and version == TASKS_VERSION
                    and isinstance(declared, dict) and isinstance(declared.get("tasks"), dict)):
                self._tasks = self.info.tasks
                capabilities["tasks"] = TASKS_CAPABILITY
            else:
                self._tasks = None  # a client without Tasks keeps the plain tool call
            result: dict[str, Any] = {
                "protocolVersion": version,
                "capabilities": capabilities,
                "serverInfo": {"name": self.info.name, "version": self.info.version},
            }
            if self.info.instructions:
                result["instructions"] = self.info.instructions
            return result
        if method == "ping":
            return {}
        if method == "tools/list":
            if self._tasks is None:
                return {"tools": self.info.tools}
            return {"tools": [{**tool, "execution": {"taskSupport": "optional"}}
                              for tool in self.info.tools]}
        raise RpcError(METHOD_NOT_FOUND, f"wfrun mcp does not serve {method!r}")

    # -- tool calls ------------------------------------------------------------------
    def _work(self) -> None:
        while (message := self._calls.get()) is not None:
            msg_id = message.get("id")
            params = message.get("params") or {}
            name, args = params.get("name"), params.get("arguments")
            if not isinstance(name, str) or not isinstance(args, dict | None):
                self._send_error(msg_id, INVALID_PARAMS,
                                 "tools/call needs a tool name and object arguments")
                continue
            task = params.get("task")
            if self._tasks is not None and isinstance(task, dict):
                self._task_request(self._tasks, message)
                continue
            try:
                reply = self.call_tool(name, dict(args or {}))
            except Exception as exc:  # one failed call must not end the session
                import traceback

                traceback.print_exc(file=sys.stderr)  # the client's server log
                reply = ToolResult(f"wfrun: internal error: {type(exc).__name__}: {exc}",
                                   is_error=True)
            result: dict[str, Any] = {"content": [{"type": "text", "text": reply.text}],
                                      "isError": reply.is_error}
            if reply.meta:
                result["_meta"] = reply.meta
            self._send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    # -- tasks -----------------------------------------------------------------------
    def _task_request(self, tasks: TaskServer, message: dict[str, Any]) -> None:
        msg_id, method = message.get("id"), message.get("method")
        params = message.get("params") or {}
        try:
            if method == "tools/call":
                task = params.get("task") or {}
                result = tasks.create(params["name"], dict(params.get("arguments") or {}),
                                      task.get("ttl"))
            elif method == "tasks/list":
                result = tasks.list(params.get("cursor"))
            else:
                answer = {"tasks/get": tasks.get, "tasks/result": tasks.result,
                          "tasks/cancel": tasks.cancel}[str(method)]
                result = answer(params.get("taskId"))
        except RpcError as exc:
            self._send_error(msg_id, exc.code, str(exc))
            return
        except Exception as exc:  # one failed request must not end the session
            import traceback

            traceback.print_exc(file=sys.stderr)
            self._send_error(msg_id, -32603, f"wfrun: internal error: {type(exc).__name__}")
            return
        self._send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    # -- writing ---------------------------------------------------------------------
    def _send_error(self, msg_id: Any, code: int, message: str) -> None:
        self._send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})

    def _send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        with self._write_lock:
            try:
                self.writer.write(data)
                self.writer.flush()
            except (BrokenPipeError, ValueError):
                pass  # the client closed its end; nobody is left to answer
