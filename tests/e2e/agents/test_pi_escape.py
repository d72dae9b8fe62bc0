"""Real Pi: Escape (the RPC `abort`) during an agent step pauses the run, however often.

Before the fix every aborted turn counted as a turn without a submission: the
first two Escapes each sent a reminder and the third failed the run
`no_submission`. Now the step stays open, no reminder is sent, and `/workflow
resume` hands the step to the model again, which finishes the run.
"""

from __future__ import annotations

from typing import Any

import pytest
from fakes.openai_server import Answer, Hang, Messages, Reply, call, contract_of
from fakes.pi_model import last, text_of
from fakes.seed_workflow import RUN_RE
from pi_rpc import PiRpc, custom_messages
from pi_world import World
from waiting import wait_until

from runner.engine import RunReader
from runner.launch._intents import AGENT_STEP_TYPE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
PROMPT = "please start the review workflow"
ESCAPES = 3


def test_three_escapes_during_one_step_leave_the_run_paused_and_it_continues(
        world: World) -> None:
    seen: dict[str, Any] = {"hangs": 0}

    def rule(messages: Messages) -> Reply | None:
        end = last(messages)
        text = text_of(end)
        if end.get("role") == "user":
            if text == PROMPT:
                return Answer(calls=[("workflow", {"action": "start", "workflow": "review",
                                                   "input": {"task": "the change"}})])
            contract = contract_of([{"role": "user", "content": text}])
            if seen["hangs"] < ESCAPES and (contract or text == "carry on"):
                seen["hangs"] += 1
                return Hang(60, after_headers=True)  # until the user's Escape
            if contract:
                return Answer(calls=[call("submit", contract, output={"summary": "done"})])
            return Answer(text="Noted.")
        queued = RUN_RE.search(text)
        if queued and "run" not in seen:
            seen["run"] = queued.group("run")
        return Answer(text="Done.")

    world.model.rules.append(rule)
    pi = world.pi()
    pi.prompt(PROMPT)
    paused = 0
    for escape in range(1, ESCAPES + 1):
        paused = _escape(pi, seen, escape, paused)
        if escape < ESCAPES and seen["hangs"] == escape:
            pi.prompt("carry on")  # the user talks to the model while the run is paused
    run = seen["run"]
    session = pi.session_file()
    kinds = [m["details"]["kind"] for m in custom_messages(session, AGENT_STEP_TYPE)]
    assert kinds == ["step"], kinds  # no reminder was spent
    assert world.launch(run).status == "running"
    assert paused == ESCAPES

    at = pi.mark()
    pi.send({"type": "prompt", "message": "/workflow resume"})
    pi.wait_record(lambda r: r.get("method") == "notify" and "resumed" in str(r.get("message")),
                   "the resume reply", at)
    wait_until(lambda: world.launch(run).status == "done",
               what=lambda: f"{run} done (now {world.launch(run).status})")
    assert RunReader(world.project / ".wfrun" / "runs").status(run) == "completed"
    kinds = [m["details"]["kind"] for m in custom_messages(session, AGENT_STEP_TYPE)]
    assert kinds == ["step", "resume"], kinds
    assert pi.count(lambda r: r.get("type") == "extension_error") == 0
    assert pi.close() == 0


def _escape(pi: PiRpc, seen: dict[str, Any], escape: int, paused: int) -> int:
    """Press Escape during the model's request #`escape`; the paused notices after it."""
    wait_until(lambda: seen["hangs"] >= escape, what=f"the model's request #{escape}")
    at = pi.mark()
    pi.send({"type": "abort"})
    settled = pi.wait_settled(at)
    assert settled.get("aborted") is True, settled
    # Fixed: wfrun says the run is paused and nothing follows on its own. (Before, a
    # reminder turn started by itself.)
    wait_until(lambda: _paused_notices(pi) > paused or seen["hangs"] > escape,
               what=lambda: "the paused notice or a new turn; the session's step messages: "
               + str([m["details"]["kind"] for m in
                      custom_messages(pi.session_file(), AGENT_STEP_TYPE)]))
    return _paused_notices(pi)


def _paused_notices(pi: PiRpc) -> int:
    return sum(1 for text in pi.notifications() if "paused;" in text)
