"""Issue 34.17: the `workflow` tool's resume, status and cancel say what is true.

`resume` continues an explicitly parked run of the session (seed 000: parked ->
starting, explicit resume) at the next boundary; `status` without a run id shows the
session's reservation or else the run it displayed last; a cancel reply says
"cancelled" only when the run is cancelled, "cancel requested" while it stops.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harness import COMPUTE_WF, Scripted, Session, make_session
from waiting import wait_until

pytestmark = pytest.mark.timeout(60)
GATED_WF = """
    start: wait
    nodes:
      wait:
        action:
          shell: [sh, -c, 'touch "$G/started"; while [ ! -e "$G/go" ]; do sleep 0.1; done']
          env: {G: "{{ project.root }}/gate"}
"""


def call(s: Session, **args: Any) -> Any:
    return s.controller.on_tool_call("c", "workflow", args)


def started(s: Session) -> str:
    s.controller.on_turn_started()
    reply = call(s, action="start", workflow="gated")
    assert not reply.is_error, reply.content
    s.controller.on_turn_settled(False)  # the boundary activates it
    wait_until(lambda: (s.root / "gate" / "started").exists(), what="the step to start")
    return str(reply.details["runId"])


@pytest.fixture
def session(tmp_path: Path) -> Any:
    s = make_session(tmp_path, Scripted(), {"gated": GATED_WF, "calc": COMPUTE_WF})
    (s.root / "gate").mkdir()
    yield s
    (s.root / "gate" / "go").touch()
    s.close()


def test_resume_continues_an_explicitly_parked_run_at_the_next_boundary(
        session: Session) -> None:
    s = session
    run_id = started(s)
    act = s.controller.active
    assert act is not None
    act.control.park("held by the user")  # explicit: no host or session resumes it alone
    s.controller.wait_quiet(10)
    assert s.launch(run_id).status == "parked"
    assert s.launch(run_id).park_mode == "explicit"
    (s.root / "gate" / "started").unlink()

    s.controller.on_turn_started()
    reply = call(s, action="resume")
    assert not reply.is_error, reply.content
    assert reply.details == {"action": "resume", "runId": run_id, "queued": True}
    assert "resumes after this turn" in reply.content
    assert s.launch(run_id).status == "parked"  # nothing runs inside the turn
    s.controller.on_turn_settled(False)
    wait_until(lambda: (s.root / "gate" / "started").exists(), what="the run to resume")
    (s.root / "gate" / "go").touch()
    s.controller.wait_quiet(10)
    assert s.launch(run_id).status == "done"
    assert s.status(run_id)["status"] == "completed"


def test_resume_with_nothing_to_resume_says_so(session: Session) -> None:
    reply = call(session, action="resume")
    assert reply.is_error
    assert json.loads(reply.content)["error"] == {
        "code": "not_parked", "message": "no workflow run of this session is paused or parked",
        "action": "resume"}


def test_status_without_a_run_id_shows_the_displayed_run_once_nothing_is_reserved(
        session: Session) -> None:
    s = session
    s.controller.on_turn_started()
    run_id = str(call(s, action="start", workflow="calc").details["runId"])
    s.controller.on_turn_settled(False)
    s.controller.wait_quiet(10)
    assert s.launch(run_id).status == "done"  # the reservation is released
    reply = call(s, action="status")
    assert not reply.is_error
    assert reply.details["runId"] == run_id
    assert reply.content.startswith(f"Run {run_id}: completed")


def test_a_cancel_reply_says_requested_until_the_run_is_cancelled(session: Session) -> None:
    s = session
    run_id = started(s)
    requested = call(s, action="cancel")
    assert requested.details == {"action": "cancel", "runId": run_id,
                                 "status": "cancel_requested"}
    assert requested.content == (f"Cancel requested for workflow run {run_id}; it stops at "
                                 "the next safe point.")
    s.controller.wait_quiet(10)
    assert s.launch(run_id).status == "cancelled"

    s.controller.on_turn_started()
    queued = str(call(s, action="start", workflow="calc").details["runId"])
    done = call(s, action="cancel", runId=queued)  # queued: cancelled at once
    assert done.content == f"Workflow run {queued} cancelled."
    assert done.details["status"] == "cancelled"
