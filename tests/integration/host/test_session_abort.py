"""Escape (an aborted turn) during an agent step pauses the run; it never spends a reminder.

Before the fix, the controller counted an aborted settle as a turn spent on the
step: each Escape sent a reminder and the third failed the run `no_submission`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from harness import AGENT_WF, Scripted, Session, on_user, start_call, submit_steps

from runner.host.session._reference import Abort, ModelReply, ModelView, ToolCall
from runner.launch._intents import AGENT_STEP_TYPE

pytestmark = pytest.mark.timeout(30)
Make = Callable[..., Session]


def escapes(count: int) -> Callable[[ModelView], ModelReply | None]:
    """The user presses Escape in the first `count` turns that are about the step."""
    left = [count]

    def rule(view: ModelView) -> ModelReply | None:
        about_step = "Workflow step contract" in view.last_user_text or \
            view.last_user_text.startswith("carry on")
        if left[0] == 0 or view.last_tool_reply is not None or not about_step:
            return None
        left[0] -= 1
        return Abort()
    return rule


def test_three_escapes_during_a_step_pause_the_run_and_resume_continues_it(
        session: Make) -> None:
    model = Scripted(escapes(3), on_user("^go$", start_call("hello")),
                     on_user("^resume it$", ToolCall("workflow", {"action": "resume"})),
                     submit_steps())
    s = session(model, {"hello": AGENT_WF})
    s.host.prompt("go")
    s.settle()
    (run,) = [r.run_id for r in s.launches()]
    s.host.prompt("carry on")
    s.settle()
    s.host.prompt("carry on")
    s.settle()
    assert sum(isinstance(r, Abort) for r in model.replies) == 3
    # Paused, not failed: no reminder was sent and the step is still open.
    kinds = [m.details["kind"] for m in s.messages(AGENT_STEP_TYPE)]
    assert kinds == ["step"]
    assert s.launch(run).status == "running"
    step = s.controller._step
    assert step is not None
    assert step.held
    status = s.controller.on_tool_call("c", "workflow", {"action": "status", "runId": run})
    assert status.content == f"Run {run}: running (paused; the resume action continues it)"
    assert status.details["paused"] is True
    assert any(re.search(rf"workflow run {run} paused", n) for n in s.host.notices)

    s.host.prompt("resume it")  # the model resumes it; the step comes back as a new turn
    s.settle()
    s.controller.wait_quiet()
    assert s.launch(run).status == "done"
    assert s.status(run)["status"] == "completed"
    kinds = [m.details["kind"] for m in s.messages(AGENT_STEP_TYPE)]
    assert kinds == ["step", "resume"]


def test_turns_while_paused_by_the_pause_action_do_not_count_either(session: Make) -> None:
    chat = {"n": 0}

    def chatter(view: ModelView) -> ModelReply | None:
        if view.last_user_text == "chat" and view.last_tool_reply is None:
            chat["n"] += 1
            return "just chatting"
        return None

    model = Scripted(on_user("^go$", start_call("hello")),
                     on_user("Workflow step contract", ToolCall("workflow", {"action": "pause"})),
                     chatter,
                     on_user("^resume it$", ToolCall("workflow", {"action": "resume"})))
    s = session(model, {"hello": AGENT_WF})
    s.host.prompt("go")
    s.settle()
    (run,) = [r.run_id for r in s.launches()]
    for _ in range(3):  # three turns that end without a submission, all while paused
        s.host.prompt("chat")
        s.settle()
    assert chat["n"] == 3
    assert [m.details["kind"] for m in s.messages(AGENT_STEP_TYPE)] == ["step"]
    assert s.launch(run).status == "running"
    model.rules.insert(0, submit_steps())
    s.host.prompt("resume it")
    s.settle()
    s.controller.wait_quiet()
    assert s.status(run)["status"] == "completed"
    assert [m.details["kind"] for m in s.messages(AGENT_STEP_TYPE)] == ["step", "resume"]
