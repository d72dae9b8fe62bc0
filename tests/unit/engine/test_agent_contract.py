"""The agent-step contract: identity checks, schema rejections, reminders, tolerant parsing."""

from __future__ import annotations

from typing import Any

import pytest

from runner.engine import AgentStep
from runner.engine._agent import TurnKind, parse_tolerant
from runner.engine.executors._scripted import ScriptedExecutor

SCHEMA_WF = """
    start: plan
    nodes:
      plan:
        agent:
          prompt: "Plan it."
          output:
            type: object
            required: [steps]
            properties: {steps: {type: array, items: {type: string}}}
"""


class Recorder:
    """A custom executor: runs `script(step)` each turn and records the tool results."""

    name = "recorder"

    def __init__(self, script: Any) -> None:
        self.script = script
        self.results: list[tuple[bool, str]] = []
        self.kinds: list[TurnKind] = []

    def run_turn(self, step: AgentStep, message: str, kind: TurnKind) -> None:
        self.kinds.append(kind)
        for call in self.script(step, len(self.kinds)):
            r = step.handle_tool_call(call)
            self.results.append((r.ok, r.message))


def _call(st: AgentStep, output: Any, **over: Any) -> dict[str, Any]:
    call = {"action": "submit", "step": st.contract.step, "attempt": st.contract.attempt,
            "output": output}
    call.update(over)
    return call


def test_stale_attempt_and_wrong_step_are_refused(env: Any) -> None:
    d = env.workflow(SCHEMA_WF)
    ex = Recorder(lambda step, turn: [
        _call(step, {"steps": ["stale"]}, attempt="0000000000000000"),
        _call(step, {"steps": ["wrong"]}, step="other"),
        _call(step, {"steps": ["real"]}),
        _call(step, {"steps": ["again"]}),
    ])
    out = env.engine(executor=ex).start(d)
    assert out.status == "completed"
    assert out.final_output == {"steps": ["real"]}
    oks = [ok for ok, _ in ex.results]
    assert oks == [False, False, True, False]
    assert "is stale" in ex.results[0][1]
    assert "is not the current step" in ex.results[1][1]
    assert "End your turn" in ex.results[2][1]
    assert "already has an accepted output" in ex.results[3][1]


def test_a_submit_after_the_step_closed_is_refused(env: Any) -> None:
    d = env.workflow(SCHEMA_WF)
    kept: list[AgentStep] = []

    def script(step: AgentStep, turn: int) -> list[dict[str, Any]]:
        kept.append(step)
        return [_call(step, {"steps": []})]

    env.engine(executor=Recorder(script)).start(d)
    late = kept[0].handle_tool_call(_call(kept[0], {"steps": ["late"]}))
    assert not late.ok
    assert "closed" in late.message


def test_schema_rejection_returns_the_error_and_keeps_the_step_open(env: Any) -> None:
    d = env.workflow(SCHEMA_WF)
    ex = Recorder(lambda step, turn: [
        _call(step, {"steps": "not a list"}),
        _call(step, {"steps": ["fixed"]}),
    ])
    out = env.engine(executor=ex).start(d)
    assert out.status == "completed"
    assert out.final_output == {"steps": ["fixed"]}
    assert ex.results[0][0] is False
    assert "does not match the expected schema" in ex.results[0][1]
    assert "submit again" in ex.results[0][1]
    assert ex.kinds == ["step"]  # accepted within the same turn: no reminder


def test_updates_go_through_the_step(env: Any) -> None:
    d = env.workflow(SCHEMA_WF)
    ex = Recorder(lambda step, turn: [
        {"action": "update", "step": step.contract.step, "attempt": step.contract.attempt,
         "update": {"type": "progress", "key": "main", "data": {"completed": 1, "total": 2}}},
        {"action": "update", "step": step.contract.step, "attempt": step.contract.attempt,
         "update": {"type": "Bad Type", "key": "main", "data": 1}},
        _call(step, {"steps": []}),
    ])
    out = env.engine(executor=ex).start(d)
    assert [ok for ok, _ in ex.results] == [True, False, True]
    updates = env.events(out.run_id, "update_published")
    assert [u["payload"]["data"] for u in updates] == [{"completed": 1, "total": 2}]
    assert updates[0]["node"] == "plan"


def test_non_json_three_times_fails_after_two_reminders(env: Any) -> None:
    d = env.workflow(SCHEMA_WF)
    ex = ScriptedExecutor({"plan": {"raw": "I think the plan is fine, no JSON here."}})
    out = env.engine(executor=ex).start(d)
    assert out.status == "failed"
    assert out.error is not None
    assert out.error["code"] == "no_submission"
    assert "3 turns" in out.error["message"]
    kinds = [e["payload"]["kind"] for e in env.events(out.run_id, "agent_prompt_sent")]
    assert kinds == ["step", "reminder", "reminder"]
    assert [k for _, _, k in ex.turns] == ["step", "reminder", "reminder"]
    reminder = env.events(out.run_id, "agent_prompt_sent")[1]["payload"]["prompt"]
    assert "does not match the expected schema" in reminder  # the rejection is quoted
    assert "1 reminder left" in reminder


def test_silent_agent_gets_reminders_then_fails(env: Any) -> None:
    d = env.workflow(SCHEMA_WF.replace('prompt: "Plan it."', 'prompt: "Plan it."\n'
                                       '          reminders: 1'))
    ex = ScriptedExecutor({"plan": {"silent": True}})
    out = env.engine(executor=ex).start(d)
    assert out.status == "failed"
    assert out.error is not None
    assert out.error["code"] == "no_submission"
    kinds = [e["payload"]["kind"] for e in env.events(out.run_id, "agent_prompt_sent")]
    assert kinds == ["step", "reminder"]


def test_a_reminder_can_rescue_the_step(env: Any) -> None:
    d = env.workflow(SCHEMA_WF)
    ex = Recorder(lambda step, turn: [] if turn < 3 else [_call(step, {"steps": ["late"]})])
    out = env.engine(executor=ex).start(d)
    assert out.status == "completed"
    assert out.final_output == {"steps": ["late"]}
    assert ex.kinds == ["step", "reminder", "reminder"]


def test_fenced_json_is_parsed_tolerantly(env: Any) -> None:
    d = env.workflow(SCHEMA_WF)
    raw = "Sure! Here it is:\n```json\n{\"steps\": [\"a\", \"b\"]}\n```\nAnything else?"
    out = env.engine(executor=ScriptedExecutor({"plan": {"raw": raw}})).start(d)
    assert out.status == "completed"
    assert out.final_output == {"steps": ["a", "b"]}


@pytest.mark.parametrize(("text", "value"), [
    ('{"a": 1}', {"a": 1}),
    ("```\n[1, 2]\n```", [1, 2]),
    ('The answer: {"a": {"b": [1]}} and more {"c": 2}', {"a": {"b": [1]}}),
    ("no json at all", "no json at all"),
    (["already", "a value"], ["already", "a value"]),
])
def test_parse_tolerant(text: Any, value: Any) -> None:
    assert parse_tolerant(text) == value


def test_no_executor_fails_the_agent_node_with_guidance(env: Any) -> None:
    d = env.workflow(SCHEMA_WF)
    out = env.engine().start(d)
    assert out.status == "failed"
    assert out.error is not None
    assert out.error["code"] == "no_agent"
    assert "--agent" in out.error["message"]


def test_an_executor_that_raises_ends_the_turn_not_the_engine(env: Any) -> None:
    d = env.workflow(SCHEMA_WF)

    def script(step: AgentStep, turn: int) -> list[dict[str, Any]]:
        if turn == 1:
            raise RuntimeError("network down")
        return [_call(step, {"steps": ["after error"]})]

    ex = Recorder(script)
    out = env.engine(executor=ex).start(d)
    assert out.status == "completed"
    assert out.final_output == {"steps": ["after error"]}
    assert ex.kinds == ["step", "reminder"]
