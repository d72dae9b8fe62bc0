"""MCP Tasks for `wfrun mcp` (spec 2025-11-25, experimental): a start the client polls.

A client that declares the `tasks` capability (and speaks 2025-11-25, the revision
that has Tasks) may send a `tools/call` with a `task` field; the server then answers
at once with a task and the call's result comes later from `tasks/result`. For the
`workflow` tool's `start` (and `answer`) the task follows the run:

- `working`: the launch is queued, starting, running, paused or parked;
- `input_required`: the run waits for this session, at a checkpoint (the `answer`
  action continues it: the task then follows the continuation) or at an agent step
  (its contract comes with the next `workflow` call; `submit` finishes it);
- `completed` (the result is the run's final output), `failed` (timed out too; the
  result is the error, `isError`), `cancelled`.

In a client without hooks a task start activates its launch at once: the client
follows the run by polling, the idle signal such a client otherwise lacks (without a
task its start waits for the client's exit, docs/hosts.md), and so does the
continuation an `answer` queues for a run a task follows, at the task's next poll.
With Claude Code's hooks the launch starts when the turn settles, as always. Any other action
called as a task is done on the spot: its task is born terminal, holding the reply.

Tasks live in this process: a task id names a run of this session for as long as the
server runs (and its `ttl`, which the server may shorten); the run itself is in the
store like any other and outlives them. Task ids are random (uuid4), so one is not
guessable from another.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from runner.compiler._schemamessages import cut
from runner.host.session._protocol import ToolReply
from runner.host.session._replies import MAX_REPLY_CHARS, error_reply
from runner.host.session._wiring import SessionRuntime

from ._stdio import INVALID_PARAMS, RpcError, TaskServer


class McpSession(Protocol):
    """What tasks need of `wfrun mcp`'s session (_server.py), named here so the two
    modules do not import each other."""

    runtime: SessionRuntime

    def tool_call(self, name: str, args: dict[str, Any], *,
                  as_task: bool = False) -> ToolReply: ...

    def activate_now(self) -> None: ...

    def status_view(self, run_id: str) -> dict[str, Any]: ...

    def final_output(self, run_id: str) -> Any: ...

RELATED = "io.modelcontextprotocol/related-task"
TERMINAL = ("completed", "failed", "cancelled")
DEFAULT_TTL_MS = 24 * 3600 * 1000  # a day: a run may well take hours
MAX_TTL_MS = 7 * 24 * 3600 * 1000
POLL_MS = 1000  # the pollInterval suggested to clients
FOLLOWED = ("start", "answer")  # actions whose task follows the run they queue
_CHAIN_LIMIT = 1000  # continuations followed from one run (a cycle cannot happen; a bound)


@dataclass
class _Task:
    task_id: str
    run_id: str | None  # the run it follows; None: born terminal
    created: float
    updated: float
    ttl: int
    status: str = "working"
    message: str | None = None
    result: dict[str, Any] | None = None  # the CallToolResult, once terminal


class McpTasks(TaskServer):
    """The tasks of one `wfrun mcp` session."""

    def __init__(self, session: McpSession) -> None:
        self.session = session
        self.clock = session.runtime.controller.coordinator.clock
        self._tasks: dict[str, _Task] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()

    # -- the protocol's requests ------------------------------------------------------
    def create(self, name: str, args: dict[str, Any], ttl: Any) -> dict[str, Any]:
        """`tools/call` with a `task`: the CreateTaskResult."""
        now = self.clock.now()
        reply = self.session.tool_call(name, args, as_task=True)
        details = reply.details
        run_id = details.get("runId")
        task = _Task(str(uuid.uuid4()), None, now, now, _ttl(ttl))
        if (not reply.is_error and details.get("action") in FOLLOWED
                and isinstance(run_id, str)):
            task.run_id = run_id
            task.message = reply.content
        else:
            task.status = "failed" if reply.is_error else "completed"
            task.result = _tool_result(reply)
        with self._lock:
            self._tasks[task.task_id] = task
        if task.run_id is not None:
            self.session.activate_now()
            self._refresh(task)
        return {"task": self._wire(task)}

    def get(self, task_id: Any) -> dict[str, Any]:
        return self._wire(self._refresh(self._find(task_id)))

    def result(self, task_id: Any) -> dict[str, Any]:
        """The call's result once the task is terminal (blocks until then, as the spec
        says; the session's close ends the wait with an error)."""
        task = self._find(task_id)
        while self._refresh(task).status not in TERMINAL:
            if self.clock.sleep(POLL_MS / 1000 / 4, self._closed):
                raise RpcError(-32603, "the wfrun mcp server is shutting down")
        assert task.result is not None
        return {**task.result, "_meta": {**(task.result.get("_meta") or {}),
                                         RELATED: {"taskId": task.task_id}}}

    def list(self, cursor: Any) -> dict[str, Any]:
        if cursor is not None:  # we never hand one out: every task fits one page
            raise RpcError(INVALID_PARAMS, "unknown cursor: tasks/list has one page")
        with self._lock:
            self._expire()
            tasks = list(self._tasks.values())
        return {"tasks": [self._wire(self._refresh(t)) for t in tasks]}

    def cancel(self, task_id: Any) -> dict[str, Any]:
        task = self._refresh(self._find(task_id))
        if task.status in TERMINAL:
            raise RpcError(INVALID_PARAMS, f"task {task.task_id} is already {task.status}; "
                                           "only a working task can be cancelled")
        assert task.run_id is not None
        current, _ = self._current_run(task.run_id)
        reply = self.session.tool_call("workflow", {"action": "cancel", "runId": current})
        text = f"Workflow run {current} cancelled by the task's cancel."
        with self._lock:  # cancelled now and for good, however the run's stop lands
            self._end(task, "cancelled", text, error_reply(
                text, "start", "cancelled", {"runId": current}))
        if reply.is_error:
            task.message = f"{text} ({reply.content})"
        return self._wire(task)

    def close(self) -> None:
        self._closed.set()

    # -- following a run --------------------------------------------------------------
    def _find(self, task_id: Any) -> _Task:
        with self._lock:
            self._expire()
            task = self._tasks.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            raise RpcError(INVALID_PARAMS, f"no task {json.dumps(cut(str(task_id), 80))} "
                                           "in this session (tasks/list shows them)")
        return task

    def _expire(self) -> None:
        now = self.clock.now()
        for task_id in [t.task_id for t in self._tasks.values()
                        if now * 1000 > t.created * 1000 + t.ttl]:
            del self._tasks[task_id]

    def _refresh(self, task: _Task) -> _Task:
        if task.status in TERMINAL or task.run_id is None:
            return task
        status, message, result = self._follow(task.run_id)
        with self._lock:
            if task.status in TERMINAL:  # cancelled meanwhile: it stays cancelled
                return task
            if status in TERMINAL:
                self._end(task, status, message, result)
            elif (status, message) != (task.status, task.message):
                task.status, task.message, task.updated = status, message, self.clock.now()
        return task

    def _end(self, task: _Task, status: str, message: str | None,
             result: ToolReply | dict[str, Any] | None) -> None:
        task.status, task.message, task.updated = status, message, self.clock.now()
        task.result = (_tool_result(result) if isinstance(result, ToolReply)
                       else result or _tool_result(ToolReply(message or status)))

    def _current_run(self, run_id: str) -> tuple[str, dict[str, Any]]:
        """The run the task follows now: `run_id`, or the continuation an `answer` made
        of it (and of that one...), with its status view."""
        controller = self.session.runtime.controller
        seen = 0
        while True:
            view = self.session.status_view(run_id)
            if view.get("status") not in ("waiting", "continued") or seen > _CHAIN_LIMIT:
                return run_id, view
            children = [r.run_id for r in controller.book.query(
                session_id=controller.session_id) if r.parent_run_id == run_id]
            if not children:
                return run_id, view
            run_id, seen = children[-1], seen + 1

    def _follow(self, run_id: str) -> tuple[str, str, ToolReply | dict[str, Any] | None]:
        """(task status, status message, the result when terminal) of the run."""
        current, view = self._current_run(run_id)
        state = str(view.get("status"))
        launch = view.get("launch")
        if isinstance(launch, dict) and launch.get("status") in ("starting", "running"):
            # The bundle may be a step ahead of the launch row (ended, the row's ending
            # and error not written yet): the task ends with the row, whole.
            state = "running"
        if state == "completed":
            output = self.session.final_output(current)
            text = json.dumps(output, ensure_ascii=False, default=str)
            return "completed", f"Run {current}: completed", {
                "content": [{"type": "text", "text": cut(text, MAX_REPLY_CHARS)}],
                "isError": False, "_meta": {"wfrun": {"runId": current,
                                                      "status": "completed"}}}
        # The launch's error (one that ended it before or while it started), else the
        # run's own (a node that failed it), whichever the view has first.
        bundle = view.get("run")
        run: dict[str, Any] = bundle if isinstance(bundle, dict) else {}
        found = next((e for e in (view.get("error"), run.get("error"))
                      if isinstance(e, dict) and e.get("code")), None)
        error: dict[str, Any] = found or {}
        if state in ("failed", "timed_out", "cancelled"):
            status = "cancelled" if state == "cancelled" else "failed"
            code = str(error.get("code") or state)
            detail = str(error.get("message") or f"the run ended {state}")
            text = f"Run {current}: {state} ({code}: {detail})"
            return status, text, error_reply(text, "start", code,
                                             {"runId": current, "status": state})
        if state == "waiting" and not self.session.runtime.controller.quiet():
            # The run's last boundary is still delivering what it said (an `answer`
            # now would find its message pending): input is required once it is out.
            return "working", f"Run {current}: ending", None
        if state == "waiting":
            return "input_required", (
                f"Run {current} waits at a checkpoint: the workflow tool's answer action "
                f"with runId '{current}' continues it (this task follows)."), None
        step = self.session.runtime.controller.open_step()
        if step is not None and step[0] == current:
            return "input_required", (
                f"Run {current} waits for you at step {step[1]} (attempt {step[2]}): the "
                "next workflow tool call (e.g. status) shows its contract; submit "
                "finishes it."), None
        if state == "queued":
            # The continuation an `answer` queued (or a start that met a busy session):
            # the client follows it by polling, so it starts now, like the task's start.
            self.session.activate_now()
        return "working", f"Run {current}: {state}", None

    def _wire(self, task: _Task) -> dict[str, Any]:
        out: dict[str, Any] = {
            "taskId": task.task_id, "status": task.status,
            "createdAt": _iso(task.created), "lastUpdatedAt": _iso(task.updated),
            "ttl": task.ttl, "pollInterval": POLL_MS}
        if task.message:
            out["statusMessage"] = cut(task.message, 2_000)
        return out


def _ttl(requested: Any) -> int:
    """The task's ttl in ms: the client's ask, within a minute and a week."""
    if not isinstance(requested, int) or isinstance(requested, bool) or requested <= 0:
        return DEFAULT_TTL_MS
    return min(max(requested, 60_000), MAX_TTL_MS)


def _tool_result(reply: ToolReply) -> dict[str, Any]:
    out: dict[str, Any] = {"content": [{"type": "text", "text": reply.content}],
                           "isError": reply.is_error}
    if reply.details:
        out["_meta"] = {"wfrun": reply.details}
    return out


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")
