"""Seed 000 test 17: status for every launch and run state, by tool and by `wfrun status`.

Each state is produced the way it happens, in its own session of one project (one
store): the host's listener is driven by hand where a turn must stay unfinished.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harness import (
    AGENT_WF,
    COMPUTE_WF,
    Crash,
    Scripted,
    Session,
    crash_at,
    make_session,
    wfrun,
)

pytestmark = pytest.mark.timeout(30)
CHECKPOINT_WF = """
    start: ask
    nodes:
      ask: {checkpoint: {summary: "Go?"}}
"""
FAILING_WF = """
    start: boom
    nodes:
      boom: {action: {shell: [sh, -c, "exit 5"]}}
"""
SLOW_WF = """
    start: slow
    nodes:
      slow: {action: {shell: [sleep, "5"]}, timeout: 200ms}
"""
CANCELLED_RUN_WF = """
    start: plan
    nodes:
      plan: {agent: {prompt: "Plan."}}
"""
WORKFLOWS = {"hello": AGENT_WF, "calc": COMPUTE_WF, "ask": CHECKPOINT_WF, "boom": FAILING_WF,
             "slow": SLOW_WF, "plan": CANCELLED_RUN_WF}


def _begin(s: Session, workflow: str, run_input: Any = None) -> str:
    """A turn starts and the model calls `workflow start`; the turn is still open."""
    s.controller.on_turn_started()
    args: dict[str, Any] = {"action": "start", "workflow": workflow}
    if run_input is not None:
        args["input"] = run_input
    reply = s.controller.on_tool_call("c", "workflow", args)
    assert not reply.is_error, reply.content
    return str(reply.details["runId"])


def _settle(s: Session) -> None:
    """The initiating turn settles (the step turns it asks for are not run here)."""
    s.controller.on_turn_settled(False)
    s.controller.wait_quiet(10)


def _build_states(tmp_path: Path, made: list[Session],
                  store_url: str | None) -> dict[str, tuple[str, str]]:
    """run id -> (expected launch state, expected status) for every state."""
    out: dict[str, tuple[str, str]] = {}

    def new(name: str, **kw: Any) -> Session:
        s = make_session(tmp_path, Scripted(), WORKFLOWS, session_id=name,
                         store_url=store_url, **kw)
        made.append(s)
        return s

    s = new("s-queued")
    out[_begin(s, "calc")] = ("queued", "queued")

    s = new("s-starting", crash=crash_at("after_claim"))
    run = _begin(s, "calc")
    with pytest.raises(Crash):
        s.controller.on_turn_settled(False)
    out[run] = ("starting", "starting")

    s = new("s-running")
    run = _begin(s, "hello", {"task": "x"})
    _settle(s)  # the agent step is in the session; nobody answers it
    out[run] = ("running", "running")

    s = new("s-parked")
    run = _begin(s, "hello", {"task": "x"})
    _settle(s)
    s.shutdown("quit")
    out[run] = ("parked", "parked")

    s = new("s-completed")
    run = _begin(s, "calc")
    _settle(s)
    out[run] = ("done", "completed")

    s = new("s-waiting")
    run = _begin(s, "ask")
    _settle(s)
    out[run] = ("done", "waiting")

    s = new("s-run-failed")
    run = _begin(s, "boom")
    _settle(s)
    out[run] = ("failed", "failed")  # a run that failed after starting: launch failed too

    s = new("s-timed-out")
    run = _begin(s, "slow")
    _settle(s)
    out[run] = ("failed", "timed_out")

    s = new("s-run-cancelled")
    run = _begin(s, "plan")
    _settle(s)
    reply = s.controller.on_tool_call("c", "workflow", {"action": "cancel"})
    assert "Cancel requested" in reply.content
    thread = s.controller._thread
    assert thread is not None
    thread.join(10)  # the run is waiting on its step, so "quiet" would not wait for it
    assert not thread.is_alive()
    out[run] = ("cancelled", "cancelled")

    s = new("s-launch-failed")
    run = _begin(s, "calc")
    s.write_workflow("calc", COMPUTE_WF.replace("true", "false"))
    _settle(s)
    s.write_workflow("calc", COMPUTE_WF)
    out[run] = ("failed", "failed")

    s = new("s-launch-cancelled")
    run = _begin(s, "calc")
    s.controller.on_tool_call("c", "workflow", {"action": "cancel", "runId": run})
    _settle(s)
    out[run] = ("cancelled", "cancelled")
    return out


def test_seed17_status_for_every_launch_and_run_state(tmp_path: Path,
                                                      store_url: str | None) -> None:
    made: list[Session] = []
    try:
        expected = _build_states(tmp_path, made, store_url)
        observer = made[0]
        with_bundle = {r for r in expected if observer.has_bundle(r)}
        assert len(with_bundle) == 7  # all but queued, starting, and the two that never ran
        launch_states = {launch for launch, _ in expected.values()}
        assert launch_states == {"queued", "starting", "running", "parked", "done", "failed",
                                 "cancelled"}
        run_states = {status for _, status in expected.values()}
        assert {"running", "waiting", "completed", "failed", "timed_out",
                "cancelled"} <= run_states
        for run_id, (launch, status) in expected.items():
            reply = observer.controller.on_tool_call("c", "workflow",
                                                     {"action": "status", "runId": run_id})
            assert not reply.is_error
            assert reply.content.split(" (")[0] == f"Run {run_id}: {status}", reply.content
            assert reply.details["status"] == status
            assert reply.details["launch"]["status"] == launch
            out = wfrun(observer.root, "status", "--json", run_id)
            assert out.code == 0, out
            view = json.loads(out.stdout)
            assert (view["runId"], view["status"], view["launch"]["status"]) == (
                run_id, status, launch)
            if run_id in with_bundle:
                assert view["run"]["run_id"] == run_id
            else:  # status works from the launch row alone
                assert view["run"] is None
            if launch == "failed":
                code = {"failed": "source_changed", "timed_out": "run_timed_out"}.get(
                    status, "run_failed")
                if status == "failed" and view["run"] is not None:
                    code = "run_failed"  # it started, then a node failed
                assert view["error"]["code"] == code
                assert reply.content.endswith(f"({code}: {view['error']['message']})")
            else:
                assert view["error"] is None
        # Without a run id: the session's own reservation, else the run it displayed
        # last (seed 000, issue 34.17), and a plain "nothing" in a session without runs.
        by_session = {s.session_id: s for s in made}
        queued_run = next(r for r, (la, _) in expected.items() if la == "queued")
        mine = by_session["s-queued"].controller.on_tool_call("c", "workflow",
                                                              {"action": "status"})
        assert mine.content == f"Run {queued_run}: queued"
        shown = by_session["s-completed"].controller.on_tool_call("c", "workflow",
                                                                  {"action": "status"})
        assert shown.content.endswith(": completed"), shown.content
        assert expected[shown.details["runId"]] == ("done", "completed")
        fresh = make_session(tmp_path / "fresh", Scripted(), WORKFLOWS, session_id="s-none",
                             store_url=store_url)
        made.append(fresh)
        none = fresh.controller.on_tool_call("c", "workflow", {"action": "status"})
        assert none.content == "no workflow is queued or running in this session"
        # `wfrun status` lists what is not finished, before any bundle exists.
        listing = json.loads(wfrun(observer.root, "status", "--json").stdout)["launches"]
        assert {row["launch"]["status"] for row in listing} == {"queued", "starting",
                                                                 "running", "parked"}
        unknown = wfrun(observer.root, "status", "nope-20260101T000000Z-00000000")
        assert unknown.code == 3
        assert "no launch or run" in unknown.stderr
    finally:
        for s in made:
            s.close()
