"""The `workflow` tool as the model meets it in a session: exact per-action validation."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from harness import Scripted, Session, on_user

from runner.host.session._reference import ToolCall

pytestmark = pytest.mark.timeout(20)


def error_of(reply: Any) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(reply.content)["error"]
    return error


def test_invalid_tool_calls_are_refused_in_the_same_turn_and_store_nothing(
        session: Callable[..., Session]) -> None:
    calls = [
        ToolCall("workflow", {"action": "start", "workflow": "hello", "input": {"task": "x"},
                              "runId": "mine"}),
        ToolCall("workflow", {"action": "start", "input": {"task": "x"}}),
        ToolCall("workflow", {"action": "submit", "step": "plan"}),
        ToolCall("workflow", {"action": "launch", "workflow": "hello"}),
        ToolCall("workflows", {"action": "list"}),
        ToolCall("workflow", {"action": "pause"}),
    ]
    s = session(Scripted(on_user("go", calls)))
    s.host.prompt("go")
    s.settle()
    replies = s.tool_results()
    assert [r.details["is_error"] for r in replies] == [True] * len(calls)
    # Each refusal is one JSON object: a stable code and the message naming the fix.
    assert [(e["code"], e["message"]) for e in map(error_of, replies)] == [
        ("invalid_call", "action 'start' does not take runId; it takes workflow, input"),
        ("invalid_call", "action 'start' needs workflow"),
        ("invalid_call", "action 'submit' needs attempt, output"),
        ("invalid_call", "unknown action \"launch\"; use one of: list, start, status, pause, "
         "resume, cancel, answer, update, submit"),
        ("unknown_tool", "unknown tool \"workflows\"; the tool is 'workflow'"),
        ("not_running", "no workflow is running in this session"),
    ]
    assert s.launches() == []
    assert not s.ws.runs_dir.exists() or not any(s.ws.runs_dir.iterdir())
