"""The seed's 8-step scenario and its crash window through a real `wfrun bridge` process.

The client side is tests/fakes/bridge_client.py (its own session log, real pipes);
the scripted model lives in the client, as a real agent runtime's would.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bridge_world import Agent, Project
from fakes.bridge_client import BridgeError
from fakes.seed_workflow import AGENT_WF

from runner.clock import CLOCK_FILE_ENV, FileClock
from runner.engine._agent import CONTRACT_RE
from runner.launch._intents import AGENT_STEP_TYPE, DEFERRED_TURN_TYPE

pytestmark = pytest.mark.timeout(60)
FAILED_RE = re.compile(
    r"Workflow review failed to start \(run (?P<run>review-[\w]+-[0-9a-f]{8})\): (?P<reason>.+)"
    r"\. Inspect the error and call workflow start again only after you correct the cause\.")


def status_json(root: Path, run_id: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "runner", "--project", str(root), "status",
                           "--json", run_id], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def test_bridge_seed_scenario_source_change_one_follow_up_and_corrected_start(
        project: Project) -> None:
    client = project.bridge()
    assert client.request("session/start", {"reason": "startup"}) == {
        "quiet": True, "turnRequested": False}
    seen: dict[str, Any] = {}

    def model(text: str, replies: list[dict[str, Any]]) -> list[dict[str, Any]] | str:
        if text.startswith("please") and not replies:
            return [{"action": "start", "workflow": "review", "input": {"task": "the change"}}]
        if text.startswith("please"):
            run_id = replies[0]["details"]["runId"]
            seen["first"] = run_id
            with project.store() as store:  # 2. durable before the model read the reply
                seen["row_at_reply"] = store.launches.get(run_id).status  # type: ignore[union-attr]
            project.write("review", AGENT_WF.replace("Plan", "Review"))  # 3. source changes
            return f"I queued run {run_id}."
        failed = FAILED_RE.search(text)
        if failed and not replies:
            seen.setdefault("followups", []).append(failed.groupdict())
            # 6. inspect, then start again: one message, two parallel tool calls
            return [{"action": "status", "runId": failed.group("run")},
                    {"action": "start", "workflow": "review", "input": {"task": "the change"}}]
        contract = CONTRACT_RE.search(text)
        if contract and not replies:
            seen["step_text"] = text
            return [{"action": "submit", "step": contract.group("step"),
                     "attempt": contract.group("attempt"), "output": {"summary": "done"}}]
        if replies:
            seen.setdefault("replies", []).extend(replies)
        return "ok"

    agent = Agent(client, model)
    agent.prompt("please start the review workflow")

    first = seen["first"]
    assert seen["row_at_reply"] == "queued"
    with project.store() as store:
        failed = store.launches.get(first)
        assert failed is not None
        assert failed.status == "failed"  # 4.
        assert failed.error_code == "source_changed"
        # 5. exactly one follow-up, carrying the safe error, read by exactly one turn
        (follow,) = client.log.custom(DEFERRED_TURN_TYPE)
        assert follow["details"]["runId"] == first
        assert seen["followups"] == [{"run": first, "reason": failed.error_message}]
        assert [t for t in agent.inputs if FAILED_RE.search(t)] == [follow["content"]]
        # 6.-7. a new run id, started after the follow-up turn, reached its first step
        status_reply, start_reply = seen["replies"][:2]
        assert status_reply["content"] == (
            f"Run {first}: failed (source_changed: {failed.error_message})")
        second = start_reply["details"]["runId"]
        assert start_reply["details"]["queued"] is True
        assert second != first
        (step,) = client.log.custom(AGENT_STEP_TYPE)
        assert step["details"]["runId"] == second
        assert step["details"]["step"] == "plan"
        assert step["content"].startswith("Review the change.")
        assert seen["step_text"] == step["content"]
        done = store.launches.get(second)
        assert done is not None
        assert done.status == "done"
    # 8. the failed run stays inspectable by id
    view = status_json(project.root, first)
    assert view["status"] == "failed"
    assert view["error"]["code"] == "source_changed"
    assert client.close() == 0
    assert client.protocol_errors == []


def test_bridge_sigkill_after_follow_up_append_then_restart_sends_exactly_one(
        project: Project, tmp_path: Path) -> None:
    clock = FileClock.create(tmp_path / "clock")
    env = {CLOCK_FILE_ENV: clock.path}
    client = project.bridge(env={**env, "WFRUN_CRASH_AT": "after_session_append"})
    client.request("session/start", {"reason": "startup"})
    client.request("turn/started")
    reply = client.tool({"action": "start", "workflow": "review", "input": {"task": "x"}})
    run_id = reply["details"]["runId"]
    project.write("review", AGENT_WF.replace("Plan", "Review"))
    with pytest.raises(BridgeError, match="the bridge exited"):
        client.request("turn/settled", {"aborted": False})  # appends, then SIGKILL
    assert client.proc is not None
    assert client.proc.wait(30) == -9
    (follow,) = client.log.custom(DEFERRED_TURN_TYPE)
    intent_id = follow["details"]["turnIntentId"]
    with project.store() as store:
        intent = store.turn_intents.get(intent_id)
        assert intent is not None
        assert intent.pending  # appended, never resolved
        assert intent.delivery_claim_token is not None

    again = project.bridge(env=env)  # a new process, the same session log and store
    assert again.request("session/start", {"reason": "resume"})["turnRequested"] is False
    assert len(again.log.custom(DEFERRED_TURN_TYPE)) == 1  # the claim is still held
    clock.advance(31)  # the dead bridge's delivery claim expires
    again.request("turn/started")
    settled = again.request("turn/settled", {"aborted": False})
    assert settled["turnRequested"] is False  # found in the log: nothing sent again
    assert len(again.log.custom(DEFERRED_TURN_TYPE)) == 1
    assert [c["method"] for c in again.host_calls].count("host/appendMessage") == 0
    with project.store() as store:
        intent = store.turn_intents.get(intent_id)
        assert intent is not None
        assert not intent.pending
        assert intent.resolution == "fallback"
        record = store.launches.get(run_id)
        assert record is not None
        assert record.status == "failed"
    assert again.close() == 0


def test_a_compacted_view_after_a_kill_between_append_and_resolve_sends_nothing_twice(
        project: Project, tmp_path: Path) -> None:
    """Issue 33 item 13: de-duplication keeps its own durable record, so an adapter
    that returns only the compacted view (the follow-up summarized away) does not get
    the follow-up a second time."""
    clock = FileClock.create(tmp_path / "clock")
    env = {CLOCK_FILE_ENV: clock.path}
    client = project.bridge(env={**env, "WFRUN_CRASH_AT": "after_session_append"})
    client.request("session/start", {"reason": "startup"})
    client.request("turn/started")
    reply = client.tool({"action": "start", "workflow": "review", "input": {"task": "x"}})
    run_id = reply["details"]["runId"]
    project.write("review", AGENT_WF.replace("Plan", "Review"))
    with pytest.raises(BridgeError, match="the bridge exited"):
        client.request("turn/settled", {"aborted": False})  # appends, then SIGKILL
    assert len(client.log.custom(DEFERRED_TURN_TYPE)) == 1
    again = project.bridge(env=env)
    again.view_from = len(again.log.snapshot())  # compaction kept none of it
    again.request("session/start", {"reason": "compact"})
    clock.advance(31)  # the dead bridge's delivery claim expires
    again.request("turn/started")
    settled = again.request("turn/settled", {"aborted": False})
    assert settled["turnRequested"] is False
    assert len(again.log.custom(DEFERRED_TURN_TYPE)) == 1  # not sent again
    with project.store() as store:
        assert store.turn_intents.list_pending(run_id) == []  # resolved, not resent
    assert again.close() == 0
