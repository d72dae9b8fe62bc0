"""`wfrun bridge`: the session host protocol over stdio for an adapter in any language.

The client (a Pi extension, a script) owns the agent loop and the session log;
wfrun owns launches. The client calls wfrun's `HostListener` (session/start,
tool/call, turn/started, turn/settled, session/shutdown) and wfrun calls the
client's `Host` (host/appendMessage, host/readEntries, host/abortTurn,
host/notify), each as JSON-RPC 2.0 lines (wire.py).

Two threads: the reader takes every line off stdin, answers `ping` and
`tools/list` itself and hands each host response to the call waiting for it;
one worker runs the listener calls in arrival order. Serializing them is the
point: a client runs one message's tool calls in parallel, and two parallel
`start`s must behave exactly as if made one after the other. The settle reply
waits until a just-activated run is quiet (it failed, ended, or its agent step
is in the session), so a one-shot client that exits at the settle loses nothing.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import signal
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import FrameType
from typing import IO, Any

from runner import _jsonin as jsonin
from runner.clock import Clock
from runner.errors import WfrunError
from runner.host.runtime._local import Workspace
from runner.host.session._protocol import DeliverAs, SessionEntry, ToolReply
from runner.host.session._replies import error_reply
from runner.host.session._tool import WORKFLOW_TOOL
from runner.host.session._wiring import SessionRuntime, open_session
from runner.store import StoreError

from . import _wire as wire
from ._wire import WireError

log = logging.getLogger(__name__)
HOST_CALL_TIMEOUT = 60.0  # a client that never answers must not hang wfrun forever
DEFAULT_SETTLE_TIMEOUT = 30.0
LAUNCH_VIEW_LIMIT = 20


class HostCallFailed(WfrunError):
    """The client answered a host call with an error, or went away."""


@dataclass
class _Pending:
    done: threading.Event = field(default_factory=threading.Event)
    reply: dict[str, Any] | None = None


class Peer:
    """Our requests to the client and the responses the reader hands back."""

    def __init__(self, writer: wire.LineWriter) -> None:
        self.writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._lock = threading.Lock()
        self._closed = False

    def request(self, method: str, params: dict[str, Any],
                timeout: float = HOST_CALL_TIMEOUT) -> Any:
        slot = _Pending()
        with self._lock:
            if self._closed:
                raise HostCallFailed(f"{method}: the client has gone (stdin closed)")
            call_id = next(self._ids)
            self._pending[call_id] = slot
        try:
            self.writer.send({"id": call_id, "method": method, "params": params})
            if not slot.done.wait(timeout):
                raise HostCallFailed(f"{method}: the client did not answer within "
                                     f"{timeout:g} s")
        finally:
            with self._lock:
                self._pending.pop(call_id, None)
        reply = slot.reply
        if reply is None:
            raise HostCallFailed(f"{method}: the client has gone (stdin closed)")
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], dict) else {}
            raise HostCallFailed(f"{method} failed in the client: "
                                 f"{error.get('message', reply['error'])}")
        return reply.get("result")

    def notify(self, method: str, params: dict[str, Any]) -> None:
        if not self._closed:
            self.writer.send({"method": method, "params": params})

    def resolve(self, doc: dict[str, Any]) -> None:
        with self._lock:
            slot = self._pending.get(doc["id"]) if isinstance(doc.get("id"), int) else None
        if slot is None:
            log.warning("bridge: a response to no pending request (id %r)", doc.get("id"))
            return
        slot.reply = doc
        slot.done.set()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            waiting = list(self._pending.values())
        for slot in waiting:
            slot.done.set()  # reply stays None: "the client has gone"


class RemoteHost:
    """wfrun's `Host`, answered by the client over the wire.

    Idleness is tracked here from turn/started and turn/settled rather than asked
    for: the controller checks it on its run thread, often, and a round trip per
    check would buy nothing the lifecycle events do not already say.
    """

    def __init__(self, peer: Peer, sid: str, *, idle: bool = True) -> None:
        self.peer = peer
        self.sid = sid
        self._idle = idle
        self.turn_requested = False
        self._lock = threading.Lock()

    def set_idle(self, idle: bool) -> None:
        with self._lock:
            self._idle = idle
            if not idle:
                self.turn_requested = False

    def session_id(self) -> str:
        return self.sid

    def is_idle(self) -> bool:
        with self._lock:
            return self._idle

    def append_message(self, custom_type: str, content: str, details: dict[str, Any], *,
                       deliver_as: DeliverAs = "follow_up", trigger_turn: bool = False) -> str:
        result = self.peer.request(wire.APPEND_MESSAGE, {
            "customType": custom_type, "content": content, "details": details,
            "deliverAs": deliver_as, "triggerTurn": trigger_turn})
        if trigger_turn:
            with self._lock:
                self.turn_requested = True
        entry_id = result.get("entryId") if isinstance(result, dict) else None
        return str(entry_id) if entry_id is not None else ""

    def read_session_entries(self) -> Iterable[SessionEntry]:
        result = self.peer.request(wire.READ_ENTRIES, {})
        entries = result.get("entries") if isinstance(result, dict) else None
        if not isinstance(entries, list):
            raise HostCallFailed(f"{wire.READ_ENTRIES}: the result needs an 'entries' list")
        try:
            return [wire.entry_from_doc(doc) for doc in entries]
        except WireError as exc:
            raise HostCallFailed(f"{wire.READ_ENTRIES}: {exc.message}") from None

    def abort_turn(self) -> None:
        self.peer.notify(wire.ABORT_TURN, {})

    def notify(self, text: str, level: str = "info") -> None:
        self.peer.notify(wire.NOTIFY, {"text": text, "level": level})


_STOP = object()


class BridgeServer:
    """One bridge process serves one session (the client's `initialize` names it)."""

    def __init__(self, ws: Workspace, inp: IO[bytes], out: IO[bytes], *,
                 store_clock: Clock | None = None,
                 settle_timeout: float = DEFAULT_SETTLE_TIMEOUT) -> None:
        self.ws = ws
        self.settle_timeout = settle_timeout
        self.inp = inp
        self.writer = wire.LineWriter(out)
        self.peer = Peer(self.writer)
        self.store_clock = store_clock
        self.host: RemoteHost | None = None
        self.runtime: SessionRuntime | None = None
        self._shut = False
        self._work: queue.Queue[Any] = queue.Queue()
        self._worker = threading.Thread(target=self._work_loop, name="wfrun-bridge-worker",
                                        daemon=True)

    # -- the reader (the calling thread) ------------------------------------------------
    def serve(self) -> None:
        """Read until stdin closes, then shut the session down and close the store."""
        self._worker.start()
        try:
            while (line := jsonin.read_line(self.inp, wire.MAX_LINE)) is not None:
                if line is jsonin.TOO_LONG:  # read and dropped in pieces, never held whole
                    self.writer.send({"id": None, "error": wire.error_doc(
                        wire.INVALID_REQUEST, f"message longer than {wire.MAX_LINE} bytes")})
                elif isinstance(line, bytes) and line.strip():
                    self._route_safely(line)
        finally:
            self.peer.close()
            self._work.put(_STOP)
            self._worker.join()

    def _route_safely(self, line: bytes) -> None:
        """`_route`, and a bug in it costs one message, never the bridge."""
        try:
            self._route(line)
        except Exception as exc:
            log.exception("bridge: a message failed")
            self.writer.send({"id": None, "error": wire.error_doc(
                wire.INTERNAL_ERROR, f"the message failed ({type(exc).__name__}); see the "
                "bridge's stderr")})

    def _route(self, line: bytes) -> None:
        try:
            doc = wire.decode(line)
        except WireError as exc:
            self.writer.send({"id": None, "error": wire.error_doc(exc.code, exc.message)})
            return
        method = doc.get("method")
        if method is None:
            self.peer.resolve(doc)
        elif method == wire.PING:
            self._reply(doc, {})
        elif method == wire.TOOLS_LIST:
            self._reply(doc, {"tools": [WORKFLOW_TOOL]})
        elif method == wire.SESSION_LAUNCHES:
            # Read-only, so answered here: a view must not wait behind a long settle.
            try:
                self._reply(doc, self._launches(doc["params"]))
            except WireError as exc:
                self._fail(doc, exc)
            except StoreError as exc:
                self._fail(doc, WireError(wire.INTERNAL_ERROR, exc.message))
        elif method not in wire.CLIENT_METHODS:
            self._fail(doc, WireError(wire.METHOD_NOT_FOUND,
                                      f"unknown method '{method}'; this wfrun bridge speaks "
                                      f"protocol {wire.PROTOCOL_VERSION}: "
                                      f"{', '.join(wire.CLIENT_METHODS)}"))
        else:
            self._work.put(doc)

    def _reply(self, doc: dict[str, Any], result: dict[str, Any]) -> None:
        if "id" in doc:
            self.writer.send({"id": doc["id"], "result": result})

    def _fail(self, doc: dict[str, Any], exc: WireError) -> None:
        if "id" in doc:
            self.writer.send({"id": doc["id"], "error": wire.error_doc(exc.code, exc.message)})
        else:
            log.warning("bridge: %s: %s", doc.get("method"), exc.message)

    # -- the worker: listener calls, one at a time ---------------------------------------
    def _work_loop(self) -> None:
        while True:
            doc = self._work.get()
            if doc is _STOP:
                break
            try:
                self._reply(doc, self._handle(doc["method"], doc["params"]))
            except WireError as exc:
                self._fail(doc, exc)
            except WfrunError as exc:
                self._fail(doc, WireError(wire.INTERNAL_ERROR, exc.message))
            except Exception as exc:  # a bug: keep serving, report the class only
                log.exception("bridge: %s failed", doc.get("method"))
                self._fail(doc, WireError(wire.INTERNAL_ERROR,
                                          f"{doc.get('method')} failed ({type(exc).__name__}); "
                                          "see the bridge's stderr"))
        self._finish("stdin closed")

    def _handle(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == wire.INITIALIZE:
            return self._initialize(params)
        runtime, host = self._session()
        controller = runtime.controller
        if method == wire.TOOL_CALL:
            return wire.tool_reply_doc(self._tool_call(params))
        if method == wire.TURN_STARTED:
            host.set_idle(False)
            controller.on_turn_started()
            return {}
        if method == wire.TURN_SETTLED:
            aborted = wire.field_bool(params, "aborted", False)
            timeout = wire.field_number(params, "timeout", self.settle_timeout)
            host.set_idle(True)
            controller.on_turn_settled(aborted)
            return self._settled(timeout)
        if method == wire.SESSION_START:
            reason = wire.field_str(params, "reason", "startup")
            host.set_idle(wire.field_bool(params, "idle", True))
            controller.on_session_start(reason)
            return self._settled(wire.field_number(params, "timeout", self.settle_timeout))
        # session/shutdown
        self._finish(wire.field_str(params, "reason", "shutdown"))
        return {}

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.host is not None:
            raise WireError(wire.INVALID_REQUEST, "initialize was already sent; one bridge "
                                                  "serves one session")
        version = params.get("protocolVersion")
        if version != wire.PROTOCOL_VERSION:
            raise WireError(wire.INVALID_PARAMS,
                            f"protocolVersion {version!r} is not supported; this wfrun bridge "
                            f"speaks {wire.PROTOCOL_VERSION}")
        sid = wire.field_str(params, "sessionId")
        host = RemoteHost(self.peer, sid, idle=wire.field_bool(params, "idle", True))
        self.runtime = open_session(host, self.ws, store_clock=self.store_clock)
        self.host = host
        return {"protocolVersion": wire.PROTOCOL_VERSION, "sessionId": sid,
                "server": {"name": "wfrun", "version": _version()},
                "tools": [WORKFLOW_TOOL]}

    def _launches(self, params: dict[str, Any]) -> dict[str, Any]:
        """This session's launches, newest last (a view for status lines; the store
        stays the truth)."""
        runtime, host = self._session()
        limit = int(wire.field_number(params, "limit", LAUNCH_VIEW_LIMIT))
        rows = runtime.coordinator.book.query(session_id=host.sid)[-max(limit, 1):]
        return {"launches": [
            {"runId": r.run_id, "workflow": r.workflow_ref, "status": r.status,
             "error": ({"code": r.error_code, "message": r.error_message}
                       if r.error_code else None)} for r in rows]}

    def _session(self) -> tuple[SessionRuntime, RemoteHost]:
        if self.runtime is None or self.host is None:
            raise WireError(wire.NOT_INITIALIZED, "send initialize {protocolVersion, "
                                                  "sessionId} first")
        if self._shut:
            raise WireError(wire.INVALID_REQUEST, "this session was shut down; start a new "
                                                  "bridge for a new session")
        return self.runtime, self.host

    def _tool_call(self, params: dict[str, Any]) -> ToolReply:
        runtime, _ = self._session()
        name = wire.field_str(params, "name", "workflow")
        call_id = str(params.get("callId") or "")
        args = params.get("arguments", {})
        if isinstance(args, str):  # some clients pass the model's raw argument text
            try:
                args = jsonin.loads(args) if args.strip() else {}
            except ValueError:
                return error_reply("the tool arguments are not valid JSON; send a JSON object",
                                   None, "invalid_arguments")
        return runtime.controller.on_tool_call(call_id, name, args)

    def _settled(self, timeout: float) -> dict[str, Any]:
        runtime, host = self._session()
        try:
            runtime.controller.wait_quiet(timeout)
            quiet = True
        except TimeoutError:
            quiet = False
        return {"quiet": quiet, "turnRequested": host.turn_requested}

    def _finish(self, reason: str) -> None:
        """Shut the session down once (parks an active run), then close the store."""
        if self._shut or self.runtime is None:
            self._shut = True
            return
        self._shut = True
        try:
            self.runtime.controller.on_session_shutdown(reason)
        finally:
            self.runtime.close()


def _version() -> str:
    # Not `runner.__version__`: importing the package root here would tie this layer
    # to everything the root re-exports (import-linter's host layers).
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("wfrun")
    except PackageNotFoundError:
        return "unknown"


def serve_stdio(ws: Workspace, *, store_clock: Clock | None = None,
                settle_timeout: float = DEFAULT_SETTLE_TIMEOUT) -> None:
    """Serve the protocol on this process's stdin/stdout.

    The protocol gets a private copy of fd 1 and fd 1 becomes stderr, so a stray
    print from a hook or a library cannot corrupt the message stream.
    """
    sys.stdout.flush()
    proto = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    server = BridgeServer(ws, sys.stdin.buffer, proto, store_clock=store_clock,
                          settle_timeout=settle_timeout)

    def on_term(_sig: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # leaves the read loop; serve() then shuts down

    signal.signal(signal.SIGTERM, on_term)
    # A Ctrl-C in the client's terminal reaches its whole process group; the client
    # decides what it means (Pi: abort the turn), and ends us by closing stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        server.serve()
    except KeyboardInterrupt:
        pass
    finally:
        proto.close()
