"""A run that stops at a checkpoint reaches the session even without a `presentation`,
and `answer` without a run id finds the waiting run through the store.

Before the fix a checkpoint without a presentation sent nothing (the model never
heard that a run waits), and `answer` without `runId` looked only at the runs
this very process had seen end.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from harness import Scripted, Session, on_user, once, start_call, submit_steps

from runner.host.session._reference import ToolCall
from runner.launch._intents import AGENT_STEP_TYPE, DEFERRED_TURN_TYPE

pytestmark = pytest.mark.timeout(30)
Make = Callable[..., Session]
ASK_WF = """
    start: ask
    nodes:
      ask: {checkpoint: {summary: "Which colour?"}}
      paint:
        agent:
          prompt: "Paint it {{ outputs.ask.answer }}."
          output: {type: object, required: [summary], properties: {summary: {type: string}}}
    edges: [{from: ask, to: paint}]
"""


def test_a_checkpoint_without_a_presentation_tells_the_session_once(session: Make) -> None:
    model = Scripted(on_user("^go$", start_call("ask", None)))
    s = session(model, {"ask": ASK_WF})
    s.host.prompt("go")
    s.settle()
    (run,) = [r.run_id for r in s.launches()]
    assert s.status(run)["status"] == "waiting"
    status = s.controller.on_tool_call("c", "workflow", {"action": "status", "runId": run})
    assert status.content == (f"Run {run}: waiting (at a checkpoint; the answer action with "
                              f"runId '{run}' continues it)")
    (notice,) = s.messages(DEFERRED_TURN_TYPE)
    assert notice.content == (
        f"Workflow ask (run {run}) is waiting for an answer at checkpoint 'ask': Which "
        f"colour?. To continue it, call the workflow tool with action 'answer', runId "
        f"'{run}' and your answer as input.")
    assert notice.details["runId"] == run
    # It opened a turn of its own, once.
    turns = [v.last_user_text for v in model.views if v.last_tool_reply is None]
    assert turns.count(notice.content) == 1
    again = s.restart()
    again.settle()
    assert len(again.messages(DEFERRED_TURN_TYPE)) == 1


def test_answer_without_a_run_id_works_in_another_process_of_the_session(
        session: Make) -> None:
    model = Scripted(on_user("^go$", start_call("ask", None)))
    s = session(model, {"ask": ASK_WF})
    s.host.prompt("go")
    s.settle()
    (parent,) = [r.run_id for r in s.launches()]
    # A new process of the same session (the MCP server restarted, a resumed Pi): it
    # never saw the run stop.
    answer = ToolCall("workflow", {"action": "answer", "input": "teal"})
    again = s.restart(Scripted(once(on_user("^teal please$", answer)), submit_steps()))
    assert again.controller.outcomes == []
    again.host.prompt("teal please")
    again.settle()
    reply = next(e for e in again.tool_results() if e.details.get("action") == "answer")
    assert not reply.details["is_error"], reply.content
    assert reply.details["parentRunId"] == parent
    child = reply.details["runId"]
    again.controller.wait_quiet()
    assert again.status(child)["status"] == "completed"
    (step,) = again.messages(AGENT_STEP_TYPE)
    assert "Paint it teal." in step.content
    # Nothing waits now: the next bare answer says so and names the fix.
    none = again.controller.on_tool_call("c", "workflow", {"action": "answer", "input": "x"})
    assert none.is_error
    assert "no run of this session is waiting at a checkpoint" in none.content


def test_answer_without_a_run_id_refuses_to_guess_between_two_waiting_runs(
        session: Make) -> None:
    model = Scripted(on_user("^go$", start_call("ask", None)))
    s = session(model, {"ask": ASK_WF})
    for _ in range(2):
        s.host.prompt("go")
        s.settle()
    first, second = [r.run_id for r in s.launches()]
    reply = s.controller.on_tool_call("c", "workflow", {"action": "answer", "input": "x"})
    assert reply.is_error
    assert f"2 runs of this session are waiting ({second}, {first})" in reply.content
    assert len(s.launches()) == 2
