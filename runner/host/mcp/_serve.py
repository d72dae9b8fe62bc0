"""The `wfrun mcp` process: answer the client at once, open the session behind it.

Claude Code gives an MCP server about two seconds to answer `initialize`; a
server that misses it is shown as failed and the model has no tool for the whole
session (issue 33). So the start path loads only the standard library, the tool's
definition and the hooks' socket (ADR 0007):

1. listen on the hooks' socket (channel.py), so a SessionStart hook that Claude
   runs while the server starts finds it;
2. answer `initialize` and `tools/list` from stdio.py;
3. then, once the client says `initialized`, open the session (server.py: the
   controller, the launch layer, the store) on a thread. A tool call or hook event
   that arrives first waits for it; if it cannot open (a broken store, a missing
   driver), each call gets that one line as its error, and stderr says it once,
   instead of a server that died unseen.

Anything a workflow step or a library prints to stdout goes to stderr: fd 1 is
the protocol's and gets only its messages.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import socketserver
import sys
import threading

from runner import _jsonin as jsonin
from runner.errors import ConflictError, OperationFailed, WfrunError
from runner.host.session._tool import WORKFLOW_TOOL

from . import _channel as channel
from ._stdio import RpcError, ServerInfo, StdioServer, TaskServer, ToolResult

TYPE_CHECKING = False  # no typing at run time (start-up time)
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType
    from typing import IO, Any

    from runner.clock import Clock
    from runner.host.runtime._local import Workspace

    from ._server import Client, McpSession

SERVER_NAME = "wfrun"  # Claude Code shows the tool as mcp__wfrun__workflow
#: Sent in `initialize`; clients that show server instructions to the model (Claude
#: Code does) tell it what the tool is for before it sees any tool list.
INSTRUCTIONS = (
    "wfrun runs this project's workflows: the YAML files in .wfrun/workflows/ (and the "
    "user's and built-in ones). When the user asks to run, start, check or answer a "
    "workflow, or a workflow step asks you for a result, use the `workflow` tool of this "
    "server (action list, start, status, answer, submit, ...), not any other workflow tool.")


def tool_definition() -> dict[str, Any]:
    """The `workflow` tool as MCP lists it."""
    return {"name": str(WORKFLOW_TOOL["name"]), "description": str(WORKFLOW_TOOL["description"]),
            "inputSchema": WORKFLOW_TOOL["parameters"]}


class LazySession:
    """The McpSession, opened once on first need (or by `warm`); until then calls wait."""

    def __init__(self, opener: Callable[[], McpSession]) -> None:
        self._opener = opener
        self._lock = threading.Lock()
        self._session: McpSession | None = None
        self._error: str | None = None
        self._closed = False

    def warm(self) -> None:
        threading.Thread(target=self._try_get, name="wfrun-mcp-open", daemon=True).start()

    def _try_get(self) -> None:
        with contextlib.suppress(OperationFailed):  # said on stderr; each call says it
            self.get()

    def get(self) -> McpSession:
        with self._lock:
            if self._session is not None:
                return self._session
            if self._error is None and not self._closed:
                try:
                    self._session = self._opener()
                    return self._session
                except Exception as exc:
                    self._error = _one_line(exc)
                    sys.stderr.write(f"wfrun mcp: error: {self._error}\n")
                    sys.stderr.flush()
            raise OperationFailed(self._error or "the wfrun mcp server is shutting down")

    def tool_call(self, name: str, args: dict[str, Any]) -> ToolResult:
        try:
            session = self.get()
        except OperationFailed as exc:
            return ToolResult(f"wfrun cannot serve this project: {exc.message}", is_error=True)
        reply = session.tool_call(name, args)
        return ToolResult(reply.content, reply.is_error,
                          {"wfrun": reply.details} if reply.details else None)

    def task_server(self) -> LazyTasks:
        return LazyTasks(self)

    def hook_event(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            session = self.get()
        except OperationFailed as exc:
            return {"ok": False, "error": exc.message}
        return session.hook_event(request)

    def close(self, reason: str = "exit") -> None:
        with self._lock:
            self._closed = True
            session, self._session = self._session, None
        if session is not None:
            session.close(reason)


class LazyTasks(TaskServer):
    """The session's MCP Tasks (tasks.py), once the session is open."""

    def __init__(self, session: LazySession) -> None:
        self.session = session

    def _tasks(self) -> TaskServer:
        try:
            return self.session.get().tasks
        except OperationFailed as exc:
            raise RpcError(-32603, f"wfrun cannot serve this project: {exc.message}") from None

    def create(self, name: str, args: dict[str, Any], ttl: Any) -> dict[str, Any]:
        return self._tasks().create(name, args, ttl)

    def get(self, task_id: Any) -> dict[str, Any]:
        return self._tasks().get(task_id)

    def result(self, task_id: Any) -> dict[str, Any]:
        return self._tasks().result(task_id)

    def list(self, cursor: Any) -> dict[str, Any]:
        return self._tasks().list(cursor)

    def cancel(self, task_id: Any) -> dict[str, Any]:
        return self._tasks().cancel(task_id)


def _one_line(exc: BaseException) -> str:
    if not isinstance(exc, WfrunError):
        from runner.host.runtime._errors import translate

        exc = translate(exc) or exc
    if isinstance(exc, WfrunError):
        return " ".join(exc.message.split())
    import traceback  # a bug: its traceback is the useful report

    traceback.print_exception(exc, file=sys.stderr)
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


# -- the hooks' socket ---------------------------------------------------------------
class _HookHandler(socketserver.StreamRequestHandler):
    server: _HookServer

    def handle(self) -> None:
        import json

        line = self.rfile.readline(1 << 20)
        try:
            request = jsonin.loads(line)
            reply = (self.server.session.hook_event(request) if isinstance(request, dict)
                     else {"ok": False, "error": "a request is one JSON object"})
        except ValueError:
            reply = {"ok": False, "error": "a request is one JSON object on one line"}
        except Exception as exc:  # one bad event must not take the session down
            import traceback

            traceback.print_exc(file=sys.stderr)
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        self.wfile.write(json.dumps(reply).encode() + b"\n")


class _HookServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    session: Any  # anything with hook_event(request) -> reply: McpSession or LazySession


def listen_for_hooks(session: LazySession, claude_pid: int) -> _HookServer:
    """Serve `session.hook_event` on the socket named after `claude_pid`."""
    try:
        path = channel.socket_path(claude_pid)
    except (channel.ChannelError, OSError) as exc:
        raise OperationFailed(f"cannot make the hooks' socket folder: {exc}") from None
    if os.path.lexists(path):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # a dead process's socket
        else:
            raise ConflictError(f"another wfrun mcp server already serves Claude process "
                                f"{claude_pid} ({path}); configure wfrun once in .mcp.json")
        finally:
            probe.close()
    old = os.umask(0o177)
    try:
        server = _HookServer(path, _HookHandler)
    finally:
        os.umask(old)
    server.session = session
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                     daemon=True, name="wfrun-hooks").start()
    return server


# -- the process ---------------------------------------------------------------------
def _protocol_streams() -> tuple[IO[bytes], IO[bytes]]:
    """(stdin, the protocol's stdout); from here on fd 1 and sys.stdout are stderr."""
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return sys.stdin.buffer, out


def serve_stdio(runtime: Callable[[], tuple[Workspace, Clock | None]], session_id: str, *,
                client: Client, version: str, claude_pid: int | None = None) -> None:
    """Serve MCP on stdin/stdout until the client closes stdin (or SIGTERM).
    `runtime` (the workspace, and a store clock if a test sets one) is called after
    the handshake, on the session's thread: it loads the runtime."""

    def open_session() -> McpSession:
        from ._server import McpSession

        workspace, store_clock = runtime()
        return McpSession(workspace, session_id, client=client, store_clock=store_clock)

    session = LazySession(open_session)
    hooks, hooks_path = None, None
    if client == "claude-code":
        pid = claude_pid or channel.claude_process()  # the hooks' CLAUDE_PID
        hooks = listen_for_hooks(session, pid)
        hooks_path = channel.socket_path(pid)

    def on_term(_sig: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # leaves the read loop; the finally parks the run

    signal.signal(signal.SIGTERM, on_term)
    reader, writer = _protocol_streams()
    info = ServerInfo(SERVER_NAME, version, [tool_definition()], INSTRUCTIONS,
                      on_initialized=session.warm, tasks=session.task_server())
    try:
        StdioServer(info, session.tool_call, reader, writer).serve()
    except KeyboardInterrupt:
        pass
    finally:
        # The client closes stdin, then signals: a SIGTERM now must not cut the park
        # and hand-over below short (the run would stay `running` until its lease ends).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if hooks is not None:
            hooks.shutdown()
            hooks.server_close()
        if hooks_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(hooks_path)
        session.close()
