"""`AgentSession`: the in-process host any Python agent loop can drive.

One framework run (openai-agents `Runner.run`, pydantic-ai `Agent.run_sync`, a
hand-written loop) is one turn. The session serves the `workflow` tool, calls
wfrun's listener at the turn's edges, and hands back what wfrun asked the model
to see next (a launch failure's follow-up, an agent step's contract) as the next
run's input:

    with AgentSession.open("path/to/project", session_id="demo") as session:
        text = "please start the review workflow"
        while text is not None:
            with session.turn(text) as prompt:
                agent_run(prompt)          # its tool calls go to session.call_tool
            text = session.next_input()

Tool calls are serialized: a framework that runs one message's calls in
parallel gets the results of running them one after the other. Nothing a call
queues starts before the turn ends; `end_turn` waits until an activated run is
quiet, so the follow-up is there when it returns.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from runner import _jsonin as jsonin
from runner.clock import Clock
from runner.compiler import build_catalog, find_project_root
from runner.compiler._discovery import PROJECT_DIR
from runner.errors import InputError
from runner.host.runtime._local import Workspace
from runner.host.session._protocol import DeliverAs, SessionEntry, ToolReply
from runner.host.session._replies import error_reply
from runner.host.session._tool import WORKFLOW_TOOL
from runner.host.session._wiring import SessionRuntime, open_session

from ._sessionlog import TURN_TYPE, SessionLog

T = TypeVar("T")
SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
DEFAULT_SETTLE_TIMEOUT = 30.0


class _LogHost:
    """wfrun's `Host` over the session's own log; turns are the caller's."""

    def __init__(self, log: SessionLog) -> None:
        self.log = log
        self.in_turn = False
        # (model-visible text, asks for a turn); restored from the log on reopen
        self.pending: list[tuple[str, bool]] = log.unread()
        self.notices: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def session_id(self) -> str:
        return self.log.session_id

    def is_idle(self) -> bool:
        with self._lock:
            return not self.in_turn

    def append_message(self, custom_type: str, content: str, details: dict[str, Any], *,
                       deliver_as: DeliverAs = "follow_up", trigger_turn: bool = False) -> str:
        entry = self.log.append("custom_message", custom_type=custom_type, content=content,
                                details=details, trigger_turn=trigger_turn)
        with self._lock:
            self.pending.append((content, trigger_turn))
        return entry.id

    def read_session_entries(self) -> list[SessionEntry]:
        return self.log.entries()

    def abort_turn(self) -> None:
        self.notify("wfrun asked to abort the turn", "warning")

    def notify(self, text: str, level: str = "info") -> None:
        with self._lock:
            self.notices.append((level, text))


class AgentSession:
    """One agent session in this process, bound to a wfrun project."""

    def __init__(self, runtime: SessionRuntime, host: _LogHost) -> None:
        self._runtime = runtime
        self._host = host
        self._tool_lock = threading.Lock()
        self._closed = False
        self.settle_timeout = DEFAULT_SETTLE_TIMEOUT

    # -- opening and closing --------------------------------------------------------
    @classmethod
    def open(cls, project: str | Path | None = None, *, session_id: str = "default",
             log_path: str | Path | None = None, start: bool = True,
             store_clock: Clock | None = None,
             settle_timeout: float = DEFAULT_SETTLE_TIMEOUT) -> AgentSession:
        """Open (or resume) session `session_id` of the project at `project` (default:
        the nearest folder holding .wfrun/ from the current directory).

        The log defaults to `.wfrun/state/sessions/<session_id>.jsonl`; reopening the
        same id resumes the session (queued launches, pending follow-ups).
        `settle_timeout` is how long the end of a turn waits for a run to go quiet
        (reach a step for this session, or end) before `run` returns.
        """
        if settle_timeout <= 0:
            raise InputError(f"settle_timeout must be a positive number of seconds, "
                             f"not {settle_timeout!r}")
        if not SESSION_ID_RE.match(session_id):
            raise InputError(f"session id {session_id!r} must be 1-128 letters, digits, "
                             "'.', '_' or '-', starting with a letter or digit")
        root = _project_root(project)
        ws = Workspace(build_catalog("workflows", root, None), root,
                       root / PROJECT_DIR / "state")
        path = Path(log_path) if log_path is not None else (
            root / PROJECT_DIR / "state" / "sessions" / f"{session_id}.jsonl")
        log = SessionLog(path, session_id)
        host = _LogHost(log)
        session = cls(open_session(host, ws, store_clock=store_clock), host)
        session.settle_timeout = settle_timeout
        if start:
            session.start("resume" if log.entries() else "startup")
        return session

    def start(self, reason: str = "startup") -> None:
        """The session (re)started: activate or recover what it left queued."""
        self._runtime.controller.on_session_start(reason)
        self._wait_quiet(self.settle_timeout)

    def close(self, reason: str = "closed") -> None:
        """Shut the session down (an active run is parked, resumed at the next open)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._runtime.controller.on_session_shutdown(reason)
        finally:
            self._runtime.close()

    def __enter__(self) -> AgentSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the tool --------------------------------------------------------------------
    @property
    def session_id(self) -> str:
        return self._host.session_id()

    @property
    def tool(self) -> dict[str, Any]:
        """The `workflow` tool: `name`, `description`, `parameters` (a flat JSON Schema)."""
        return WORKFLOW_TOOL

    def call_tool(self, arguments: dict[str, Any] | str, call_id: str = "") -> ToolReply:
        """Run one `workflow` call (arguments as an object or the model's JSON text).
        Bad arguments come back as a reply with `is_error` and what to fix."""
        if isinstance(arguments, str):
            try:
                arguments = jsonin.loads(arguments) if arguments.strip() else {}
            except ValueError:
                return error_reply("the tool arguments are not valid JSON; send a JSON object",
                                   None, "invalid_arguments")
        with self._tool_lock:
            return self._runtime.controller.on_tool_call(call_id, "workflow", arguments)

    async def acall_tool(self, arguments: dict[str, Any] | str,
                         call_id: str = "") -> ToolReply:
        """`call_tool` off the event loop (the store and files block)."""
        return await asyncio.to_thread(self.call_tool, arguments, call_id)

    # -- turns -------------------------------------------------------------------------
    def begin_turn(self, text: str | None = None) -> str:
        """A turn starts; `text` is the user's message, if any. Returns the run's input:
        `text` after any passive wfrun notes delivered while idle."""
        if text is not None:
            self._host.log.append("message", role="user", content=text)
        self._host.log.append(TURN_TYPE)  # what came before is this turn's input
        with self._host._lock:
            notes = [t for t, trigger in self._host.pending if not trigger]
            self._host.pending = [(t, trigger) for t, trigger in self._host.pending if trigger]
            self._host.in_turn = True
        self._runtime.controller.on_turn_started()
        return "\n\n".join([*notes, *([text] if text is not None else [])])

    def end_turn(self, aborted: bool = False, timeout: float | None = None) -> bool:
        """The run returned: settle, let queued work activate, wait until it is quiet.
        True when wfrun asked for another turn (`next_input()` has its text)."""
        with self._host._lock:
            self._host.in_turn = False
        self._runtime.controller.on_turn_settled(aborted)
        self._wait_quiet(self.settle_timeout if timeout is None else timeout)
        return self.turn_requested

    @contextmanager
    def turn(self, text: str | None = None) -> Iterator[str]:
        """`begin_turn` ... `end_turn` around one framework run; yields its input. A run
        that raises still ends the turn (as aborted for KeyboardInterrupt)."""
        prompt = self.begin_turn(text)
        aborted = False
        try:
            yield prompt
        except KeyboardInterrupt:
            aborted = True
            raise
        finally:
            self.end_turn(aborted)

    @property
    def turn_requested(self) -> bool:
        with self._host._lock:
            return any(trigger for _, trigger in self._host.pending)

    def next_input(self) -> str | None:
        """What wfrun wants the model to see in the next turn, or None when nothing
        asks for a turn. Consumes it: the next `begin_turn` starts from there."""
        with self._host._lock:
            if not any(trigger for _, trigger in self._host.pending):
                return None
            texts = [t for t, _ in self._host.pending]
            self._host.pending = []
        return "\n\n".join(texts)

    def run(self, agent_run: Callable[[str], T], prompt: str, *, max_turns: int = 20) -> list[T]:
        """Drive turns: `agent_run(prompt)`, then one run per follow-up until none asks
        for a turn. Returns every run's result in order."""
        results: list[T] = []
        text: str | None = prompt
        first = True
        while text is not None:
            if len(results) >= max_turns:
                raise RuntimeError(f"more than {max_turns} turns; wfrun kept asking for more")
            with self.turn(text if first else None) as opening:
                results.append(agent_run(opening if first else text))
            first = False
            text = self.next_input()
        return results

    async def arun(self, agent_run: Callable[[str], Awaitable[T]], prompt: str, *,
                   max_turns: int = 20) -> list[T]:
        """`run` for async frameworks: one event loop across every turn."""
        results: list[T] = []
        text: str | None = prompt
        first = True
        while text is not None:
            if len(results) >= max_turns:
                raise RuntimeError(f"more than {max_turns} turns; wfrun kept asking for more")
            opening = await asyncio.to_thread(self.begin_turn, text if first else None)
            try:
                results.append(await agent_run(opening if first else text))
            finally:
                await asyncio.to_thread(self.end_turn)
            first = False
            text = self.next_input()
        return results

    # -- views ---------------------------------------------------------------------
    def entries(self) -> list[SessionEntry]:
        """The session log: user messages and wfrun's custom messages (with details)."""
        return self._host.log.entries()

    def messages(self, custom_type: str | None = None) -> list[SessionEntry]:
        """wfrun's model-visible messages, optionally of one type."""
        return [e for e in self.entries() if e.type == "custom_message"
                and (custom_type is None or e.custom_type == custom_type)]

    def status(self, run_id: str) -> dict[str, Any]:
        """The durable status view of a run (launch row first, then its bundle)."""
        from runner.host.session._wiring import status_of

        return status_of(self._runtime, run_id)

    def _wait_quiet(self, timeout: float) -> None:
        # A long node: the run goes on; its messages arrive later as pending input.
        with suppress(TimeoutError):
            self._runtime.controller.wait_quiet(timeout)


def _project_root(project: str | Path | None) -> Path:
    if project is None:
        root = find_project_root(Path.cwd())
        if root is None:
            raise InputError(f"no {PROJECT_DIR}/ folder in this directory or any parent; "
                             f"create one with: mkdir -p {PROJECT_DIR}/workflows")
        return root
    path = Path(project).expanduser()
    if not (path / PROJECT_DIR).is_dir():
        raise InputError(f"'{project}' has no {PROJECT_DIR}/ folder; create it with: "
                         f"mkdir -p {path / PROJECT_DIR / 'workflows'}")
    return path.resolve()
