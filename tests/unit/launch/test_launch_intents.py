"""Turn intents: deterministic ids, the facts they carry and the texts that resolve them."""

from __future__ import annotations

import hashlib
import json

import pytest

from runner.launch._intents import (
    FACTS_SCHEMA,
    MAX_REASON_BYTES,
    fallback_text,
    intent_id,
    launch_failed_text,
    message_id,
    new_intent,
    source_event_id,
)

pytestmark = pytest.mark.timeout(10)


def _sha(parts: list[object]) -> str:
    return hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).hexdigest()


def test_ids_are_sha256_of_their_parts() -> None:
    src = source_event_id("r1", "launch_failed", "$launch", None, "launch_failed")
    assert src == "turn-source:" + _sha(["r1", "launch_failed", "$launch", "$none",
                                         "launch_failed"])
    iid = intent_id("s1", "r1", src, "$launch", None, "launch_failed")
    assert iid == "deferred-turn:" + _sha(["s1", "r1", src, "$launch", "$none",
                                           "launch_failed"])
    assert message_id(iid, "fallback") == "turn-message:" + _sha([iid, "fallback"])
    assert source_event_id("r1", "x", None, None, "failed").startswith("turn-source:")
    assert _sha(["r1", "x", "$run", "$none", "failed"]) in source_event_id("r1", "x", None, None,
                                                                           "failed")


def test_the_same_cause_gives_the_same_intent_and_any_other_part_a_new_one() -> None:
    base = {"session_id": "s1", "run_id": "r1", "workflow": "w", "cause": "launch_failed",
            "source": "launch_failed", "state": "failed_to_start", "reason": "boom",
            "node": "$launch"}
    first = new_intent(**base)  # type: ignore[arg-type]
    assert new_intent(**base).intent_id == first.intent_id  # type: ignore[arg-type]
    for key, other in (("session_id", "s2"), ("run_id", "r2"), ("cause", "failed"),
                       ("source", "recovery"), ("node", "plan")):
        changed = new_intent(**{**base, key: other})  # type: ignore[arg-type]
        assert changed.intent_id != first.intent_id, key
    # The reason is a fact, not part of the identity.
    assert new_intent(**{**base, "reason": "other"}).intent_id == first.intent_id  # type: ignore[arg-type]
    assert first.eligible
    assert first.target_session_id == "s1"
    assert first.node_id == "$launch"
    assert set(first.fallback_facts) == {"schema", "workflowName", "runId", "observedState",
                                         "cause", "nodeId", "attemptId", "reason", "handoff"}
    assert first.fallback_facts["schema"] == FACTS_SCHEMA


def test_reason_is_bounded() -> None:
    big = new_intent(session_id="s", run_id="r", workflow="w", cause="failed", source="x",
                     state="failed", reason="é" * 10_000)
    reason = str(big.fallback_facts["reason"])
    assert len(reason.encode()) <= MAX_REASON_BYTES
    assert set(reason) == {"é"}


def test_texts() -> None:
    assert launch_failed_text("autoimplement", "autoimplement-1", "the source changed") == (
        "Workflow autoimplement failed to start (run autoimplement-1): the source changed. "
        "Inspect the error and call workflow start again only after you correct the cause.")
    failed = new_intent(session_id="s", run_id="r1", workflow="w", cause="launch_failed",
                        source="launch_failed", state="failed_to_start", reason="bad input")
    assert fallback_text(failed.fallback_facts) == launch_failed_text("w", "r1", "bad input")
    ended = new_intent(session_id="s", run_id="r1", workflow="w", cause="failed",
                       source="run_failed", state="failed", reason="step plan failed")
    assert fallback_text(ended.fallback_facts).startswith(
        "Workflow w ended with state failed (run r1): step plan failed. Inspect the durable "
        "workflow state")
    lost = new_intent(session_id="s", run_id="r1", workflow="w", cause="claim_lost",
                      source="claim_lost", state="handed_off", reason="", eligible=False,
                      handoff=True)
    assert not lost.eligible
    assert fallback_text(lost.fallback_facts).startswith(
        "Workflow w (run r1) was handed to another runner.")


def test_an_outcome_reported_by_a_host_names_the_run_and_what_to_do() -> None:
    # A session's run that ended under `wfrun host` after the session handed it over.
    done = new_intent(session_id="s", run_id="r1", workflow="w", cause="presentation",
                      source="run_presentation", state="completed", reason="")
    assert fallback_text(done.fallback_facts) == (
        "Workflow w completed (run r1) while this session was away. Call workflow status "
        "with runId r1 for its outcome.")
    waiting = new_intent(session_id="s", run_id="r1", workflow="w", cause="presentation",
                         source="run_presentation", state="waiting", reason="")
    assert fallback_text(waiting.fallback_facts).startswith(
        "Workflow w (run r1) is waiting for an answer. To continue it, call the workflow "
        "tool with action 'answer', runId 'r1'")
