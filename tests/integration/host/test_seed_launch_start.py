"""Seed 000 tests 4-8: reservation, durable run id, preflight, no early engine, one activation."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
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
)
from waiting import wait_until

from runner.host.session._protocol import ToolReply
from runner.host.session._reference import ModelView, ToolCall
from runner.launch._intents import AGENT_STEP_TYPE, PRESENTATION_TYPE

pytestmark = pytest.mark.timeout(20)
Make = Callable[..., Session]
QUEUED_RE = re.compile(r"^Workflow (?P<name>[\w.-]+) queued \(run (?P<run>[\w.-]+)\)\.$")
BROKEN_WF = "start: nowhere\nnodes:\n  a: {compute: \"{{ 1 }}\"}\n"


def _replies(s: Session) -> list[dict[str, Any]]:
    return [{"content": e.content, **(e.details or {})} for e in s.tool_results()]


def _committed_rows(s: Session) -> list[tuple[str, str, str | None]]:
    """The queue as another connection sees it: only committed rows."""
    return s.committed("SELECT run_id, status, origin_session_id FROM workflow_run_queue "
                       "ORDER BY created_at, run_id")


def test_seed04_one_session_reservation_and_different_session_independence(
        session: Make) -> None:
    a = session(Scripted(), session_id="session-a")
    b = session(Scripted(on_user("go", start_call("hello", "b")), submit_steps()),
                session_id="session-b")
    # Session A is mid-turn (the host reported the turn start) and starts twice.
    a.controller.on_turn_started()
    first, second = (a.controller.on_tool_call("c1", c.name, c.args)
                     for c in (start_call("hello"), start_call("hello", "y")))
    assert first.details["queued"] is True
    held = first.details["runId"]
    assert second.is_error
    assert f"already has workflow run {held} (queued)" in second.content
    assert [r.run_id for r in a.store.launches.query(session_id="session-a")] == [held]
    # Session B, same project and store, is independent: it starts and runs its own launch,
    # and its settled turns never claim A's launch.
    b.host.prompt("go")
    b.settle()
    b_rows = b.store.launches.query(session_id="session-b")
    assert len(b_rows) == 1
    assert b_rows[0].status == "done"
    assert a.launch(held).status == "queued"
    assert not a.has_bundle(held)
    # A's own turn settles: now A's launch activates, and it still holds A's reservation.
    a.controller.on_turn_settled(False)
    # `running` commits with the bundle's first write, on the run's thread when the
    # bundle is in the database (launch/_activator.py RunLink).
    wait_until(lambda: a.launch(held).status == "running", what="A's launch running")
    assert a.store.launches.find_session_reservation("session-a").run_id == held
    assert a.store.launches.find_session_reservation("session-b") is None


def test_seed05_durable_run_id_before_the_start_tool_returns(session: Make) -> None:
    s = session(Scripted(on_user("go", start_call("hello"))))
    seen: list[tuple[ToolReply, list[tuple[str, str, str | None]], Any]] = []
    real = s.controller.on_tool_call

    def spy(call_id: str, name: str, args: dict[str, Any]) -> ToolReply:
        reply = real(call_id, name, args)
        # Read the moment the call returns, before the turn goes on.
        run_id = reply.details.get("runId")
        seen.append((reply, _committed_rows(s), s.store.launches.get(run_id)))
        return reply

    s.controller.on_tool_call = spy  # type: ignore[method-assign]
    s.host.prompt("go")
    (reply, rows, record), = seen
    m = QUEUED_RE.match(reply.content)
    assert m is not None, reply.content
    run_id = m.group("run")
    assert m.group("name") == "hello"
    assert re.fullmatch(r"hello-\d{8}T\d{6}Z-[0-9a-f]{8}", run_id)
    assert reply.details == {"action": "start", "workflow": "hello", "runId": run_id,
                             "queued": True}
    assert not reply.is_error
    assert rows == [(run_id, "queued", "session-1")]
    # The queued row carries the source identity, digest and private input.
    assert record.definition_digest.startswith("sha256:")
    assert record.source["source"]["path"].endswith("hello.yaml")
    assert record.input() == {"task": "x"}
    # The same run id is the one that runs.
    s.settle()
    assert [o.run_id for o in s.controller.outcomes] == [run_id]


def _pending_presentation_model(s_ref: list[Session]) -> Scripted:
    """Submits the step, waits in the same turn for the run to finish, then starts again."""

    def after_submit(view: ModelView) -> Any:
        reply = view.last_tool_reply
        if reply is None or not reply.content.startswith("Output accepted"):
            return None
        wait_until(lambda: s_ref[0].controller.outcomes, timeout=15,
                   what="the run to end during the turn")
        return start_call("hello", "second")

    return Scripted(on_user("go", start_call("hello")), once(after_submit), submit_steps(),
                    once(on_user("plan ready", start_call("hello", "third"))))


@pytest.mark.parametrize("case", ["unknown_workflow", "invalid_definition", "bad_input",
                                  "existing_reservation", "pending_presentation"])
def test_seed06_synchronous_preflight_failure_with_no_queue_record(session: Make,
                                                                  case: str) -> None:
    calls = {
        "unknown_workflow": (start_call("helo"), "workflow_not_found", "no workflow named 'helo'"),
        "invalid_definition": (start_call("broken", None), "workflow_invalid",
                               "workflow 'broken' has"),
        "bad_input": (start_call("hello", {"tusk": 1}), "input_invalid", "task"),
        "existing_reservation": (start_call("hello", "y"), "activation_failed",
                                 "already has workflow run"),
    }
    if case == "pending_presentation":
        ref: list[Session] = []
        s = session(_pending_presentation_model(ref))
        ref.append(s)
        s.host.prompt("go")
        s.settle()
        starts = [r for r in _replies(s) if r.get("action") == "start"]
        assert len(starts) == 3
        first, refused, corrected = starts
        assert first["queued"]
        assert corrected["queued"]
        assert refused["is_error"]
        assert refused["code"] == "activation_failed"
        assert f"presentation of run {first['runId']} is still pending" in refused["content"]
        assert "runId" not in refused
        # No row for the refused start; the presentation arrived once; the correction queued.
        assert sorted(r.run_id for r in s.launches()) == sorted([first["runId"],
                                                                corrected["runId"]])
        shown = [m.details["runId"] for m in s.messages(PRESENTATION_TYPE)]
        assert shown.count(first["runId"]) == 1
        return
    bad, code, text = calls[case]
    first = [start_call("hello")] if case == "existing_reservation" else []
    # The model corrects the mistake in the same turn: a valid start follows the refusal.
    fix = [] if case == "existing_reservation" else [start_call("hello")]
    s = session(Scripted(on_user("go", [*first, bad, *fix])),
                {"hello": AGENT_WF, "broken": BROKEN_WF})
    s.host.prompt("go")
    replies = _replies(s)
    refused = replies[len(first)]
    assert refused["is_error"], refused
    assert refused["code"] == code, refused
    assert text in refused["content"]
    assert refused.get("queued") is None
    queued = [r for r in replies if r.get("queued")]
    assert len(queued) == 1  # only the valid start left a record
    assert [r.run_id for r in s.launches()] == [queued[0]["runId"]]


def test_seed07_zero_engine_activity_before_the_turn_settles(session: Make,
                                                             tmp_path: Path) -> None:
    marker = tmp_path / "side-effect"
    sidefx = f"""
        start: touch
        nodes:
          touch: {{action: {{shell: [touch, "{marker}"]}}}}
          plan:
            agent: {{prompt: "Plan."}}
        edges: [{{from: touch, to: plan}}]
    """
    observed: list[dict[str, Any]] = []
    holder: list[Session] = []

    def check_then_status(view: ModelView) -> Any:
        reply = view.last_tool_reply
        if reply is None or reply.details.get("action") != "start":
            return None
        s = holder[0]
        run_id = reply.details["runId"]
        time.sleep(0.3)  # give any stray background activation time to show itself
        observed.append({"bundle": s.has_bundle(run_id),
                         "marker": marker.exists(), "status": s.launch(run_id).status,
                         "thread": s.controller._thread, "steps": len(s.messages())})
        return ToolCall("workflow", {"action": "status", "runId": run_id})

    s = session(Scripted(on_user("go", start_call("sidefx", None)), check_then_status,
                         submit_steps()), {"sidefx": sidefx})
    holder.append(s)
    s.host.prompt("go")
    s.settle()
    assert observed == [{"bundle": False, "marker": False, "status": "queued", "thread": None,
                         "steps": 0}]
    status_reply = next(r for r in _replies(s) if r.get("action") == "status")
    assert status_reply["content"].endswith(": queued")
    # After the turn settled, the engine ran: side effect, bundle, the agent step.
    (run,) = s.launches()
    assert run.status == "done"
    assert marker.exists()
    assert s.manifest(run.run_id)["run_id"] == run.run_id


class _Duplicating:
    """A host runtime that reports every settle three times and session start twice."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller

    def __getattr__(self, name: str) -> Any:
        return getattr(self.controller, name)

    def on_turn_settled(self, aborted: bool) -> None:
        for _ in range(3):
            self.controller.on_turn_settled(aborted)
            time.sleep(0.05)  # let the worker deliver the step between duplicates
        for _ in range(2):
            self.controller.on_session_start("resume")


def test_seed08_duplicate_settle_and_session_start_events_give_one_activation(
        session: Make) -> None:
    s = session(Scripted(on_user("go", start_call("hello")), submit_steps()))
    s.host.listener = _Duplicating(s.controller)
    s.host.prompt("go")
    # A second process of the same session starting up changes nothing either.
    twin = s.restart()
    twin.controller.on_session_start("resume")
    s.settle()
    (run,) = s.launches()
    assert run.status == "done"
    assert run.epoch == 1  # claimed exactly once
    assert s.bundle_ids() == [run.run_id]
    trace = s.trace(run.run_id)
    assert [e["type"] for e in trace].count("run_started") == 1
    steps = s.messages(AGENT_STEP_TYPE)
    assert [m.details["kind"] for m in steps] == ["step"]  # no reminder was spent either
    assert len(s.controller.outcomes) == 1
    assert twin.controller.outcomes == []
    assert len(s.messages(PRESENTATION_TYPE)) == 1
