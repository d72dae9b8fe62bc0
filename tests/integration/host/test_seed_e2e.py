"""The seed's end-to-end scenario through the reference host and a scripted model.

1. the model calls `workflow start` for a valid file workflow;
2. the tool returns a durable queued run id;
3. the test changes the workflow source before the initiating turn settles;
4. activation records `failed`;
5. one follow-up model turn carries the safe error;
6. the model corrects the request and calls `workflow start` again;
7. the new run starts and reaches its first workflow step;
8. the failed run stays inspectable by id.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from harness import AGENT_WF, Scripted, Session, on_user, start_call, submit_steps, wfrun

from runner.engine._agent import CONTRACT_RE
from runner.host.session._reference import ModelView, ToolCall
from runner.launch._intents import AGENT_STEP_TYPE, DEFERRED_TURN_TYPE

pytestmark = pytest.mark.timeout(20)
FAILED_RE = re.compile(
    r"^Workflow review failed to start \(run (?P<run>review-[\w]+-[0-9a-f]{8})\): (?P<reason>.+)"
    r"\. Inspect the error and call workflow start again only after you correct the cause\.$")


def test_seed_e2e_source_change_failure_follow_up_and_corrected_start(
        session: Callable[..., Session]) -> None:
    holder: list[Session] = []
    observed: dict[str, Any] = {}

    def change_source_before_settle(view: ModelView) -> Any:
        reply = view.last_tool_reply
        if reply is None or reply.details.get("action") != "start" or "first" in observed:
            return None
        s = holder[0]
        observed["first"] = reply.details["runId"]
        observed["row_at_reply"] = s.launch(reply.details["runId"]).status
        s.write_workflow("review", AGENT_WF.replace("Plan", "Review"))  # 3. source changes
        return f"I queued run {reply.details['runId']}."

    def correct_and_restart(view: ModelView) -> Any:
        m = FAILED_RE.match(view.last_user_text)
        if view.last_tool_reply is not None or m is None:
            return None
        observed.setdefault("followups", []).append(m.groupdict())
        # 6. the model inspects the failed run, then starts again now that it knows why.
        return [ToolCall("workflow", {"action": "status", "runId": m.group("run")}),
                start_call("review", "the change")]

    def stop_at_first_step(view: ModelView) -> Any:
        found = list(CONTRACT_RE.finditer(view.last_user_text))
        if view.last_tool_reply is None and found and "step_text" not in observed:
            observed["step_text"] = view.last_user_text
        return None

    model = Scripted(on_user("^please", start_call("review", "the change")),
                     change_source_before_settle, correct_and_restart, stop_at_first_step,
                     submit_steps())
    s = session(model, {"review": AGENT_WF})
    holder.append(s)
    s.host.prompt("please start the review workflow")
    s.settle()

    first = observed["first"]
    assert observed["row_at_reply"] == "queued"  # 2. durable before the reply was read
    failed = s.launch(first)
    assert failed.status == "failed"
    assert failed.error_code == "source_changed"
    (follow,) = s.messages(DEFERRED_TURN_TYPE)  # 5. exactly one follow-up turn
    assert follow.details["runId"] == first
    assert observed["followups"] == [{"run": first, "reason": failed.error_message}]
    first_turn_texts = [v.last_user_text for v in model.views if v.last_tool_reply is None]
    assert first_turn_texts.count(follow.content) == 1
    # 6.-7. a new run id, started after the follow-up turn, reached its first agent step.
    starts = [e.details for e in s.tool_results() if e.details.get("queued")]
    assert next(d["runId"] for d in starts) == first
    second = starts[1]["runId"]
    assert second != first
    step = s.messages(AGENT_STEP_TYPE)[0]
    assert step.details == {"runId": second, "step": "plan", "attempt": step.details["attempt"],
                            "kind": "step"}
    assert step.content.startswith("Review the change.")
    assert observed["step_text"] == step.content
    assert s.launch(second).status == "done"
    # 8. the failed run stays inspectable by id: tool status, and the CLI.
    status = next(e for e in s.tool_results() if e.details.get("action") == "status")
    assert status.content == f"Run {first}: failed (source_changed: {failed.error_message})"
    out = wfrun(s.root, "status", "--json", first)
    view = json.loads(out.stdout)
    assert view["status"] == "failed"
    assert view["error"]["code"] == "source_changed"
    assert view["run"] is None  # no bundle was ever built for it
