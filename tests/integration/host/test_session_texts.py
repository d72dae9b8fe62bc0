"""What the model reads from the `workflow` tool: `list` describes each workflow and its
input; errors are bounded JSON whose hints name tool actions, never CLI commands.

Before the fix `list` gave names only, an input error echoed the whole offending
value as a Python repr (100,083 characters for a 100 KB input), and hints said
`wfrun list` / `wfrun runs` to a model that has only the tool.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from harness import Scripted, Session, on_user

from runner.host.session._reference import ToolCall
from runner.host.session._wiring import list_text
from runner.launch._intents import DEFERRED_TURN_TYPE

pytestmark = pytest.mark.timeout(30)
Make = Callable[..., Session]
DESCRIBED_WF = """
    description: |
      Review a change
      and report what is wrong.
    input:
      type: object
      required: [task]
      additionalProperties: false
      properties: {task: {type: string, maxLength: 100}}
    start: only
    nodes:
      only: {compute: "{{ {'ok': true} }}"}
"""
BARE_WF = """
    start: only
    nodes:
      only: {compute: "{{ 1 }}"}
"""


def _call(s: Session, **args: Any) -> Any:
    return s.controller.on_tool_call("c", "workflow", args)


def _error(reply: Any) -> dict[str, Any]:
    assert reply.is_error, reply.content
    error: dict[str, Any] = json.loads(reply.content)["error"]
    return error


def test_list_gives_each_workflow_its_description_and_input_schema(session: Make) -> None:
    s = session(Scripted(), {"review": DESCRIBED_WF, "bare": BARE_WF, "broken": "start: [\n"})
    text = list_text(s.ws)
    lines = text.splitlines()
    at = lines.index("- review (project): Review a change and report what is wrong.")
    assert json.loads(lines[at + 1].removeprefix("  input: ")) == {
        "type": "object", "required": ["task"], "additionalProperties": False,
        "properties": {"task": {"type": "string", "maxLength": 100}}}
    at = lines.index("- bare (project)")
    assert lines[at + 1] == "  input: any (the workflow declares no input schema)"
    assert "- broken (project): invalid; fix the file before starting it" in lines


def test_list_bounds_a_huge_description_and_schema(session: Make) -> None:
    props = ", ".join(f"p{i}: {{type: string, description: {'d' * 50}}}" for i in range(200))
    huge = DESCRIBED_WF.replace("Review a change", "x" * 5000).replace(
        "properties: {task: {type: string, maxLength: 100}}", f"properties: {{{props}}}")
    s = session(Scripted(), {"huge": huge})
    (head, schema) = [ln for ln in list_text(s.ws).splitlines() if "huge" in ln or
                      ln.startswith("  input:")][:2]
    assert len(head) < 400
    assert len(schema) < 800
    assert schema.endswith("(cut; the workflow file has the whole schema)")


def test_an_input_error_is_bounded_json_without_the_value(session: Make) -> None:
    s = session(Scripted(), {"review": DESCRIBED_WF})
    for value in ({"task": "x" * 100_000}, {"task": ["x" * 100_000]},
                  {"task": "ok", "y" * 100_000: True}):
        error = _error(_call(s, action="start", workflow="review", input=value))
        assert error["code"] == "input_invalid"
        assert len(error["message"]) < 400, error
        assert "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" \
            not in error["message"]
        assert "'" + "x" not in error["message"]  # no Python repr of the value
    error = _error(_call(s, action="start", workflow="review", input={"task": "x" * 101}))
    assert error["message"] == ("input does not match workflow 'review': $.task: is 101 "
                                "characters long; at most 100 allowed")
    error = _error(_call(s, action="start", workflow="review", input={"task": True}))
    assert error["message"].endswith("$.task: expected string, got boolean")
    assert s.launches() == []


def test_error_hints_name_tool_actions_not_cli_commands(session: Make) -> None:
    s = session(Scripted(), {"review": DESCRIBED_WF})
    missing = _error(_call(s, action="start", workflow="reveiw"))
    assert missing["code"] == "workflow_not_found"
    assert missing["message"].endswith("the list action shows what exists")
    unknown = _error(_call(s, action="status", runId="nope-1"))
    assert unknown["code"] == "not_found"
    assert unknown["message"] == ("no launch or run 'nope-1'; the status action without runId "
                                  "shows this session's run")
    (s.workflows_dir / "bad.yaml").write_text("start: x\nnodes: {}\n")
    bad = _error(_call(s, action="start", workflow="bad"))
    assert bad["code"] == "workflow_invalid"
    assert bad["message"].endswith("fix the file, then start it again")
    for error in (missing, unknown, bad):
        assert "wfrun " not in error["message"]


def test_any_refusal_is_one_bounded_json_object(session: Make) -> None:
    s = session(Scripted(), {})
    for args in ({"action": "z" * 100_000}, {"action": "list", "k" * 100_000: 1},
                 {"action": "start", "workflow": "/" + "q" * 100_000}):
        reply = _call(s, **args)
        assert reply.is_error
        assert len(reply.content) < 1_200
        assert set(json.loads(reply.content)) == {"error"}


def test_a_follow_up_names_tool_actions_too(session: Make) -> None:
    def break_it(view: Any) -> Any:
        if view.last_tool_reply is not None and "queued" in view.last_tool_reply.content:
            (s.workflows_dir / "review.yaml").write_text("start: x\nnodes: {}\n")
            return "queued it"
        return None

    s = session(Scripted(break_it, on_user("^go$", ToolCall(
        "workflow", {"action": "start", "workflow": "review", "input": {"task": "t"}}))),
        {"review": DESCRIBED_WF})
    s.host.prompt("go")
    s.settle()
    (row,) = s.launches()
    assert (row.status, row.error_code) == ("failed", "workflow_invalid")
    assert "`wfrun validate review`" in (row.error_message or "")  # the CLI's wording, kept
    (follow_up,) = s.messages(DEFERRED_TURN_TYPE)
    assert "fix the file, then start it again" in follow_up.content
    assert "wfrun validate" not in follow_up.content
