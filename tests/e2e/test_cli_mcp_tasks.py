"""MCP Tasks in `wfrun mcp` (issue 40 item 4; spec 2025-11-25, experimental).

The official SDK pinned here (mcp 2.3.0) has the 2025-11-25 task types but its client
does not speak Tasks: it declares no `tasks` capability and validates a `tools/call`
answer as a CallToolResult only (its method tables leave tasks/* out). So these tests
talk to the real `wfrun mcp` process with a raw JSON-RPC client written to the spec's
wire format (one message per line on stdio), and every task answer is validated with
the SDK's own 2025-11-25 models (`mcp.types.Task`, `CreateTaskResult`, ...).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from everyday import launch_row
from fakes.seed_workflow import AGENT_WF
from mcp import types
from waiting import wait_until

from runner.engine._agent import CONTRACT_RE
from runner.store import SqliteStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

QUICK = """\
name: quick
start: a
nodes:
  a: {action: {shell: ["echo", "hello from {{ input.who }}"]}}
  b: {compute: "{{ {'said': outputs.a.stdout | trim, 'n': 2} }}"}
edges:
  - {from: a, to: b}
"""
BROKEN = """\
name: broken
start: a
nodes:
  a: {action: {shell: ["sh", "-c", "exit 3"]}}
"""
SLOW = """\
name: slow
start: a
nodes:
  a: {action: {shell: ["sleep", "60"]}, timeout: 90s}
"""
APPROVE = """\
name: approve
start: ask
nodes:
  ask: {checkpoint: "Ship it?"}
  gate:
    compute: "{{ {'ok': outputs.ask.answer.ok} }}"
edges:
  - {from: ask, to: gate}
"""
TASKS_CAPABILITY = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    flows = root / ".wfrun" / "workflows"
    flows.mkdir(parents=True)
    for name, text in (("quick", QUICK), ("broken", BROKEN), ("slow", SLOW),
                       ("approve", APPROVE), ("review", textwrap.dedent(AGENT_WF).lstrip())):
        (flows / f"{name}.yaml").write_text(text)
    return root


class RpcFailed(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message"))
        self.code = error.get("code")


class Client:
    """A JSON-RPC 2.0 client on a `wfrun mcp` process's stdio, newline-delimited."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._next = 0
        self._lock = threading.Lock()
        self._waiting: dict[int, queue.Queue[dict[str, Any]]] = {}
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            box = self._waiting.get(message.get("id"))
            if box is not None:
                box.put(message)

    def send(self, method: str,
             params: dict[str, Any] | None = None) -> queue.Queue[dict[str, Any]]:
        with self._lock:
            self._next += 1
            msg_id = self._next
            box: queue.Queue[dict[str, Any]] = queue.Queue()
            self._waiting[msg_id] = box
            message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
            if params is not None:
                message["params"] = params
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        return box

    @staticmethod
    def answer(box: queue.Queue[dict[str, Any]], timeout: float = 60) -> dict[str, Any]:
        message = box.get(timeout=timeout)
        if "error" in message:
            raise RpcFailed(message["error"])
        result: dict[str, Any] = message["result"]
        return result

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.answer(self.send(method, params))

    def notify(self, method: str) -> None:
        assert self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}).encode()
                                  + b"\n")
            self.proc.stdin.flush()


@contextmanager
def server(project: Path, session: str, *, tasks: bool = True,
           version: str = "2025-11-25") -> Iterator[tuple[Client, dict[str, Any]]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "--project", str(project), "mcp", "--session", session],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if k != "CLAUDE_CODE_SESSION_ID"})
    client = Client(proc)
    try:
        capabilities: dict[str, Any] = {"tasks": TASKS_CAPABILITY} if tasks else {}
        init = client.request("initialize", {
            "protocolVersion": version, "capabilities": capabilities,
            "clientInfo": {"name": "raw-tasks-client", "version": "1"}})
        client.notify("notifications/initialized")
        yield client, init
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=60)
        client.reader.join(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


def start_task(client: Client, workflow: str, input: Any = None) -> types.Task:
    args: dict[str, Any] = {"action": "start", "workflow": workflow}
    if input is not None:
        args["input"] = input
    created = types.CreateTaskResult.model_validate(client.request("tools/call", {
        "name": "workflow", "arguments": args, "task": {"ttl": 600_000}}))
    assert created.task.ttl == 600_000
    assert created.task.poll_interval
    return created.task


def get(client: Client, task_id: str) -> types.GetTaskResult:
    return types.GetTaskResult.model_validate(client.request("tasks/get", {"taskId": task_id}))


def poll(client: Client, task_id: str, *statuses: str) -> types.GetTaskResult:
    return wait_until(lambda: (t := get(client, task_id)).status in statuses and t,
                      what=lambda: f"task {task_id}: {get(client, task_id)}")


def run_of(task: types.Task) -> str:
    assert task.status_message is not None
    return task.status_message.split()[1].rstrip(":")


def launch(project: Path, run_id: str) -> tuple[str, str | None]:
    record = launch_row(project, run_id)
    return record.status, record.ending


def test_start_as_a_task_is_polled_to_completed_with_the_final_output(project: Path) -> None:
    with server(project, "tasks-1") as (client, init):
        assert init["capabilities"]["tasks"] == TASKS_CAPABILITY
        [tool] = client.request("tools/list")["tools"]
        assert types.Tool.model_validate(tool).execution is not None
        assert tool["execution"] == {"taskSupport": "optional"}
        task = start_task(client, "quick", {"who": "tasks"})
        assert task.status in ("working", "completed")
        done = poll(client, task.task_id, "completed")
        run_id = run_of(done)
        # tasks/result: the tool call's result, the run's final output, tied to the task.
        result = client.request("tasks/result", {"taskId": task.task_id})
        call = types.CallToolResult.model_validate(result)
        assert call.is_error is False
        [content] = call.content
        assert isinstance(content, types.TextContent)
        assert json.loads(content.text) == {"said": "hello from tasks", "n": 2}
        assert result["_meta"]["io.modelcontextprotocol/related-task"] == {
            "taskId": task.task_id}
        listed = types.ListTasksResult.model_validate(client.request("tasks/list"))
        assert [(t.task_id, t.status) for t in listed.tasks] == [(task.task_id, "completed")]
        assert done.created_at <= done.last_updated_at
        # A terminal task cannot be cancelled: -32602, and it stays completed.
        with pytest.raises(RpcFailed) as refused:
            client.request("tasks/cancel", {"taskId": task.task_id})
        assert refused.value.code == -32602
        with pytest.raises(RpcFailed) as unknown:
            client.request("tasks/get", {"taskId": "no-such-task"})
        assert unknown.value.code == -32602
    assert launch(project, run_id) == ("done", "completed")


def test_tasks_result_blocks_until_the_run_ends(project: Path) -> None:
    """tasks/result sent while the task is working answers once it is terminal; the
    task shows `failed` with the run's error as an isError result."""
    with server(project, "tasks-2") as (client, _):
        task = start_task(client, "broken")
        waiting = client.send("tasks/result", {"taskId": task.task_id})
        result = types.CallToolResult.model_validate(Client.answer(waiting))
        assert result.is_error is True
        [content] = result.content
        assert isinstance(content, types.TextContent)
        error = json.loads(content.text)["error"]
        assert error["code"] == "run_failed", error
        assert "'sh -c exit 3' exited with 3" in error["message"]
        failed = get(client, task.task_id)
        assert failed.status == "failed"
        assert failed.status_message is not None
        assert "failed" in failed.status_message


def test_a_cancelled_task_cancels_its_run(project: Path) -> None:
    with server(project, "tasks-3") as (client, _):
        task = start_task(client, "slow")
        running = poll(client, task.task_id, "working")
        run_id = run_of(running)
        wait_until(lambda: launch(project, run_id)[0] == "running", what="the run to start")
        cancelled = types.CancelTaskResult.model_validate(
            client.request("tasks/cancel", {"taskId": task.task_id}))
        assert cancelled.status == "cancelled"
        # The run stopped (its `sleep 60` killed), well before the step's own end.
        wait_until(lambda: launch(project, run_id)[0] == "cancelled",
                   what=lambda: f"the run to be cancelled: {launch(project, run_id)}")
        result = types.CallToolResult.model_validate(
            client.request("tasks/result", {"taskId": task.task_id}))
        assert result.is_error is True
        assert get(client, task.task_id).status == "cancelled"  # and stays so
    store = SqliteStore(project / ".wfrun" / "state" / "store.sqlite3")
    try:
        events = [e.type for e in store.run_events.read(run_id=run_id)]
    finally:
        store.close()
    assert events[-2:] == ["launch.running", "launch.cancelled"], events


def test_a_checkpoint_is_input_required_and_the_answer_completes_the_task(
        project: Path) -> None:
    with server(project, "tasks-4") as (client, _):
        task = start_task(client, "approve")
        waiting = poll(client, task.task_id, "input_required")
        assert waiting.status_message is not None
        assert "checkpoint" in waiting.status_message
        parent = run_of(waiting)
        assert launch(project, parent) == ("done", "waiting")
        reply = client.request("tools/call", {"name": "workflow", "arguments": {
            "action": "answer", "runId": parent, "input": {"ok": True}}})
        assert reply["isError"] is False, reply
        done = poll(client, task.task_id, "completed")
        assert run_of(done) != parent  # the continuation the answer made
        result = types.CallToolResult.model_validate(
            client.request("tasks/result", {"taskId": task.task_id}))
        [content] = result.content
        assert isinstance(content, types.TextContent)
        assert json.loads(content.text) == {"ok": True}


def test_an_agent_step_for_this_session_is_input_required_until_submitted(
        project: Path) -> None:
    """The run asks this session's model for a step: the task says input_required; the
    next plain call carries the step's contract; `submit` ends the step and the run."""
    with server(project, "tasks-7") as (client, _):
        task = start_task(client, "review", {"task": "the docs"})
        asked = poll(client, task.task_id, "input_required")
        assert asked.status_message is not None
        assert "waits for you at step plan" in asked.status_message
        status = client.request("tools/call", {"name": "workflow",
                                               "arguments": {"action": "status"}})
        contract = CONTRACT_RE.search(status["content"][0]["text"])
        assert contract is not None, status
        submitted = client.request("tools/call", {"name": "workflow", "arguments": {
            "action": "submit", "step": contract["step"], "attempt": contract["attempt"],
            "output": {"summary": "planned"}}})
        assert submitted["isError"] is False, submitted
        poll(client, task.task_id, "completed")
        result = types.CallToolResult.model_validate(
            client.request("tasks/result", {"taskId": task.task_id}))
        [content] = result.content
        assert isinstance(content, types.TextContent)
        assert json.loads(content.text) == {"summary": "planned"}


def test_a_client_without_the_tasks_capability_keeps_the_plain_call(project: Path) -> None:
    with server(project, "tasks-5", tasks=False) as (client, init):
        assert "tasks" not in init["capabilities"]
        [tool] = client.request("tools/list")["tools"]
        assert "execution" not in tool
        # A `task` field from a client that declared nothing is ignored (the spec).
        reply = client.request("tools/call", {"name": "workflow", "task": {"ttl": 1000},
                                              "arguments": {"action": "start",
                                                            "workflow": "quick"}})
        call = types.CallToolResult.model_validate(reply)
        [content] = call.content
        assert isinstance(content, types.TextContent)
        assert "queued" in content.text
        assert "starts once this client exits" in content.text
        with pytest.raises(RpcFailed) as absent:
            client.request("tasks/list")
        assert absent.value.code == -32601
    with server(project, "tasks-6", version="2025-06-18") as (client, init):
        assert init["protocolVersion"] == "2025-06-18"
        assert "tasks" not in init["capabilities"]  # Tasks exist from 2025-11-25 on
