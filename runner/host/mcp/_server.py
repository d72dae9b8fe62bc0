"""The session behind `wfrun mcp`: the `workflow` tool's calls and the hooks' events.

serve.py starts the process and loads this module only once `initialize` is
answered (it brings the session controller, the launch layer and the store).
One process serves one agent session. The session controller (the same one every
host uses) answers tool calls; its `Host` is the wfrun session log (sessionlog.py),
because MCP can carry a tool and nothing else: no turn-settled signal, no way to
start a turn, no session log. What fills the gap depends on the client:

- `--client claude-code`: Claude Code's hooks (`wfrun hook claude-code`) report
  session start, turn start and turn settled over a Unix socket named after the
  Claude process (channel.py); the Stop hook turns a pending message into one more
  model turn. Launches activate only when the Stop hook says the turn settled.
- `--client none` (any other MCP client): no hooks, so no signal that a turn ended:
  a queued launch never starts inside the client's session (not even at its next
  tool call, which may be in the same turn). It starts when the client exits (the
  session hands it over to `wfrun host`) or when the session starts again
  (`--session ID`, at its first call); pending messages (a startup failure's
  follow-up, an agent step) are returned ahead of a call's own reply
  (docs/hosts.md, "Other MCP clients").

Tool calls and hook events are serialized under one lock: Claude Code runs the
tool calls of one message in parallel, and two parallel starts must behave as if
made one after the other. Replies carry only text content: Claude Code shows a
`structuredContent` to the model instead of the text when both are present.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterable
from typing import Any, Literal

from runner.clock import Clock
from runner.host.runtime._local import Workspace
from runner.host.session._protocol import DeliverAs, SessionEntry, ToolReply
from runner.host.session._wiring import SessionRuntime, open_session

from ._hook import render
from ._sessionlog import SessionLog
from ._tasks import McpTasks

log = logging.getLogger(__name__)
Client = Literal["claude-code", "none"]
#: How long a hook's reply (and a hookless client's first call) waits for a run it
#: activated or resumed to reach a quiet point: long enough for a first agent step to
#: be appended on a loaded machine, short enough that no hook holds the client (Claude
#: cancels a hook after 60 s). A longer run goes on; what it says later waits in the
#: session log for the next hook, or is handed over with the run if the client exits.
SETTLE_TIMEOUT = 5.0
#: What a hookless client's model learns with a start: when it will really start.
NO_SETTLE_NOTE = ("It starts once this client exits (a running `wfrun host` takes it) "
                  "or when this session starts again; `status` shows how it ended.")


class LogHost:
    """The `Host` of an MCP session: messages go to the wfrun session log; turns are
    known only from hook events (never idle while a turn is open)."""

    def __init__(self, session_log: SessionLog, sid: str, *, hooks: bool) -> None:
        self.log = session_log
        self.sid = sid
        self.hooks = hooks
        self.turn_open = False

    def session_id(self) -> str:
        return self.sid

    def is_idle(self) -> bool:
        # Without hooks nothing says a turn is open: messages may be appended at any
        # time (they go out with the next call's reply); activation waits instead
        # (`activates_at_settle` is off).
        return not self.turn_open if self.hooks else True

    def append_message(self, custom_type: str, content: str, details: dict[str, Any], *,
                       deliver_as: DeliverAs = "follow_up", trigger_turn: bool = False) -> str:
        return self.log.append_message(custom_type, content, details, deliver_as=deliver_as,
                                       trigger_turn=trigger_turn)

    def read_session_entries(self) -> Iterable[SessionEntry]:
        return [SessionEntry(m.id, "custom_message", custom_type=m.custom_type,
                             content=m.content, details=m.details)
                for m in self.log.messages()]

    def abort_turn(self) -> None:
        log.info("abort requested; an MCP server cannot abort the client's turn")

    def notify(self, text: str, level: str = "info") -> None:
        log.log(logging.WARNING if level in ("warning", "error") else logging.INFO, "%s", text)


class McpSession:
    """The session behind one `wfrun mcp` process (rebinds when Claude's id changes)."""

    def __init__(self, ws: Workspace, session_id: str, *, client: Client,
                 store_clock: Clock | None = None,
                 settle_timeout: float = SETTLE_TIMEOUT) -> None:
        if ws.project_root is None:
            raise ValueError("an MCP session needs a project")
        self.ws = ws
        self.client = client
        self.store_clock = store_clock
        self.settle_timeout = settle_timeout
        self.lock = threading.Lock()
        self._calls = itertools.count(1)
        self._started = False  # a hookless session starts at its first call
        self.host, self.runtime = self._bind(session_id)
        self.tasks = McpTasks(self)

    @property
    def hooks(self) -> bool:
        return self.client == "claude-code"

    def _bind(self, session_id: str) -> tuple[LogHost, SessionRuntime]:
        assert self.ws.project_root is not None
        session_log = SessionLog.for_session(self.ws.project_root / ".wfrun", session_id)
        host = LogHost(session_log, session_id, hooks=self.hooks)
        runtime = open_session(host, self.ws, store_clock=self.store_clock)
        runtime.controller.activates_at_settle = self.hooks
        return host, runtime

    # -- the tool ----------------------------------------------------------------------
    def tool_call(self, name: str, args: dict[str, Any], *, as_task: bool = False) -> ToolReply:
        """One `workflow` call. `as_task`: the call is an MCP task (tasks.py), whose reply
        is the task, so pending messages wait for the next plain call."""
        with self.lock:
            controller = self.runtime.controller
            if not self.hooks and not self._started:
                # The session's start, at its first call: what an earlier process of
                # this session left (queued, parked) activates now; its turns are over.
                self._started = True
                controller.on_session_start("startup")
                self._wait_quiet()
            elif not self.hooks:
                controller.deliver_pending()  # e.g. what a host reported meanwhile
            reply = controller.on_tool_call(f"mcp-{next(self._calls)}", name, args)
            if self.hooks or as_task:
                return reply
            if reply.details.get("queued"):
                reply = ToolReply(reply.content + " " + NO_SETTLE_NOTE, reply.details,
                                  reply.is_error)
            pending = self.host.log.pending()
            if not pending:
                return reply
            # The reply is the delivery: it goes out as this call's result.
            self.host.log.mark_delivered([m.id for m in pending], "tool-reply")
            return ToolReply(render(pending, note=None) + "\n\n" + reply.content, reply.details,
                             reply.is_error)

    def activate_now(self) -> None:
        """Start what this session queued (a launch an MCP task follows): the client's
        polling is the idle signal a hookless client lacks. With hooks, the turn's
        settle starts it as always (nothing runs inside the model's turn)."""
        if self.hooks:
            return
        with self.lock:
            self.runtime.controller.activate_now()

    def status_view(self, run_id: str) -> dict[str, Any]:
        reader = self.runtime.controller.status_reader
        with self.lock:
            return dict(reader(run_id)) if reader is not None else {}

    def final_output(self, run_id: str) -> Any:
        with self.lock:
            return self.runtime.controller.coordinator.reader.final_output(run_id)

    # -- hook events -------------------------------------------------------------------
    def hook_event(self, request: dict[str, Any]) -> dict[str, Any]:
        event = request.get("event")
        session_id = request.get("session_id")
        if not isinstance(session_id, str) or event not in (
                "session_start", "turn_started", "turn_settled"):
            return {"ok": False, "error": "unknown hook event or missing session id"}
        with self.lock:
            if session_id != self.host.sid:
                self._rebind(session_id)
            controller = self.runtime.controller
            if event == "turn_started":
                self.host.turn_open = True
                controller.on_turn_started()
                return {"ok": True}
            if event == "turn_settled":
                self.host.turn_open = False
                controller.on_turn_settled(bool(request.get("aborted")))
            else:
                controller.on_session_start(str(request.get("reason") or "startup"))
            return self._wait_quiet()

    def _wait_quiet(self) -> dict[str, Any]:
        try:
            self.runtime.controller.wait_quiet(self.settle_timeout)
        except TimeoutError:
            return {"ok": True, "quiet": False}  # a long run: it goes on without the hook
        return {"ok": True, "quiet": True}

    def _rebind(self, session_id: str) -> None:
        """Claude started another session in this process (`/clear`): the old one shuts
        down (its run parks, to resume when that session is back) and the new one binds."""
        log.info("session %s replaces %s", session_id, self.host.sid)
        self.runtime.controller.on_session_shutdown("clear")
        self.runtime.close()
        self.host, self.runtime = self._bind(session_id)

    def close(self, reason: str = "exit") -> None:
        self.tasks.close()
        with self.lock:
            self.runtime.controller.on_session_shutdown(reason)
            self.runtime.close()
