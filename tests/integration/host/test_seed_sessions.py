"""Seed 000 test 18: continuation, parking and resume, presentation, notifications.

Plus the agent-step side of the `workflow` tool in a session: stale attempts are
refused, and a step that ends turns without submitting gets 2 reminders, then
fails with one eligible `failed` follow-up.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from harness import (
    Scripted,
    Session,
    on_user,
    once,
    start_call,
    submit_steps,
)
from waiting import wait_until

from runner.engine._agent import CONTRACT_RE
from runner.host.session._reference import ModelView, ToolCall
from runner.launch._intents import (
    AGENT_STEP_TYPE,
    DEFERRED_TURN_TYPE,
    NOTIFICATION_TYPE,
    PRESENTATION_TYPE,
    message_id,
    new_intent,
)
from runner.store import LostRace, StoreUnavailable

pytestmark = pytest.mark.timeout(20)
Make = Callable[..., Session]
CONTINUED_WF = """
    start: ask
    presentation: "run {{ run.status }}: {{ outputs.ask.summary }}"
    nodes:
      ask: {checkpoint: {summary: "Which colour?"}}
      paint:
        agent:
          prompt: "Paint it {{ outputs.ask.answer }}."
          output: {type: object, required: [summary], properties: {summary: {type: string}}}
    edges: [{from: ask, to: paint}]
"""
NOTIFY_WF = """
    start: tell
    nodes:
      tell: {notify: {kind: progress, message: "half way there"}}
      rest: {compute: "{{ 1 }}"}
    edges: [{from: tell, to: rest}]
"""


def _queued_ids(s: Session) -> list[str]:
    return [e.details["runId"] for e in s.tool_results() if e.details.get("queued")]


def _turn_texts(model: Scripted) -> list[str]:
    """The message that opened each model turn (first view of a turn has no tool reply)."""
    return [v.last_user_text for v in model.views if v.last_tool_reply is None]


def test_seed18_continuation_answers_a_waiting_run(session: Make) -> None:
    model = Scripted(on_user("go", start_call("paint", None)),
                     once(on_user("run waiting",
                                  ToolCall("workflow", {"action": "answer", "input": "teal"}))),
                     submit_steps())
    s = session(model, {"paint": CONTINUED_WF})
    s.host.prompt("go")
    s.settle()
    parent, child = _queued_ids(s)
    answer = next(e for e in s.tool_results() if e.details.get("action") == "answer")
    assert answer.content == f"Answer queued as run {child} (continues {parent})."
    assert answer.details == {"is_error": False, "action": "answer", "runId": child,
                              "parentRunId": parent, "queued": True}
    # Answered: the parent no longer waits; it reads as continued by the child run.
    assert s.status(parent)["status"] == "continued"
    row = s.launch(child)
    assert row.parent_run_id == parent
    assert row.status == "done"
    assert s.status(child)["status"] == "completed"
    (step,) = s.messages(AGENT_STEP_TYPE)
    assert step.details["runId"] == child
    assert "Paint it teal." in step.content
    # One presentation per run: the waiting one and the completed continuation.
    shown = [(m.details["runId"], m.content) for m in s.messages(PRESENTATION_TYPE)]
    assert shown == [(parent, "run waiting: Which colour?"),
                     (child, "run completed: Which colour?")]
    # A second answer to the same parent is refused (it continues once).
    again = s.controller.on_tool_call("c", "workflow", {"action": "answer", "runId": parent,
                                                        "input": "red"})
    assert again.is_error
    assert len(s.launches()) == 2


def test_seed18_parking_on_shutdown_and_resume_on_the_next_session_start(
        session: Make) -> None:
    holder: list[Session] = []

    def quit_mid_step(view: ModelView) -> Any:
        if view.last_tool_reply is None and CONTRACT_RE.search(view.last_user_text):
            holder[0].shutdown("user quit")  # the session ends in the middle of a step
            return "bye"
        return None

    s = session(Scripted(on_user("go", start_call("hello")), quit_mid_step))
    holder.append(s)
    s.host.prompt("go")
    s.settle()
    (run_id,) = _queued_ids(s)
    assert s.launch(run_id).status == "parked"
    assert s.store.launches.find_session_reservation(s.session_id) is None
    assert s.messages(DEFERRED_TURN_TYPE) == []  # shutdown sends no follow-up
    assert s.messages(PRESENTATION_TYPE) == []
    model = Scripted(submit_steps())
    again = s.restart(model)  # session start: the parked run resumes at its step
    again.settle()
    assert again.launch(run_id).status == "done"
    assert again.status(run_id)["status"] == "completed"
    kinds = [m.details["kind"] for m in again.messages(AGENT_STEP_TYPE)]
    assert kinds[0] == "step"
    assert len(kinds) == 2
    assert [m.details["runId"] for m in again.messages(PRESENTATION_TYPE)] == [run_id]


def test_seed18_presentation_sent_once_and_resolving_a_pending_intent(session: Make) -> None:
    holder: list[Session] = []
    intents: list[str] = []

    def intent_then_submit(view: ModelView) -> Any:
        found = list(CONTRACT_RE.finditer(view.last_user_text))
        if view.last_tool_reply is not None or not found:
            return None
        s = holder[0]
        run_id = s.controller.active.record.run_id  # type: ignore[union-attr]
        # Something earlier left an eligible follow-up for this run (say, an interrupted
        # step whose run then went on): the presentation must resolve it, not add a turn.
        intent = new_intent(session_id=s.session_id, run_id=run_id, workflow="hello",
                            cause="controller_interrupted", source="test", state="running",
                            reason="interrupted", node="plan")
        s.store.turn_intents.ensure(intent)
        intents.append(intent.intent_id)
        m = found[-1]
        return ToolCall("workflow", {"action": "submit", "step": m.group("step"),
                                     "attempt": m.group("attempt"),
                                     "output": {"summary": "ok"}})

    def wait_for_outcome(view: ModelView) -> Any:
        reply = view.last_tool_reply
        if reply is None or not reply.content.startswith("Output accepted"):
            return None
        # the run ends while this turn is still active
        wait_until(lambda: holder[0].controller.outcomes, timeout=15,
                   what="the run to end during the turn")
        return "submitted"

    model = Scripted(on_user("go", start_call("hello")), once(intent_then_submit),
                     wait_for_outcome)
    s = session(model)
    holder.append(s)
    s.host.prompt("go")
    s.settle()
    (_run_id,) = _queued_ids(s)
    (shown,) = s.messages(PRESENTATION_TYPE)
    assert shown.content == "plan ready: ok"
    assert shown.details["turnIntentId"] == intents[0]
    assert s.messages(DEFERRED_TURN_TYPE) == []
    intent = s.store.turn_intents.get(intents[0])
    assert intent is not None
    assert intent.resolution == "presentation"
    assert intent.resolution_message_id == message_id(intents[0], "presentation")
    assert _turn_texts(model).count("plan ready: ok") == 1  # one turn for both
    # Later boundaries never present again.
    s.controller.on_session_start("resume")
    s.controller.on_turn_settled(False)
    s.restart().controller.on_session_start("resume")
    assert len(s.messages(PRESENTATION_TYPE)) == 1


def test_seed18_notify_reports_arrive_without_a_turn_and_once(
        session: Make, monkeypatch: pytest.MonkeyPatch) -> None:
    model = Scripted(on_user("go", start_call("tell", None)))
    s = session(model, {"tell": NOTIFY_WF})
    notes = s.store.notifications
    real = notes.mark_delivered
    calls = [0]

    def flaky(notification_id: str, token: str) -> Any:
        calls[0] += 1
        if calls[0] == 1:  # the first delivery dies between append and mark
            raise StoreUnavailable("database is locked")
        return real(notification_id, token)

    monkeypatch.setattr(notes, "mark_delivered", flaky)
    s.host.prompt("go")
    s.controller.wait_quiet(5)
    (run_id,) = _queued_ids(s)
    (note,) = s.messages(NOTIFICATION_TYPE)
    assert note.content == "half way there"
    assert note.details == {"notificationId": f"{run_id}:tell:1", "runId": run_id,
                            "kind": "progress"}
    assert s.host.turns == 1
    assert not s.host._turn_requested
    assert notes.get(f"{run_id}:tell:1").delivered_at is None  # mark failed
    # Next boundary after the claim lease: found in the log, marked, not sent again.
    s.store_clock.advance(31)
    s.controller.on_turn_settled(False)
    s.restart().controller.on_session_start("resume")
    assert len(s.messages(NOTIFICATION_TYPE)) == 1
    assert notes.get(f"{run_id}:tell:1").delivered_at is not None
    assert s.host.turns == 1
    # A crash-retried notify node with the same id is the same row.
    attempt = notes.get(f"{run_id}:tell:1").attempt_id
    s.controller.notification_sink().emit(run_id, "tell", attempt, f"{run_id}:tell:1",
                                          "progress", "half way there")
    assert len(s.messages(NOTIFICATION_TYPE)) == 1


def test_submit_with_a_stale_attempt_is_refused(session: Make) -> None:
    def stale_first(view: ModelView) -> Any:
        found = list(CONTRACT_RE.finditer(view.last_user_text))
        if view.last_tool_reply is not None or not found:
            return None
        m = found[-1]
        stale = {"action": "submit", "step": m.group("step"), "attempt": "0123456789abcdef",
                 "output": {"summary": "too early"}}
        return [ToolCall("workflow", stale)]

    s = session(Scripted(on_user("go", start_call("hello")), once(stale_first),
                         on_user("Output accepted|stale", "never"),
                         submit_steps()))
    refused = s.controller.on_tool_call("c", "workflow", {"action": "submit", "step": "plan",
                                                          "attempt": "a", "output": {}})
    assert refused.is_error
    assert json.loads(refused.content)["error"]["message"] == \
        "no workflow step is open in this session"
    s.host.prompt("go")
    s.settle()
    (run_id,) = _queued_ids(s)
    replies = [e for e in s.tool_results() if e.details.get("action") == "submit"]
    (step,) = s.messages(AGENT_STEP_TYPE)[:1]
    attempt = step.details["attempt"]
    assert replies[0].details["is_error"] is True
    assert json.loads(replies[0].content)["error"] == {
        "code": "rejected", "action": "submit",
        "message": f"attempt '0123456789abcdef' is stale; the current attempt is '{attempt}'"}
    assert replies[-1].content.startswith("Output accepted")
    assert s.launch(run_id).status == "done"
    assert [o.final_output for o in s.controller.outcomes] == [{"summary": "done plan"}]


def test_a_step_without_submission_gets_two_reminders_then_fails_with_one_followup(
        session: Make) -> None:
    model = Scripted(on_user("^go$", start_call("hello")))  # never submits
    s = session(model)
    s.host.prompt("go")
    s.settle()
    (run_id,) = _queued_ids(s)
    kinds = [m.details["kind"] for m in s.messages(AGENT_STEP_TYPE)]
    assert kinds == ["step", "reminder", "reminder"]
    assert s.status(run_id)["status"] == "failed"
    (follow,) = s.messages(DEFERRED_TURN_TYPE)
    assert follow.content.startswith(f"Workflow hello ended with state failed (run {run_id})")
    assert follow.details["cause"] == "failed"
    intent = s.store.turn_intents.get(follow.details["turnIntentId"])
    assert intent is not None
    assert intent.eligible_at is not None
    assert intent.resolution == "fallback"
    assert _turn_texts(model).count(follow.content) == 1
    assert s.store.launches.find_session_reservation(s.session_id) is None
    assert isinstance(s.store.turn_intents.claim_delivery(intent.intent_id), LostRace)
