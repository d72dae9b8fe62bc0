"""Two `workflow` calls in one model message, through the real Claude Code CLI.

Claude Code runs the tool calls of one assistant message concurrently; `wfrun mcp`
serializes them, so they behave exactly as if made one after the other: the first
start queues its run and takes the session's one reservation, the second is
refused by the preflight with the reservation's own message (not a store conflict),
and only one launch row exists.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from claude_kit import TOOL, ClaudeWorld, answer
from fakes.anthropic_server import Body, Reply, last_turn_results, last_user_text
from fakes.seed_workflow import AGENT_WF, RUN_RE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]  # real Claude Code processes


RESERVED_RE = re.compile(r"this session already has workflow run (?P<run>[\w-]+) \(queued\)")


def test_two_starts_in_one_message_behave_as_sequential(cc: ClaudeWorld) -> None:
    cc.write("alpha", AGENT_WF)
    cc.write("beta", AGENT_WF)
    seen: dict[str, Any] = {}

    def model(body: Body) -> Reply:
        results = last_turn_results(body)
        if results:
            seen.setdefault("results", results)
            return answer("Done.")
        if "two" in last_user_text(body):
            return answer("", (TOOL, {"action": "start", "workflow": "alpha",
                                      "input": {"task": "a"}}),
                          (TOOL, {"action": "start", "workflow": "beta",
                                  "input": {"task": "b"}}))
        return answer("Nothing else.")

    cc.script(model)
    result = cc.run("start two workflows at once")
    assert result.code == 0, result.stderr[-2000:]
    assert len([u for u in result.tool_uses() if u["name"] == TOOL]) == 2
    results = seen["results"]
    assert len(results) == 2
    queued = [m.group("run") for r in results if (m := RUN_RE.search(r))]
    refused = [m.group("run") for r in results if (m := RESERVED_RE.search(r))]
    assert len(queued) == 1, results
    assert refused == queued, results  # the refusal names the run that won
    rows = cc.launches()
    assert [r.run_id for r in rows] == queued
