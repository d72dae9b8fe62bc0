"""Real Pi: a crash after the follow-up was appended but before its intent was resolved,
then a Pi restart or a compaction, still yields exactly one follow-up.

The bridge SIGKILLs itself right after Pi acknowledged the follow-up's append
(`WFRUN_CRASH_AT=after_session_append`; the extension acknowledges only once the
message is in the session file). The store's clock is a file shared with the
bridges, so the dead bridge's delivery claim expires exactly when the test says.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakes.openai_server import Answer, Messages, Reply
from fakes.pi_model import last, text_of
from fakes.seed_workflow import AGENT_WF, RUN_RE
from pi_rpc import PiRpc, custom_messages
from pi_world import FAILED_RE, World
from waiting import wait_until

from runner.clock import CLOCK_FILE_ENV, FileClock
from runner.launch._intents import DEFERRED_TURN_TYPE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]
PROMPT = "please start the review workflow"


def _script(world: World, seen: dict[str, Any]) -> None:
    def rule(messages: Messages) -> Reply | None:
        end = last(messages)
        text = text_of(end)
        if end.get("role") == "user":
            if text == PROMPT:
                return Answer(calls=[("workflow", {"action": "start", "workflow": "review",
                                                   "input": {"task": "x"}})])
            if FAILED_RE.match(text):
                seen["follow_up_turns"] = seen.get("follow_up_turns", 0) + 1
                return Answer(text="Understood; I will not retry yet.")
            return None
        queued = RUN_RE.search(text)
        if end.get("role") == "tool" and queued and "run" not in seen:
            seen["run"] = queued.group("run")
            world.write("review", AGENT_WF.replace("Plan", "Review"))  # fails activation
            return Answer(text="Queued.")
        return None

    world.model.rules.append(rule)


def _crash_after_append(world: World, clock: FileClock) -> tuple[PiRpc, Path, str]:
    """Run until the follow-up is in the session file and its bridge is dead."""
    seen: dict[str, Any] = {}
    _script(world, seen)
    pi = world.pi(env={CLOCK_FILE_ENV: clock.path, "WFRUN_CRASH_AT": "after_session_append"})
    session = pi.session_file()
    pi.prompt(PROMPT)
    (follow,) = wait_until(lambda: custom_messages(session, DEFERRED_TURN_TYPE),
                           what="the follow-up in the session file")
    intent_id = follow["details"]["turnIntentId"]
    wait_until(lambda: any("bridge was killed" in n for n in pi.notifications()),
               what=lambda: f"the bridge's crash (notifications: {pi.notifications()})")
    intent = world.intent(intent_id)
    assert intent.pending  # appended, never resolved
    assert intent.delivery_claim_token is not None
    assert world.launch(seen["run"]).status == "failed"
    return pi, session, intent_id


def _assert_exactly_one(world: World, session: Path, intent_id: str) -> None:
    wait_until(lambda: not world.intent(intent_id).pending,
               what="the intent resolved by the new bridge's log scan")
    assert world.intent(intent_id).resolution == "fallback"
    sent = [e for e in custom_messages(session, DEFERRED_TURN_TYPE)
            if e["details"]["turnIntentId"] == intent_id]
    assert len(sent) == 1
    turn_inputs = [text_of(m[-1]) for m in world.model.seen if m[-1].get("role") == "user"]
    assert turn_inputs.count(sent[0]["content"]) == 1


def test_pi_killed_after_the_follow_up_append_restart_sends_exactly_one(
        world: World, tmp_path: Path) -> None:
    clock = FileClock.create(tmp_path / "clock")
    pi, session, intent_id = _crash_after_append(world, clock)
    pi.kill()  # Pi and everything it started, mid-follow-up
    again = world.pi(session_file=session, env={CLOCK_FILE_ENV: clock.path})
    assert again.session_file() == session
    clock.advance(31)  # the dead bridge's delivery claim expires
    at = again.prompt("anything new?")
    again.wait_settled(at)
    _assert_exactly_one(world, session, intent_id)
    assert again.close() == 0


def test_compaction_between_append_and_resolution_still_one_follow_up(
        world: World, tmp_path: Path) -> None:
    clock = FileClock.create(tmp_path / "clock")
    pi, session, intent_id = _crash_after_append(world, clock)
    second = wait_until(lambda: _nth_index(pi.records, "agent_start", 2),
                        what="the follow-up turn's start")
    pi.wait_settled(second)
    pi.send({"type": "compact"})  # the follow-up now lives only before the compaction
    entries = _entries(session)
    (compaction,) = [e for e in entries if e.get("type") == "compaction"]
    ids = [e.get("id") for e in entries]
    follow_at = next(i for i, e in enumerate(entries)
                     if (e.get("details") or {}).get("turnIntentId") == intent_id)
    assert follow_at < ids.index(compaction["firstKeptEntryId"])  # summarized away
    clock.advance(31)
    at = pi.prompt("anything new?")  # the extension's new bridge resolves at this settle
    pi.wait_settled(at)
    _assert_exactly_one(world, session, intent_id)
    assert pi.close() == 0


def _nth_index(records: list[dict[str, Any]], kind: str, n: int) -> int | None:
    """The index of the n-th record of type `kind` (1-based), if there is one yet."""
    found = [i for i, r in enumerate(list(records)) if r.get("type") == kind]
    return found[n - 1] if len(found) >= n else None


def _entries(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
