"""Crash windows and compaction through the real Claude Code CLI.

The follow-up's crash window: the MCP server appends the follow-up to wfrun's
session log, then dies (SIGKILL) before it resolves the turn intent. The Stop
hook, finding no server, still hands the logged follow-up to the model; the next
process (`claude --resume`) claims the intent again, finds its id in the log and
resolves it without sending it again. Exactly one follow-up either way — also when
Claude Code compacts the conversation (SessionStart source=compact) between the
append and the resolution, because the scan reads wfrun's log, not the
(compacted) transcript.
"""

from __future__ import annotations

from typing import Any

import pytest
from claude_kit import FAILED_RE, TOOL, ClaudeWorld, answer, feedback_texts
from fakes.anthropic_server import Body, Reply, last_turn_results, last_user_text
from fakes.seed_workflow import AGENT_WF, RUN_RE

from runner.launch._intents import DEFERRED_TURN_TYPE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]  # real Claude Code processes


CRASH = {"WFRUN_CRASH_AT": "after_session_append"}


def _resolved_at(cc: ClaudeWorld, sid: str) -> int | None:
    """When the turn intent behind the logged follow-up was resolved (store ms)."""
    (message,) = [m for m in cc.log(sid) if m.custom_type == DEFERRED_TURN_TYPE]
    store = cc.store()
    try:
        intent = store.turn_intents.get(str(message.details["turnIntentId"]))
    finally:
        store.close()
    assert intent is not None
    return intent.resolved_at


def _failing_start_model(cc: ClaudeWorld, seen: dict[str, Any]) -> Any:
    """Start review, change its source inside the turn; on the follow-up, say so."""

    def model(body: Body) -> Reply:
        results = last_turn_results(body)
        text = last_user_text(body)
        if results:
            m = RUN_RE.search(results[0])
            if m and "first" not in seen:
                seen["first"] = m.group("run")
                cc.write("review", AGENT_WF.replace("Plan", "Review"))
            return answer("Queued.")
        if FAILED_RE.search(text):
            seen.setdefault("followup_turns", 0)
            seen["followup_turns"] += 1
            return answer("The start failed; I will fix the source first.")
        if "please start" in text:
            return answer("", (TOOL, {"action": "start", "workflow": "review",
                                      "input": {"task": "t"}}))
        return answer("Nothing to do.")
    return model


def _followups_seen(body: Body) -> int:
    return sum(1 for t in feedback_texts(body) if FAILED_RE.search(t))


def _crash_then_deliver(cc: ClaudeWorld, seen: dict[str, Any]) -> str:
    """Run 1: the server dies right after appending the follow-up; the Stop hook
    delivers it from the log. Returns Claude's session id."""
    cc.write("review", AGENT_WF)
    cc.script(_failing_start_model(cc, seen))
    first = cc.run("please start the review workflow", env=CRASH)
    assert first.code == 0, first.stderr[-2000:]
    sid = first.session_id
    record = cc.launch(seen["first"])
    assert (record.status, record.error_code) == ("failed", "source_changed")
    (message,) = [m for m in cc.log(sid) if m.custom_type == DEFERRED_TURN_TYPE]
    assert message.delivered  # the hook handed it over although the server was dead
    assert seen["followup_turns"] == 1
    assert _resolved_at(cc, sid) is None  # still claimed by the dead server
    return sid


def test_kill_after_append_then_restart_yields_exactly_one_follow_up(cc: ClaudeWorld) -> None:
    seen: dict[str, Any] = {}
    sid = _crash_then_deliver(cc, seen)
    cc.clock.advance(120)  # the dead server's delivery claim expires
    again = cc.run("continue", resume=sid)
    assert again.code == 0, again.stderr[-2000:]
    assert again.session_id == sid
    assert _resolved_at(cc, sid) is not None  # resolved from the log, not sent again
    assert [m.custom_type for m in cc.log(sid)].count(DEFERRED_TURN_TYPE) == 1
    assert seen["followup_turns"] == 1
    assert _followups_seen(cc.server.conversation()[-1].body) == 1


def test_compaction_between_append_and_resolution_yields_exactly_one(cc: ClaudeWorld) -> None:
    seen: dict[str, Any] = {}
    sid = _crash_then_deliver(cc, seen)
    compacted: list[float] = []
    base = cc.server.script

    def model(body: Body) -> Reply:
        if not compacted and "compact" in str(body).lower() and "summary" in str(body).lower():
            # The compaction's summary request: only now may the dead server's
            # claim expire, so the resolution happens at the compact start.
            cc.clock.advance(120)
            compacted.append(cc.clock.now())
            return answer("Summary: the user asked to start review; it failed to start.")
        return base(body)

    cc.script(model)
    done = cc.run("/compact", resume=sid)
    assert done.code == 0, done.stderr[-2000:]
    assert compacted, "Claude Code did not compact"
    hooks = [e.get("hook_name") for e in done.events if e.get("subtype") == "hook_started"]
    assert hooks[:2] == ["SessionStart:resume", "SessionStart:compact"], hooks
    assert any(e.get("subtype") == "compact_boundary" for e in done.events)
    # Resolved only after the summary request moved the clock: at the compact start
    # (the resume start found the dead server's claim still live and left it).
    resolved = _resolved_at(cc, sid)
    assert resolved is not None
    assert resolved >= int(compacted[0] * 1000)
    assert [m.custom_type for m in cc.log(sid)].count(DEFERRED_TURN_TYPE) == 1
    assert seen["followup_turns"] == 1
    # After the compaction the model is not handed the follow-up a second time.
    later = cc.run("what now?", resume=sid)
    assert later.code == 0, later.stderr[-2000:]
    assert seen["followup_turns"] == 1
