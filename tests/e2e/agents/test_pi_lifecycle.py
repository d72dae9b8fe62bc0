"""Real Pi: activation waits for agent_settled through auto-retry; parallel calls in one
message behave as sequential; the status line; the refusal of a bridge-less start."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
from fakes.openai_server import Answer, Messages, Reply, Status
from fakes.pi_model import last, text_of
from fakes.seed_workflow import RUN_RE
from pi_world import World
from waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

COMPUTE_WF = """
    start: only
    nodes:
      only: {compute: "{{ {'ok': true} }}"}
"""


def test_provider_error_and_auto_retry_nothing_activates_before_agent_settled(
        world: World) -> None:
    world.write("quick", COMPUTE_WF)
    seen: dict[str, Any] = {"statuses": []}

    def rule(messages: Messages) -> Reply | None:
        end = last(messages)
        if end.get("role") == "user":
            return Answer(calls=[("workflow", {"action": "start", "workflow": "quick"})])
        queued = RUN_RE.search(text_of(end))
        if queued is None:
            return Answer(text="Done.")
        run = queued.group("run")
        seen["run"] = run
        seen["statuses"].append(world.launch(run).status)
        if len(seen["statuses"]) == 1:
            return Status(500, "the fake provider fell over mid-turn")
        return Answer(text=f"Queued {run}.")

    world.model.rules.append(rule)
    pi = world.pi(retry=True)
    at = pi.prompt("start quick")
    settled = pi.wait_settled(at)
    retry = pi.wait_record(lambda r: r.get("type") == "auto_retry_start", "auto_retry_start", at)
    ends = [i for i, r in enumerate(pi.records) if r.get("type") == "agent_end"]
    assert len(ends) >= 2, "the failed attempt and the retried one each end a run"
    assert pi.records.index(retry) < pi.records.index(settled)
    run = seen["run"]
    # The retried request came after the failed run's agent_end, yet the launch was
    # still queued: activation waited for agent_settled, not agent_end.
    assert seen["statuses"] == ["queued", "queued"]
    wait_until(lambda: world.launch(run).status == "done",
               what=lambda: f"{run} done (now {world.launch(run).status})")
    assert pi.close() == 0


def test_two_parallel_starts_in_one_message_behave_as_sequential(world: World) -> None:
    world.write("quick", COMPUTE_WF)

    def rule(messages: Messages) -> Reply | None:
        end = last(messages)
        if end.get("role") == "user":
            start = ("workflow", {"action": "start", "workflow": "quick"})
            return Answer(calls=[start, start])
        return Answer(text="Done.")

    world.model.rules.append(rule)
    pi = world.pi()
    at = pi.prompt("start quick twice")
    pi.wait_settled(at)
    ends = [r for r in pi.records[at:] if r.get("type") == "tool_execution_end"]
    assert len(ends) == 2
    ok = [r for r in ends if not r["result"].get("isError")]
    refused = [r for r in ends if r["result"].get("isError")]
    # As if one after the other: the first holds the session's reservation, the
    # second is refused by preflight (no queued row), never two reservations.
    assert len(ok) == 1
    assert len(refused) == 1
    run = ok[0]["result"]["details"]["runId"]
    error = json.loads(text_of(refused[0]["result"]))["error"]
    assert error["code"] == "activation_failed"
    assert error["message"].startswith(f"this session already has workflow run {run} (queued)")
    store = world.store()
    try:
        rows = store.launches.query()
    finally:
        store.close()
    assert [r.run_id for r in rows] == [run]
    wait_until(lambda: world.launch(run).status == "done", what=f"{run} done")
    status = [r for r in pi.records if r.get("type") == "extension_ui_request"
              and r.get("method") == "setStatus" and r.get("statusKey") == "wfrun"]
    assert any("1 queued" in str(r.get("statusText")) for r in status), status
    assert pi.close() == 0


def test_pi_older_than_1_6_is_refused_with_a_clear_message(world: World) -> None:
    def rule(messages: Messages) -> Reply | None:
        return Answer(text="No workflow tool here.")

    world.model.rules.append(rule)
    pi = world.pi(legacy=True)  # Pi 0.73: agent_end fires before auto-retry
    refusal = pi.wait_record(lambda r: r.get("method") == "notify" and
                             r.get("notifyType") == "error", "the refusal")
    assert str(refusal["message"]).startswith(
        "wfrun: Pi 0.73.1 is too old; wfrun needs Pi >= 1.6 (its agent_settled event")
    at = pi.prompt("start quick")
    pi.wait_record(lambda r: r.get("type") == "agent_end", "the turn's end", at)
    tools = [t["function"]["name"] for t in world.server.requests[-1].body.get("tools", [])]
    assert "workflow" not in tools  # no tool, so nothing can be queued unsafely
    assert not (world.project / ".wfrun" / "state").exists()  # no bridge, no store
    pi.close()


def test_workflow_command_reports_and_starts_at_the_idle_boundary(world: World) -> None:
    world.write("quick", COMPUTE_WF)
    pi = world.pi()

    def notified(text: str) -> dict[str, Any]:
        at = pi.mark()
        pi.send({"type": "prompt", "message": text})
        return pi.wait_record(lambda r: r.get("method") == "notify", f"{text}'s reply", at)

    assert notified("/workflow status")["message"] == \
        "no workflow is queued or running in this session"
    bad = notified("/workflow start quick {not json")
    assert (bad["notifyType"], bad["message"]) == (
        "error", "wfrun: /workflow start NAME [JSON]: the input is not valid JSON")
    started = notified("/workflow start quick")
    queued = RUN_RE.search(str(started["message"]))
    assert queued is not None, started
    run = queued.group("run")
    # Typed while idle, no turn follows: the command itself is the boundary.
    wait_until(lambda: world.launch(run).status == "done",
               what=lambda: f"{run} done (now {world.launch(run).status})")
    assert world.server.requests == []  # no model turn was needed
    assert pi.close() == 0


def test_pi_outside_a_wfrun_project_says_so_once_and_offers_no_tool(world: World) -> None:
    shutil.rmtree(world.project / ".wfrun")

    def rule(messages: Messages) -> Reply | None:
        return Answer(text="Fine.")

    world.model.rules.append(rule)
    pi = world.pi()
    error = pi.wait_record(lambda r: r.get("method") == "notify", "the bridge's refusal")
    assert error["notifyType"] == "error"
    assert str(error["message"]).startswith("wfrun: wfrun bridge exited (")
    assert "no .wfrun/ folder in this directory or any parent" in str(error["message"])
    for _ in range(2):
        pi.wait_settled(pi.prompt("hello"))
    tools = [t["function"]["name"] for t in world.server.requests[-1].body.get("tools", [])]
    assert "workflow" not in tools
    assert len(pi.notifications()) == 1  # not once per turn
    assert pi.close() == 0
