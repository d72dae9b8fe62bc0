"""The MCP session and its hooks in one process: real store, real socket, real hook code.

`McpSession` (what `wfrun mcp --client claude-code` serves) listens on the socket
named after a pretend Claude pid; the hook's own `main` talks to it exactly as the
`wfrun hook claude-code` process would. No model: the test calls the tool itself.
"""

from __future__ import annotations

import io
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.compiler import build_catalog
from runner.host.mcp._hook import main as hook_main
from runner.host.mcp._serve import listen_for_hooks
from runner.host.mcp._server import McpSession
from runner.host.mcp._sessionlog import SessionLog
from runner.host.runtime._local import Workspace
from runner.launch._intents import AGENT_STEP_TYPE, DEFERRED_TURN_TYPE
from runner.store import SqliteStore

pytestmark = pytest.mark.timeout(60)
PID = 31337
WF = textwrap.dedent("""
    input: {type: object, required: [task], properties: {task: {type: string}}}
    start: plan
    nodes:
      plan:
        agent:
          prompt: "Plan {{ input.task }}."
          output: {type: object, required: [summary], properties: {summary: {type: string}}}
""").lstrip()


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun" / "state")
        self.session = McpSession(ws, "claude-code:s-1", client="claude-code")
        self.server = listen_for_hooks(self.session, PID)
        self.closed = False

    def hook(self, name: str, sid: str = "s-1", **extra: Any) -> dict[str, Any] | None:
        event = {"hook_event_name": name, "session_id": sid, "cwd": str(self.root), **extra}
        out, err = io.StringIO(), io.StringIO()
        code = hook_main(io.StringIO(json.dumps(event)), out, err,
                         {"CLAUDE_PID": str(PID), "CLAUDE_PROJECT_DIR": str(self.root)})
        assert (code, err.getvalue()) == (0, "")
        return json.loads(out.getvalue()) if out.getvalue() else None

    def tool(self, **args: Any) -> str:
        reply = self.session.tool_call("workflow", args)
        return reply.content

    def log(self, sid: str = "s-1") -> SessionLog:
        return SessionLog.for_session(self.root / ".wfrun", f"claude-code:{sid}")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.server.shutdown()
        self.server.server_close()
        self.session.close()


def context(decision: dict[str, Any]) -> str:
    return str(decision["hookSpecificOutput"]["additionalContext"])


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "review.yaml").write_text(WF)
    w = World(root)
    yield w
    w.close()


def test_nothing_activates_until_the_stop_hook_then_the_step_blocks_once(world: World) -> None:
    assert world.hook("SessionStart", source="startup") is None
    assert world.hook("UserPromptSubmit", prompt="start it") is None
    text = world.tool(action="start", workflow="review", input={"task": "x"})
    run_id = text.split("(run ")[1].rstrip(").")
    record = world.session.runtime.store.launches.get(run_id)
    assert record is not None
    assert record.status == "queued"  # the turn is open: nothing starts
    decision = world.hook("Stop", stop_hook_active=False)
    assert decision is not None
    assert decision["hookSpecificOutput"]["hookEventName"] == "Stop"
    assert "Workflow step contract (workflow: review, step: plan" in context(decision)
    assert [m.custom_type for m in world.log().messages()] == [AGENT_STEP_TYPE]
    assert world.log().pending() == []
    assert world.session.host.turn_open  # the block is the model's next turn
    # Claude exits (stdin closes): the session shuts down and the open run parks.
    world.close()
    store = SqliteStore(world.root / ".wfrun" / "state" / "store.sqlite3")
    try:
        parked = store.launches.get(run_id)
    finally:
        store.close()
    assert parked is not None
    assert parked.status == "parked"


def test_a_failed_start_is_one_block_and_a_repeated_stop_sends_nothing(world: World) -> None:
    world.hook("UserPromptSubmit", prompt="go")
    world.tool(action="start", workflow="review", input={"task": "x"})
    (world.root / ".wfrun" / "workflows" / "review.yaml").write_text(WF.replace("Plan", "Re"))
    decision = world.hook("Stop")
    assert decision is not None
    assert context(decision).startswith("Workflow review failed to start (run review-")
    assert world.hook("Stop", stop_hook_active=True) is None
    assert world.hook("SessionStart", source="compact") is None
    assert world.hook("Stop") is None
    assert [m.custom_type for m in world.log().messages()] == [DEFERRED_TURN_TYPE]


def test_a_new_claude_session_in_the_same_process_rebinds(world: World) -> None:
    world.hook("UserPromptSubmit", prompt="go")
    world.tool(action="start", workflow="review", input={"task": "x"})
    # `/clear`: Claude starts session s-2 in the same process; s-1's queued launch
    # stays s-1's (it resumes when s-1 is back), s-2 starts with nothing reserved.
    assert world.hook("SessionStart", sid="s-2", source="clear") is None
    assert world.session.host.sid == "claude-code:s-2"
    assert "queued" in world.tool(action="start", workflow="review", input={"task": "y"})
    held = world.session.runtime.store.launches.find_session_reservation("claude-code:s-1")
    assert held is not None
    assert held.status == "queued"


def test_unknown_events_and_bad_requests_answer_without_harm(world: World) -> None:
    assert world.hook("PreToolUse", tool_name="Bash") is None
    assert world.session.hook_event({"event": "nope", "session_id": "x"}) == {
        "ok": False, "error": "unknown hook event or missing session id"}


GATED = textwrap.dedent("""
    start: wait
    nodes:
      wait:
        action: {use_shell: true, shell: "while [ ! -e release ]; do sleep 0.1; done"}
""").lstrip()


def test_no_hook_waits_for_a_long_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33 item 6: Stop and SessionStart answer within a few seconds however long
    the run they activated or resumed takes (Claude cancels a hook after 60 s)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "gated.yaml").write_text(GATED)
    world = World(root)
    world.hook("UserPromptSubmit", prompt="go")
    run_id = world.tool(action="start", workflow="gated").split("(run ")[1].rstrip(").")
    assert world.hook("Stop") is None  # answered while the run waits at its gate
    store = world.session.runtime.store
    record = store.launches.get(run_id)
    assert record is not None
    assert record.status == "running"
    world.close()  # `claude -p` exits: the run parks and is handed over
    again = World(world.root)
    try:
        assert again.hook("SessionStart", source="resume") is None  # resumed, not waited on
        assert again.session.runtime.controller.active is not None
        (world.root / "release").touch()
        again.session.runtime.controller.wait_quiet(30)
    finally:
        again.close()
    done = SqliteStore(world.root / ".wfrun" / "state" / "store.sqlite3")
    try:
        ended = done.launches.get(run_id)
    finally:
        done.close()
    assert ended is not None
    assert ended.status == "done"
