"""The seed's 8-step scenario through the real Claude Code CLI (`claude -p`).

1. the model calls `workflow start` (as mcp__wfrun__workflow) for a file workflow;
2. the tool returns a durable queued run id;
3. the test changes the workflow source before the initiating turn settles;
4. activation (at the Stop hook) records `failed`;
5. exactly one follow-up turn (the Stop hook's additional context) carries the safe error;
6. the model corrects the request and calls `workflow start` again;
7. the new run starts and reaches its first workflow step (the step's contract
   arrives as the next block; the model submits it);
8. the failed run stays inspectable by id.

Claude Code is set up only as docs/hosts.md says (`wfrun integrate claude-code`, no
--mcp-config, no --allowedTools), and the scenario also runs five times with every
core busy: the tool must be there on the first turn and allowed every time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from claude_kit import FAILED_RE, TOOL, ClaudeWorld, Result, answer, feedback_texts
from fakes.anthropic_server import Body, Reply, last_turn_results, last_user_text, tool_names
from fakes.seed_workflow import AGENT_WF, RUN_RE

from runner.engine._agent import CONTRACT_RE
from runner.launch._intents import AGENT_STEP_TYPE, DEFERRED_TURN_TYPE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]  # real Claude Code processes



def test_seed_scenario_through_claude_code(cc: ClaudeWorld) -> None:
    seed_scenario(cc, cc.run)


@pytest.mark.parametrize("attempt", range(1, 6))
def test_seed_scenario_with_every_core_busy(cc: ClaudeWorld, busy_cores: int,
                                            attempt: int) -> None:
    seed_scenario(cc, cc.run)


@pytest.mark.parametrize("attempt", range(1, 6))
def test_seed_scenario_through_the_agent_sdk_with_every_core_busy(
        cc: ClaudeWorld, busy_cores: int, attempt: int) -> None:
    seed_scenario(cc, cc.run_sdk)


def seed_scenario(cc: ClaudeWorld, run: Callable[[str], Result]) -> None:
    cc.write("review", AGENT_WF)
    seen: dict[str, Any] = {"followups": [], "contracts": []}

    def model(body: Body) -> Reply:
        assert TOOL in tool_names(body), tool_names(body)
        results = last_turn_results(body)
        text = last_user_text(body)
        if results:
            first = RUN_RE.search(results[0])
            if first and "first" not in seen:
                seen["first"] = first.group("run")
                seen["row_at_reply"] = cc.launch(seen["first"]).status
                cc.write("review", AGENT_WF.replace("Plan", "Review"))  # 3. inside the turn
                return answer(f"Queued {seen['first']}.")
            if any(RUN_RE.search(r) for r in results) and "second" not in seen:
                seen["second"] = next(m.group("run") for r in results
                                      if (m := RUN_RE.search(r)))
                seen["status_reply"] = results[0]
                return answer("Started again.")
            return answer("Submitted.")
        contract = CONTRACT_RE.search(text)
        if contract:
            seen["contracts"].append(contract.groupdict())
            return answer("", (TOOL, {"action": "submit", "step": contract["step"],
                                      "attempt": contract["attempt"],
                                      "output": {"summary": "planned"}}))
        failed = FAILED_RE.search(text)
        if failed:
            seen["followups"].append(failed.groupdict())
            # 6. inspect, then start again, in one message (Claude runs them in parallel)
            return answer("", (TOOL, {"action": "status", "runId": failed["run"]}),
                          (TOOL, {"action": "start", "workflow": "review",
                                  "input": {"task": "the change"}}))
        if "please start" in text:
            return answer("", (TOOL, {"action": "start", "workflow": "review",
                                      "input": {"task": "the change"}}))
        return answer("Nothing else to do.")

    cc.script(model)
    result = run("please start the review workflow")
    assert result.code == 0, result.stderr[-2000:]
    # The server answered within Claude's wait, and every call was allowed.
    (init,) = [e for e in result.events if e.get("subtype") == "init"]
    assert [(s["name"], s["status"]) for s in init["mcp_servers"]] == [("wfrun", "connected")]
    (final,) = [e for e in result.events if e.get("type") == "result"]
    assert final["permission_denials"] == []

    first = seen["first"]
    assert seen["row_at_reply"] == "queued"  # 2. durable before the model read the reply
    failed = cc.launch(first)
    assert (failed.status, failed.error_code) == ("failed", "source_changed")  # 4.
    # 5. exactly one follow-up, with the safe error, and the model saw it exactly once
    assert seen["followups"] == [{"wf": "review", "run": first,
                                  "reason": failed.error_message.rstrip(".")}]
    last_body = cc.server.conversation()[-1].body
    follow_texts = [t for t in feedback_texts(last_body) if FAILED_RE.search(t)]
    assert len(follow_texts) == 1, follow_texts
    assert TOOL in follow_texts[0]  # it names the tool the model must call
    # 15. a hand-over reads as wfrun's message, not as a failing hook
    assert "error" not in follow_texts[0].split("Workflow review failed")[0].lower(), \
        follow_texts[0]
    assert "additional context" in follow_texts[0], follow_texts[0]
    log = cc.log(result.session_id)
    assert [m.custom_type for m in log].count(DEFERRED_TURN_TYPE) == 1
    assert all(m.delivered for m in log)
    # 6.-7. the corrected start got a new id, reached its first step and finished it
    second = seen["second"]
    assert second != first
    assert "failed" in seen["status_reply"]
    assert "source_changed" in seen["status_reply"]
    assert [c["step"] for c in seen["contracts"]] == ["plan"]
    assert [m.custom_type for m in log].count(AGENT_STEP_TYPE) == 1
    assert cc.launch(second).status in ("running", "done")
    # 8. the failed run stays inspectable by id
    shown = cc.wfrun("status", first, "--json")
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["status"] == "failed"
    assert view["error"]["code"] == "source_changed"
