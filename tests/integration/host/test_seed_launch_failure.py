"""Seed 000 tests 12, 13, 15, 16: safe errors, the one launch-failure intent, model retries."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from harness import (
    AGENT_WF,
    Scripted,
    Session,
    on_user,
    once,
    start_call,
    submit_steps,
    wfrun,
)

from runner.errors import OperationFailed
from runner.host.session._reference import ModelView, ToolCall
from runner.launch._intents import (
    DEFERRED_TURN_TYPE,
    FACTS_SCHEMA,
    intent_id,
    launch_failed_text,
    message_id,
    source_event_id,
)
from runner.launch._safety import MAX_SAFE_BYTES

pytestmark = pytest.mark.timeout(20)
Make = Callable[..., Session]
CHANGED_AGENT_WF = AGENT_WF.replace("Plan {{ input.task }}.", "Plan {{ input.task }} again.")
BROKEN_YAML = "start: plan\nnodes:\n  plan: {agent: {prompt: [unclosed\n"
SECRETS = ("abcdef123456XYZbearer", "sk-live-abcdefghijklmnop", "hunter2-very-secret",
           "correct-horse-battery")
FACT_KEYS = {"schema", "workflowName", "runId", "observedState", "cause", "nodeId", "attemptId",
             "reason", "handoff"}


def _followups(s: Session) -> list[Any]:
    return s.messages(DEFERRED_TURN_TYPE)


def _reason_of(text: str, workflow: str, run_id: str) -> str:
    head = f"Workflow {workflow} failed to start (run {run_id}): "
    tail = ". Inspect the error and call workflow start again only after you correct the cause."
    assert text.startswith(head), text
    assert text.endswith(tail), text
    return text[len(head):-len(tail)]


def _no_secret(where: str, text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked into {where}"


@pytest.mark.parametrize("kind", ["wfrun_error", "unexpected_error"])
def test_seed12_safe_error_redaction_and_byte_bounds(session: Make, kind: str) -> None:
    noise = "é" * 400  # multi-byte text: the bound must cut at a character boundary
    detail = (f"provider refused: Authorization: Bearer {SECRETS[0]} api_key={SECRETS[1]} "
              f"(known secret {SECRETS[2]})\n  at line 3\n{noise}")

    def factory(_record: Any) -> Any:
        if kind == "wfrun_error":
            raise OperationFailed(f"cannot build the agent executor: {detail}")
        raise RuntimeError(detail)

    s = session(Scripted(on_user("go", start_call("hello", f"password={SECRETS[3]}"))))
    s.options.executor = factory
    s.coordinator.secrets = (SECRETS[2],)
    s.host.prompt("go")
    s.settle()
    (row,) = s.launches()
    assert row.status == "failed"
    assert row.error_code == "activation_failed"
    message = row.error_message or ""
    assert len(message.encode()) <= MAX_SAFE_BYTES
    assert "\n" not in message
    if kind == "wfrun_error":
        assert message.startswith("cannot build the agent executor: provider refused")
        assert "[redacted]" in message
    else:  # unknown errors keep only their class: their text may hold anything
        assert message == "activation failed (RuntimeError); see the host log"
    _no_secret("the store row", message)
    assert row.input_cleared
    # The follow-up, the run events, the tool status and the CLI carry the same safe text.
    (follow,) = _followups(s)
    reason = _reason_of(follow.content, "hello", row.run_id)
    assert reason == message
    assert len(reason.encode()) <= MAX_SAFE_BYTES
    _no_secret("the follow-up message", json.dumps([follow.content, follow.details]))
    events = s.store.run_events.read(run_id=row.run_id)
    (failed_event,) = [e for e in events if e.type == "launch_failed"]
    assert failed_event.payload == {"code": "activation_failed", "message": message}
    _no_secret("run_events", json.dumps([e.payload for e in events]))
    status = s.controller.on_tool_call("c", "workflow", {"action": "status", "runId": row.run_id})
    _no_secret("tool status", json.dumps([status.content, status.details]))
    assert status.content == f"Run {row.run_id}: failed (activation_failed: {message})"
    for args in (("status", row.run_id), ("status", "--json", row.run_id),
                 ("why", row.run_id)):
        out = wfrun(s.root, *args)
        assert out.code == 0, out
        _no_secret(f"wfrun {' '.join(args)}", out.stdout + out.stderr)
    # Nothing secret is anywhere in the store, not even the cleared input.
    for name, data in s.stored_bytes().items():
        for secret in SECRETS:
            assert secret.encode() not in data, f"{secret} in {name}"


def test_seed13_one_durable_launch_failure_turn_intent(session: Make) -> None:
    holder: list[Session] = []
    at_append: list[tuple[Any, ...]] = []

    def change_source(view: ModelView) -> Any:
        reply = view.last_tool_reply
        if reply is None or reply.details.get("action") != "start":
            return None
        holder[0].write_workflow("hello", CHANGED_AGENT_WF)
        return "started"

    s = session(Scripted(on_user("go", start_call("hello")), once(change_source)))
    holder.append(s)
    real = s.host.append_message

    def spy(custom_type: str, content: str, details: dict[str, Any], **kw: Any) -> str:
        if custom_type == DEFERRED_TURN_TYPE:  # what another process sees at send time
            at_append.append(s.committed(
                "SELECT intent_id, cause, eligible_at IS NOT NULL, resolved_at IS NULL, "
                "delivery_claim_token IS NOT NULL FROM workflow_turn_intents"))
            at_append.append(s.committed(
                "SELECT status, error_code FROM workflow_run_queue"))
        return real(custom_type, content, details, **kw)

    s.host.append_message = spy  # type: ignore[method-assign]
    s.host.prompt("go")
    s.settle()
    (row,) = s.launches()
    session_id, run_id = s.session_id, row.run_id
    source = source_event_id(run_id, "launch_failed", "$launch", None, "launch_failed")
    expected_id = intent_id(session_id, run_id, source, "$launch", None, "launch_failed")
    # Durable, eligible, claimed for delivery and the failure committed before the send.
    assert at_append == [[(expected_id, "launch_failed", 1, 1, 1)],
                         [("failed", "source_changed")]]
    intent = s.store.turn_intents.get(expected_id)
    assert intent is not None
    assert not intent.pending
    assert intent.resolution == "fallback"
    assert intent.resolution_message_id == message_id(expected_id, "fallback")
    assert set(intent.fallback_facts) == FACT_KEYS
    assert intent.fallback_facts["schema"] == FACTS_SCHEMA
    assert intent.fallback_facts["observedState"] == "failed_to_start"
    assert s.committed("SELECT count(*) FROM workflow_turn_intents") == [(1,)]
    (follow,) = _followups(s)
    assert follow.details == {"schema": "wfrun.deferred-turn-message.v1",
                              "turnIntentId": expected_id, "runId": run_id,
                              "cause": "launch_failed"}
    # A stale duplicate failure handler gets nothing and creates nothing.
    stale = s.coordinator.fail_launch(row, "stale-token", "activation_failed", "again")
    assert getattr(stale, "reason", None) is not None
    assert s.store.turn_intents.list_pending(run_id) == []
    s.controller.on_session_start("resume")
    s.controller.on_turn_settled(False)
    assert len(_followups(s)) == 1


def _fixing_model(holder: list[Session], *, fix: Callable[[Session], None]) -> Scripted:
    """Starts on "go"; on a failure follow-up, fixes the cause and starts again."""

    def on_failure(view: ModelView) -> Any:
        if view.last_tool_reply is not None or "failed to start" not in view.last_user_text:
            return None
        s = holder[0]
        fix(s)
        # Observed at the moment of the corrected call: the failed run released the session.
        assert s.store.launches.find_session_reservation(s.session_id) is None
        return start_call("hello", "fixed")

    return Scripted(on_user("^go$", start_call("hello")), on_failure, submit_steps())


def test_seed15_failed_reservation_release_followed_by_a_corrected_model_start(
        session: Make) -> None:
    holder: list[Session] = []

    def break_source(view: ModelView) -> Any:
        reply = view.last_tool_reply
        if reply is None or reply.details.get("action") != "start":
            return None
        holder[0].write_workflow("hello", BROKEN_YAML)
        return "queued it"

    model = _fixing_model(holder, fix=lambda s: s.write_workflow("hello", AGENT_WF))
    model.rules.insert(1, once(break_source))
    s = session(model)
    holder.append(s)
    s.host.prompt("go")
    s.settle()
    failed, fixed = (s.launch(e.details["runId"]) for e in s.tool_results()
                     if e.details.get("queued"))
    assert failed.status == "failed"
    assert failed.error_code == "workflow_invalid"
    assert "wfrun validate hello" in (failed.error_message or "")
    assert fixed.status == "done"
    assert fixed.run_id != failed.run_id
    (follow,) = _followups(s)
    assert follow.details["runId"] == failed.run_id
    assert [o.status for o in s.controller.outcomes] == ["completed"]


def test_seed16_repeated_model_correction_attempts_with_one_active_reservation(
        session: Make) -> None:
    holder: list[Session] = []
    reserved_counts: list[int] = []
    refused: list[str] = []
    broken = [0]

    def after_start(view: ModelView) -> Any:
        reply = view.last_tool_reply
        if reply is None or reply.details.get("action") != "start" or reply.is_error:
            return None
        s = holder[0]
        rows = s.store.launches.query(statuses=["queued", "starting", "running"])
        reserved_counts.append(len(rows))
        if broken[0] < 3:  # the first three attempts fail: the source moves under them
            broken[0] += 1
            s.write_workflow("hello", AGENT_WF if broken[0] % 2 == 0 else CHANGED_AGENT_WF)
        # An impatient second start in the same turn is refused: one reservation at a time.
        return ToolCall("workflow", {"action": "start", "workflow": "hello",
                                     "input": {"task": "twice"}})

    def note_refusal(view: ModelView) -> Any:
        reply = view.last_tool_reply
        if reply is not None and reply.is_error and reply.details.get("action") == "start":
            refused.append(reply.content)
            return "waiting for it"
        return None

    model = _fixing_model(holder, fix=lambda _s: None)
    model.rules[1:1] = [note_refusal, after_start]
    s = session(model)
    holder.append(s)
    s.host.prompt("go")
    s.settle()
    order = [e.details["runId"] for e in s.tool_results() if e.details.get("queued")]
    rows = [s.launch(run_id) for run_id in order]  # in the order the model started them
    assert len(s.launches()) == 4
    assert [r.status for r in rows] == ["failed", "failed", "failed", "done"]
    assert all(r.error_code == "source_changed" for r in rows[:3])
    assert len({r.run_id for r in rows}) == 4  # each retry is a new run id
    assert reserved_counts == [1, 1, 1, 1]
    assert len(refused) == 4
    assert all("already has workflow run" in t for t in refused)
    follows = _followups(s)
    assert [f.details["runId"] for f in follows] == [r.run_id for r in rows[:3]]
    for f, r in zip(follows, rows[:3], strict=True):
        assert f.content == launch_failed_text("hello", r.run_id, r.error_message or "")
