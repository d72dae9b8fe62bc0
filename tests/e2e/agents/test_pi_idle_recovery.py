"""Real Pi: the whole Pi process group is killed mid-step (issue 33, item 10).

Pi, its `wfrun bridge` and everything they started die while the model works on
a workflow step (the fake model holds its answer). Pi started again on the same
session and left idle (no user message) takes the run over at once and hands the
model the step again as a resumed step, which the model submits: the run ends.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fakes.openai_server import Answer, Messages, Reply, call, contract_of
from fakes.pi_model import last, text_of
from fakes.seed_workflow import RUN_RE
from pi_rpc import custom_messages
from pi_world import World
from waiting import wait_until

from runner.launch._intents import AGENT_STEP_TYPE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]
PROMPT = "please start the review workflow"


def test_pi_group_killed_mid_step_restart_idle_recovers_without_a_user_message(
        world: World) -> None:
    at_step, release = threading.Event(), threading.Event()
    seen: dict[str, Any] = {"contracts": []}

    def rule(messages: Messages) -> Reply | None:
        end = last(messages)
        text = text_of(end)
        if end.get("role") == "user":
            if text == PROMPT:
                return Answer(calls=[("workflow", {"action": "start", "workflow": "review",
                                                   "input": {"task": "x"}})])
            contract = contract_of([{"role": "user", "content": text}])
            if contract:
                seen["contracts"].append(text)
                if len(seen["contracts"]) == 1:
                    at_step.set()  # mid-step: the test kills Pi's whole group now
                    release.wait(60)
                    return Answer(text="(never read)")
                return Answer(calls=[call("submit", contract, output={"summary": "done"})])
            return None
        queued = RUN_RE.search(text)
        if end.get("role") == "tool" and queued and "run" not in seen:
            seen["run"] = queued.group("run")
            return Answer(text="Queued.")
        return Answer(text="Done.")

    world.model.rules.append(rule)
    pi = world.pi()
    session = pi.session_file()
    pi.prompt(PROMPT)
    assert at_step.wait(60), "the step never reached the model"
    pi.kill()  # SIGKILL to Pi's process group: Pi, the bridge, the controller child
    release.set()
    run_id = seen["run"]
    held = world.launch(run_id)
    assert held.status == "running"  # its dead runner's lease still runs
    again = world.pi(session_file=session)  # started again, and nothing typed
    wait_until(lambda: world.launch(run_id).status == "done", timeout=60,
               what=lambda: f"run {run_id} recovered (now {world.launch(run_id).status})")
    kinds = [m["details"]["kind"] for m in custom_messages(session, AGENT_STEP_TYPE)]
    assert kinds == ["step", "resume"]
    users = [text_of(m[-1]) for m in world.model.seen if m[-1].get("role") == "user"]
    assert users.count(PROMPT) == 1  # no user message after the restart
    assert again.close() == 0
