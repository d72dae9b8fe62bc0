"""Every launch and run state, each produced the way it happens, in one project.

Each state gets its own session of one project (one store): the host's listener is
driven by hand where a turn must stay unfinished. Shared by the seed's status test
and the test that every surface names each state alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness import AGENT_WF, COMPUTE_WF, Crash, Scripted, Session, crash_at, make_session

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


def build_states(tmp_path: Path, made: list[Session],
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
