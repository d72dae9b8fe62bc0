"""The seed's 8-step scenario through the real Pi CLI (`--mode rpc`) and the extension.

1. the model calls `workflow start` for a valid file workflow;
2. the tool returns a durable queued run id;
3. the workflow source changes inside the initiating turn;
4. activation (after Pi's agent_settled) records `failed`;
5. exactly one follow-up turn carries the safe error;
6. the model corrects the request and calls `workflow start` again (with a `status`
   call in the same message: Pi runs them in parallel, the bridge in order);
7. the new run starts and reaches its first step (an agent step in the session);
8. the failed run stays inspectable by id.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from fakes.openai_server import Answer, Messages, Reply, call, contract_of
from fakes.pi_model import last, text_of
from fakes.seed_workflow import AGENT_WF, RUN_RE
from pi_rpc import VENV_BIN, custom_messages
from pi_world import FAILED_RE, World
from waiting import wait_until

from runner.launch._intents import AGENT_STEP_TYPE, DEFERRED_TURN_TYPE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
PROMPT = "please start the review workflow"


def test_seed_scenario_through_real_pi(world: World) -> None:
    seen: dict[str, Any] = {"followups": []}

    def rule(messages: Messages) -> Reply | None:
        end = last(messages)
        text = text_of(end)
        if end.get("role") == "user":
            if text == PROMPT:  # 1.
                return Answer(calls=[("workflow", {"action": "start", "workflow": "review",
                                                   "input": {"task": "the change"}})])
            failed = FAILED_RE.match(text)
            if failed:  # 5. -> 6.
                seen["followups"].append(failed.groupdict())
                return Answer(calls=[
                    ("workflow", {"action": "status", "runId": failed.group("run")}),
                    ("workflow", {"action": "start", "workflow": "review",
                                  "input": {"task": "the change"}})])
            contract = contract_of([{"role": "user", "content": text}])
            if contract:  # 7.
                seen["step_text"] = text
                return Answer(calls=[call("submit", contract,
                                          output={"summary": "reviewed"})])
            return None
        queued = RUN_RE.search(text)
        if end.get("role") == "tool" and queued and "first" not in seen:
            run = queued.group("run")
            seen["first"] = run
            seen["row_at_reply"] = world.launch(run).status  # 2. durable before the reply
            world.write("review", AGENT_WF.replace("Plan", "Review"))  # 3. inside the turn
            return Answer(text=f"I queued run {run}.")
        return Answer(text="Done.")

    world.model.rules.append(rule)
    pi = world.pi()
    pi.prompt(PROMPT)

    second = wait_until(lambda: _second_start(pi.records, seen.get("first")),
                        what="the corrected start")
    wait_until(lambda: world.launch(second).status == "done",
               what=lambda: f"run {second} done (now {world.launch(second).status})")
    first = seen["first"]
    assert seen["row_at_reply"] == "queued"
    failed = world.launch(first)  # 4.
    assert (failed.status, failed.error_code) == ("failed", "source_changed")
    session = pi.session_file()
    follow_ups = custom_messages(session, DEFERRED_TURN_TYPE)
    assert len(follow_ups) == 1  # 5. exactly one, carrying the safe error
    assert follow_ups[0]["details"]["runId"] == first
    assert seen["followups"] == [{"wf": "review", "run": first,
                                  "reason": failed.error_message}]
    turn_inputs = [text_of(m[-1]) for m in world.model.seen if m[-1].get("role") == "user"]
    assert turn_inputs.count(follow_ups[0]["content"]) == 1
    # 6. both calls of one message answered; the status call saw the failed run.
    results = _tool_results(pi.records)
    assert f"Run {first}: failed (source_changed: {failed.error_message})" in results
    # 7. the new run's first step came into the session and the model answered it.
    (step,) = custom_messages(session, AGENT_STEP_TYPE)
    assert step["details"]["runId"] == second
    assert step["details"]["step"] == "plan"
    assert step["content"].startswith("Review the change.")
    assert seen["step_text"] == step["content"]
    # 8. the failed run stays inspectable: the CLI reads it from the store.
    out = subprocess.run([str(VENV_BIN / "wfrun"), "status", "--json", first],
                         cwd=world.project, capture_output=True, text=True, check=True)
    view = json.loads(out.stdout)
    assert view["status"] == "failed"
    assert view["error"]["code"] == "source_changed"
    # The status widget rendered the failed launch from the store (a view only).
    widgets = [r for r in pi.records if r.get("type") == "extension_ui_request"
               and r.get("method") == "setWidget" and r.get("widgetKey") == "wfrun"]
    assert any(any(first in line and "failed" in line and "source_changed" in line
                   for line in (w.get("widgetLines") or [])) for w in widgets), widgets
    assert pi.count(lambda r: r.get("type") == "extension_error") == 0
    assert pi.close() == 0


def _tool_results(records: list[dict[str, Any]]) -> list[str]:
    return [text_of(r["result"]) for r in records if r.get("type") == "tool_execution_end"]


def _second_start(records: list[dict[str, Any]], first: str | None) -> str | None:
    for r in records:
        if r.get("type") == "tool_execution_end":
            details = (r.get("result") or {}).get("details") or {}
            if details.get("queued") and details.get("runId") != first and first:
                return str(details["runId"])
    return None
