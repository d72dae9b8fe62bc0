"""Seed 000 tests 9-11 and 14: lease recovery, cancellation, source change, delivery crashes.

Crashes are simulated in-process: a crash hook raises `Crash` (not an `Exception`,
so no handler in wfrun swallows it), the crashed controller is abandoned, and a
new store handle + coordinator + controller + host is built on the same store file
and session log, as a restarted process would. The real-process SIGKILL matrix
lives with the launch crash helper.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from harness import (
    AGENT_WF,
    Crash,
    Scripted,
    Session,
    crash_at,
    drop_fds_under,
    on_user,
    once,
    start_call,
    submit_steps,
)

from runner.host.session._reference import ModelView, ToolCall
from runner.launch._intents import AGENT_STEP_TYPE, DEFERRED_TURN_TYPE, launch_failed_text
from runner.store import StoreUnavailable

pytestmark = pytest.mark.timeout(20)
Make = Callable[..., Session]
LEASE = 30.0
CHANGED_AGENT_WF = AGENT_WF.replace("Plan {{ input.task }}.", "Plan {{ input.task }} again.")


def _model() -> Scripted:
    return Scripted(on_user("go", start_call("hello")), submit_steps())


def _step_messages(s: Session, run_id: str) -> list[Any]:
    return [m for m in s.messages(AGENT_STEP_TYPE) if m.details["runId"] == run_id]


def _trace_types(s: Session, run_id: str) -> list[str]:
    if not s.has_bundle(run_id):
        return []
    return [event["type"] for event in s.trace(run_id)]


def _followups(s: Session) -> list[Any]:
    return s.messages(DEFERRED_TURN_TYPE)


# -- 9. lease expiry and recovery at every activation boundary ---------------------------

@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("boundary", ["after_claim", "during_starting",
                                      "before_executor_release"])
def test_seed09_lease_expiry_and_recovery_at_every_activation_boundary(
        session: Make, boundary: str) -> None:
    if boundary == "before_executor_release":
        # The worker thread dies after `running`, before the first node, as it would
        # with its process (a BaseException: nothing on the run path may catch it).
        def hook(point: str) -> None:
            if point == boundary:
                raise Crash(boundary)
        crash: Callable[[str], None] = hook
    else:
        crash = crash_at(boundary)
    s = session(_model(), crash=crash)
    if boundary == "before_executor_release":
        s.host.prompt("go")
        thread = s.controller._thread
        assert thread is not None
        thread.join(10)
    else:
        with pytest.raises(Crash):
            s.host.prompt("go")
    (row,) = s.launches()
    # A database bundle's first write commits with `running` (launch/_activator.py RunLink):
    # before the first node's start there is neither.
    in_db = s.store_url is not None
    expected_row = {"after_claim": "starting", "during_starting": "starting",
                    "before_executor_release": "starting" if in_db else "running"}[boundary]
    assert row.status == expected_row
    assert row.epoch == 1
    assert s.has_bundle(row.run_id) == (boundary != "after_claim" and not in_db)
    assert "node_started" not in _trace_types(s, row.run_id)  # nothing ran
    drop_fds_under(s.ws.runs_dir)  # the dead process's bundle lock goes with it

    # A restart while the lease is live takes nothing over.
    early = s.restart(start=True)
    assert early.launch(row.run_id).status == expected_row
    assert early.launch(row.run_id).epoch == 1
    assert early.coordinator.recover_expired(s.session_id) == []

    # After expiry, the next session start recovers it and the run goes on to the end.
    s.store_clock.advance(LEASE + 1)
    again = s.restart()
    again.settle()
    final = again.launch(row.run_id)
    assert final.status == "done", (final, again.controller.errors)
    assert final.epoch == 2  # reclaimed exactly once
    assert _trace_types(again, row.run_id).count("run_started") == 1
    assert len(_step_messages(again, row.run_id)) == 1  # one agent step, one submission
    assert _followups(again) == []  # a recovered launch is not a failure


def test_seed09_recovery_started_during_a_turn_waits_for_the_next_settle(
        session: Make) -> None:
    s = session(_model(), crash=crash_at("after_claim"))
    with pytest.raises(Crash):
        s.host.prompt("go")
    (row,) = s.launches()
    s.store_clock.advance(LEASE + 1)
    seen: list[str] = []
    holder: list[Session] = []

    def session_start_mid_turn(view: ModelView) -> Any:
        if "hi" not in view.last_user_text or view.last_tool_reply is not None or seen:
            return None
        twin = holder[0]
        twin.controller.on_session_start("resume")  # arrives while this turn is active
        seen.append(twin.launch(row.run_id).status)
        return "still talking"

    again = s.restart(Scripted(session_start_mid_turn, submit_steps()), start=False)
    holder.append(again)
    again.host.prompt("hi")  # the settle after this turn is the recovery boundary
    again.settle()
    assert seen == ["starting"]  # nothing recovered or activated during the turn
    assert again.launch(row.run_id).status == "done"


@pytest.mark.parametrize(("bundle", "outcome", "code"), [
    ("none", "queued", None),
    ("running", "running", None),
    ("waiting", "parked", None),
    ("completed", "done", None),
    ("cancelled", "cancelled", None),
    ("failed", "failed", "activation_failed"),
    ("source_changed", "failed", "source_changed"),
    ("unreadable", "failed", "activation_failed"),
])
def test_seed09_recover_expired_reconciles_starting_with_the_bundle(
        session: Make, bundle: str, outcome: str, code: str | None) -> None:
    crash = crash_at("after_claim" if bundle == "none" else "during_starting")
    s = session(_model(), crash=crash)
    with pytest.raises(Crash):
        s.host.prompt("go")
    drop_fds_under(s.ws.runs_dir)
    (row,) = s.launches()
    if s.store_url is not None and bundle != "none":
        # A database bundle is made by the write that takes the launch to `running`
        # (launch/_activator.py RunLink): a `starting` launch never has one to reconcile, so
        # recovery always finds none and queues the launch again, input kept.
        assert not s.has_bundle(row.run_id)
        s.store_clock.advance(LEASE + 1)
        (recovered,) = s.coordinator.recover_expired(s.session_id)
        assert (recovered.run_id, recovered.status) == (row.run_id, "queued")
        assert not recovered.input_cleared
        assert s.store.turn_intents.list_pending(row.run_id) == []
        return
    if bundle in ("waiting", "completed", "cancelled", "failed"):
        data = s.manifest(row.run_id)
        data["status"] = bundle
        s.put_manifest(row.run_id, json.dumps(data))
    elif bundle == "source_changed":
        s.write_workflow("hello", CHANGED_AGENT_WF)
    elif bundle == "unreadable":
        s.put_manifest(row.run_id, "{torn")
    assert s.coordinator.recover_expired(s.session_id) == []  # the lease is still live
    s.store_clock.advance(LEASE + 1)
    (recovered,) = s.coordinator.recover_expired(s.session_id)
    assert recovered.run_id == row.run_id
    assert recovered.status == outcome
    assert recovered.error_code == code
    pending = s.store.turn_intents.list_pending(row.run_id)
    if outcome == "failed":
        (intent,) = pending  # the owning session is told, once
        assert intent.cause == "launch_failed"
        assert intent.eligible
        assert s.store.launches.find_session_reservation(s.session_id) is None
    else:
        assert pending == []
    assert s.coordinator.recover_expired(s.session_id) == []  # idempotent


def test_an_exception_after_running_fails_the_launch_once_and_frees_the_session(
        session: Make) -> None:
    """Issue 9 defect 4: an unexpected exception after `running` used to leave the
    launch running for ever (re-crashing at every lease expiry, holding the session's
    reservation). Now it fails at once, the bundle agrees, and one follow-up goes out."""
    def hook(point: str) -> None:
        if point == "before_executor_release":
            raise RuntimeError("a sink that raises")
    s = session(_model(), crash=hook)
    s.host.prompt("go")
    s.settle()
    (row,) = s.launches()
    assert (row.status, row.error_code, row.epoch) == ("failed", "run_failed", 1)
    assert row.error_message == ("the run crashed (RuntimeError); the runner that ran it "
                                 "logged the cause")
    assert s.status(row.run_id)["status"] == "failed"  # the bundle ended too
    assert s.store.launches.find_session_reservation(s.session_id) is None
    (follow,) = _followups(s)
    assert follow.details["runId"] == row.run_id
    s.store_clock.advance(LEASE + 1)  # nothing left to reclaim
    assert s.store.launches.claim_next(runner_id="x", session_id=s.session_id) is None


# -- 10. cancellation before claim, during starting, before executor release -----------

def _assert_cancelled_cleanly(s: Session, run_id: str) -> None:
    row = s.launch(run_id)
    assert row.status == "cancelled"
    assert row.input_cleared
    assert _step_messages(s, run_id) == []  # no agent step was ever released
    assert "node_started" not in _trace_types(s, run_id)
    assert _followups(s) == []  # cancellation sends no failure follow-up
    assert s.store.turn_intents.list_pending(run_id) == []
    assert s.store.launches.find_session_reservation(s.session_id) is None
    later = s.coordinator.prepare("hello", {"task": "later"}, session_id=s.session_id)
    assert later.status == "queued"
    assert later.run_id != run_id


def test_seed10_cancellation_before_claim(session: Make) -> None:
    def cancel_after_start(view: ModelView) -> Any:
        reply = view.last_tool_reply
        if reply is None or reply.details.get("action") != "start":
            return None
        return ToolCall("workflow", {"action": "cancel", "runId": reply.details["runId"]})

    s = session(Scripted(on_user("go", start_call("hello")), cancel_after_start))
    s.host.prompt("go")
    s.settle()
    (row,) = s.launches()
    cancel = [e for e in s.tool_results() if e.details.get("action") == "cancel"]
    assert cancel[0].content == f"Workflow run {row.run_id} cancelled."
    assert not s.has_bundle(row.run_id)
    _assert_cancelled_cleanly(s, row.run_id)


@pytest.mark.parametrize("point", ["after_claim", "during_starting"])
def test_seed10_cancellation_during_starting(session: Make, point: str) -> None:
    holder: list[Session] = []
    states: list[str] = []

    def cancel_now(name: str) -> None:
        if name == point and not states:
            s = holder[0]
            (row,) = s.launches()
            states.append(row.status)
            s.coordinator.cancel(row.run_id)  # e.g. `wfrun cancel` from another process

    s = session(_model(), crash=cancel_now)
    holder.append(s)
    s.host.prompt("go")
    s.settle()
    assert states == ["starting"]
    (row,) = s.launches()
    _assert_cancelled_cleanly(s, row.run_id)
    if point == "during_starting":
        # Its holder was asked (a live lease: ADR 0009, lever 3) and honoured the
        # request before the first node, on both backends: recorded; nothing ran.
        assert s.manifest(row.run_id)["status"] == "cancelled"
        assert not [e for e in s.trace(row.run_id) if e["type"] == "node_started"]


def test_seed10_cancellation_before_executor_release(session: Make) -> None:
    holder: list[Session] = []
    replies: list[Any] = []

    def cancel_now(name: str) -> None:
        if name == "before_executor_release" and not replies:
            s = holder[0]
            replies.append(s.controller.on_tool_call("c", "workflow", {"action": "cancel"}))

    s = session(_model(), crash=cancel_now)
    holder.append(s)
    s.host.prompt("go")
    s.settle()
    (row,) = s.launches()
    assert replies[0].content == (f"Cancel requested for workflow run {row.run_id}; it "
                                  "stops at the next safe point.")
    assert s.manifest(row.run_id)["status"] == "cancelled"
    _assert_cancelled_cleanly(s, row.run_id)


# -- 11. source change between preparation and activation --------------------------------

@pytest.mark.parametrize("change", ["edited", "removed"])
def test_seed11_source_change_between_preparation_and_activation(session: Make,
                                                                 change: str) -> None:
    holder: list[Session] = []

    def change_source(view: ModelView) -> Any:
        reply = view.last_tool_reply
        if reply is None or reply.details.get("action") != "start":
            return None
        s = holder[0]
        if change == "edited":
            s.write_workflow("hello", CHANGED_AGENT_WF)
        else:
            (s.workflows_dir / "hello.yaml").unlink()
        return "started it"

    s = session(Scripted(on_user("go", start_call("hello")), once(change_source)))
    holder.append(s)
    s.host.prompt("go")
    s.settle()
    (row,) = s.launches()
    assert row.status == "failed"
    if change == "edited":
        assert row.error_code == "source_changed"
        assert row.error_message == ("the workflow source changed after it was queued; "
                                     "review the change, then start it again")
    else:  # the file is gone: named as such, without the path of the user's files
        assert row.error_code == "workflow_not_found"
        assert row.error_message == ("workflow 'hello' no longer exists (its file was removed "
                                     "after the run was queued); restore it or start another")
        assert str(s.ws.project_root) not in (row.error_message or "")
    assert row.input_cleared
    assert not s.has_bundle(row.run_id)  # no engine was built
    assert s.store.launches.find_session_reservation(s.session_id) is None
    (follow,) = _followups(s)
    assert follow.content == launch_failed_text("hello", row.run_id, row.error_message or "")


# -- 14. crashes around delivery: at most one follow-up ----------------------------------

def _failing_launch(session: Make, **kw: Any) -> Session:
    """A session whose start fails at activation (the source changes during the turn)."""
    holder: list[Session] = []

    def change_source(view: ModelView) -> Any:
        reply = view.last_tool_reply
        if reply is None or reply.details.get("action") != "start":
            return None
        holder[0].write_workflow("hello", CHANGED_AGENT_WF)
        return "started"

    s = session(Scripted(on_user("go", start_call("hello")), once(change_source)), **kw)
    holder.append(s)
    return s


@pytest.mark.parametrize("where", ["before_session_append", "after_session_append",
                                   "before_intent_resolution"])
def test_seed14_crash_around_delivery_gives_at_most_one_followup(
        session: Make, where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    crash = crash_at("after_session_append") if where == "after_session_append" else None
    s = _failing_launch(session, crash=crash)
    if where == "before_session_append":
        real = s.host.append_message

        def append(custom_type: str, *a: Any, **kw: Any) -> str:
            if custom_type == DEFERRED_TURN_TYPE:
                raise OSError("session log unavailable")  # dies before anything is written
            return real(custom_type, *a, **kw)
        monkeypatch.setattr(s.host, "append_message", append)
        expected: type[BaseException] = OSError
    elif where == "before_intent_resolution":
        def resolve(*_a: Any, **_kw: Any) -> Any:
            raise StoreUnavailable("database is locked")
        monkeypatch.setattr(s.store.turn_intents, "resolve", resolve)
        expected = StoreUnavailable
    else:
        expected = Crash
    with pytest.raises(expected):
        s.host.prompt("go")
    (row,) = s.launches()
    assert row.status == "failed"
    (intent,) = s.store.turn_intents.list_pending(row.run_id)
    appended = 0 if where == "before_session_append" else 1
    assert len(_followups(s)) == appended

    followup_turns: list[str] = []

    def model(view: ModelView) -> Any:
        if view.last_tool_reply is None and "failed to start" in view.last_user_text:
            followup_turns.append(view.last_user_text)
        return "noted"

    # Restart. With the delivery claim still held (crash after claiming), nothing is
    # sent until its lease runs out; then the log scan decides.
    again = s.restart(model)
    again.settle()
    if where != "before_session_append":
        assert again.store.turn_intents.get(intent.intent_id).pending
        s.store_clock.advance(LEASE + 1)
        again.controller.on_session_start("resume")
        again.settle()
    messages = [m for m in _followups(again) if m.details["turnIntentId"] == intent.intent_id]
    assert len(messages) == 1
    assert messages[0].content == launch_failed_text("hello", row.run_id, row.error_message
                                                     or "")
    resolved = again.store.turn_intents.get(intent.intent_id)
    assert not resolved.pending
    assert resolved.resolution == "fallback"
    # Only a delivery made by the restarted process starts a turn there.
    assert len(followup_turns) == (1 if where == "before_session_append" else 0)
    # Any further boundary sends nothing more.
    again.controller.on_session_start("resume")
    again.controller.on_turn_settled(False)
    assert len(_followups(again)) == 1
