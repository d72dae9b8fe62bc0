"""Issue 9 defects at the session seam, on the reference host with a real store:
a closing presentation that survives a restart (7), a detached launch no session
touches (6), a poison launch (the activation crash loop), an executor factory that
fails on resume and an exception in a sink (4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from harness import Crash, Scripted, Session, crash_at, drop_fds_under, on_user, start_call
from harness import submit_steps as submit
from waiting import wait_until

from runner.host.session._reference import ModelView
from runner.launch._intents import AGENT_STEP_TYPE, DEFERRED_TURN_TYPE, PRESENTATION_TYPE
from runner.store import MAX_ACTIVATION_CRASHES

pytestmark = pytest.mark.timeout(30)
Make = Callable[..., Session]
LEASE = 31.0


def test_a_pending_presentation_survives_a_restart_and_blocks_a_new_start(
        session: Make) -> None:
    """Defect 7: the pending final presentation (and its preflight refusal) lived only
    in memory and was lost on restart."""
    holder: list[Session] = []
    refused: list[Any] = []

    def die_after_the_run(view: ModelView) -> Any:
        reply = view.last_tool_reply
        if reply is None or not reply.content.startswith("Output accepted"):
            return None
        s = holder[0]
        wait_until(lambda: bool(s.controller.outcomes), timeout=20)
        refused.append(s.controller.on_tool_call(
            "c", "workflow", {"action": "start", "workflow": "hello", "input": {"task": "b"}}))
        raise Crash("the session process died before the presentation went out")

    s = session(Scripted(on_user("go", start_call("hello")), submit(), die_after_the_run))
    holder.append(s)
    with pytest.raises(Crash):
        s.host.prompt("go")
    (row,) = s.launches()
    assert row.status == "done"
    assert s.messages(PRESENTATION_TYPE) == []
    (reply,) = refused
    assert reply.is_error
    assert f"final presentation of run {row.run_id} is still pending" in reply.content
    drop_fds_under(s.ws.runs_dir)

    again = s.restart(Scripted())
    again.settle()
    (shown,) = again.messages(PRESENTATION_TYPE)
    assert shown.content == "plan ready: done plan"  # rendered from the bundle
    assert shown.details["runId"] == row.run_id
    assert again.messages(DEFERRED_TURN_TYPE) == []  # the presentation, not a fallback
    third = again.restart(Scripted())
    third.settle()
    assert len(third.messages(PRESENTATION_TYPE)) == 1  # delivered once
    ok = third.controller.on_tool_call(
        "c", "workflow", {"action": "start", "workflow": "hello", "input": {"task": "b"}})
    assert not ok.is_error, ok.content


def test_a_session_never_activates_a_detached_launch(session: Make) -> None:
    """Defect 6: a `wfrun start` launch was activated by whichever session settled
    first, pushing a prompt built from private input into that conversation."""
    s = session(Scripted(on_user("hi", "hello")))
    detached = s.coordinator.prepare("hello", {"task": "private plans"})
    s.host.prompt("hi")
    s.settle()
    assert s.launch(detached.run_id).status == "queued"
    assert s.messages(AGENT_STEP_TYPE) == []
    assert all("private plans" not in str(m.content) for m in s.messages())


def test_an_activation_that_crashes_every_time_becomes_a_poison_launch(session: Make) -> None:
    s = session(Scripted(on_user("go", start_call("hello"))), crash=crash_at("after_claim"))
    with pytest.raises(Crash):
        s.host.prompt("go")
    (row,) = s.launches()
    current = s
    for _ in range(MAX_ACTIVATION_CRASHES - 1):
        s.store_clock.advance(LEASE)
        with pytest.raises(Crash):
            current = current.restart(Scripted(), crash=crash_at("after_claim"))
        current = current.family[-1]
    s.store_clock.advance(LEASE)
    last = current.restart(Scripted())
    last.settle()
    final = last.launch(row.run_id)
    assert (final.status, final.error_code) == ("failed", "activation_failed")
    assert f"crashed {MAX_ACTIVATION_CRASHES} times in a row" in (final.error_message or "")
    assert len(last.messages(DEFERRED_TURN_TYPE)) == 1  # told once
    assert last.store.launches.find_session_reservation(last.session_id) is None


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_executor_factory_failing_on_resume_fails_the_run_and_its_bundle(
        session: Make) -> None:
    """Defect 4: it left the launch `running` for ever, re-crashing at every lease."""
    s = session(Scripted(on_user("go", start_call("hello"))),
                crash=crash_at("before_executor_release"))
    s.host.prompt("go")
    thread = s.controller._thread
    assert thread is not None
    thread.join(10)
    (row,) = s.launches()
    assert row.status == "running"
    drop_fds_under(s.ws.runs_dir)
    s.store_clock.advance(LEASE)
    again = s.restart(Scripted(), start=False)

    def broken(_record: Any) -> Any:
        raise RuntimeError("no such agent")

    again.options.executor = broken
    again.host.start("resume")
    again.settle()
    final = again.launch(row.run_id)
    assert (final.status, final.error_code) == ("failed", "run_failed")
    assert again.status(row.run_id)["run"]["status"] == "failed"  # the bundle agrees
    assert again.store.launches.find_session_reservation(again.session_id) is None
    assert len(again.messages(DEFERRED_TURN_TYPE)) == 1
    s.store_clock.advance(LEASE)
    assert again.store.launches.claim_next(runner_id="x", session_id=s.session_id) is None
