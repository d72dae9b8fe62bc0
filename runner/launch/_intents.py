"""Turn intents: deterministic ids and the factual messages that resolve them.

An intent id is a hash of what caused it, so the same crash-retried cause always
maps to the same id, and the session log can be scanned for it before any
delivery retry (DESIGN §6; pi-workflows §7).
"""

from __future__ import annotations

import hashlib
import json

from runner._safety import bound
from runner.store import NewTurnIntent, TurnCause

FACTS_SCHEMA = "wfrun.deferred-turn-facts.v1"
MESSAGE_SCHEMA = "wfrun.deferred-turn-message.v1"
DEFERRED_TURN_TYPE = "wfrun-deferred-turn"
AGENT_STEP_TYPE = "wfrun-agent-step"
PRESENTATION_TYPE = "wfrun-presentation"
NOTIFICATION_TYPE = "wfrun-notification"
MAX_REASON_BYTES = 8192


def workflow_name(ref: str) -> str:
    """The name a workflow ref shows in messages and intents (its file name, no suffix)."""
    name = ref.rsplit("/", 1)[-1]
    for suffix in (".yaml", ".yml"):
        name = name.removesuffix(suffix)
    return name


def _digest(parts: list[object]) -> str:
    return hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).hexdigest()


def source_event_id(run_id: str, source: str, node: str | None, attempt: str | None,
                    cause: str) -> str:
    return "turn-source:" + _digest([run_id, source, node or "$run", attempt or "$none", cause])


def intent_id(session_id: str, run_id: str, source_event: str, node: str | None,
              attempt: str | None, cause: str) -> str:
    return "deferred-turn:" + _digest([session_id, run_id, source_event, node or "$run",
                                       attempt or "$none", cause])


def message_id(intent: str, resolution: str) -> str:
    return "turn-message:" + _digest([intent, resolution])


def launch_failed_text(workflow: str, run_id: str, reason: str) -> str:
    return (f"Workflow {workflow} failed to start (run {run_id}): {reason}. Inspect the error "
            "and call workflow start again only after you correct the cause.")


def waiting_text(workflow: str, run_id: str, node: str | None, summary: str) -> str:
    """The default notice of a run that stopped at a checkpoint (no presentation)."""
    at = f" at checkpoint '{node}'" if node else ""
    said = f": {summary}" if summary else ""
    return (f"Workflow {workflow} (run {run_id}) is waiting for an answer{at}{said}. To "
            f"continue it, call the workflow tool with action 'answer', runId '{run_id}' and "
            "your answer as input.")


def ended_text(workflow: str, run_id: str, state: str, reason: str | None,
               handoff: bool = False) -> str:
    if handoff:
        return (f"Workflow {workflow} (run {run_id}) was handed to another runner. Check "
                "`workflow status` before acting on it.")
    if state == "completed":
        # A run the session handed over when it ended, finished without it.
        return (f"Workflow {workflow} completed (run {run_id}) while this session was away. "
                f"Call workflow status with runId {run_id} for its outcome.")
    if state == "waiting":
        return (f"Workflow {workflow} (run {run_id}) is waiting at a checkpoint. Call "
                f"workflow status with runId {run_id}, then answer it when you can.")
    why = f": {reason}" if reason else ""
    return (f"Workflow {workflow} ended with state {state} (run {run_id}){why}. Inspect the "
            "durable workflow state before you decide what to do next; start a corrected "
            "workflow only if it is still needed.")


def new_intent(*, session_id: str, run_id: str, workflow: str, cause: TurnCause,
               source: str, state: str, reason: str, node: str | None = None,
               attempt: str | None = None, eligible: bool = True,
               handoff: bool = False) -> NewTurnIntent:
    source_id = source_event_id(run_id, source, node, attempt, cause)
    facts = {
        "schema": FACTS_SCHEMA,
        "workflowName": workflow,
        "runId": run_id,
        "observedState": state,
        "cause": cause,
        "nodeId": node,
        "attemptId": attempt,
        "reason": bound(reason, MAX_REASON_BYTES, mark=False),
        "handoff": handoff,
    }
    return NewTurnIntent(
        intent_id=intent_id(session_id, run_id, source_id, node, attempt, cause),
        source_event_id=source_id, run_id=run_id, workflow_ref=workflow,
        target_session_id=session_id, cause=cause, fallback_facts=facts, node_id=node,
        attempt_id=attempt, eligible=eligible)


def fallback_text(facts: dict[str, object]) -> str:
    workflow = str(facts.get("workflowName", "?"))
    run_id = str(facts.get("runId", "?"))
    reason = str(facts.get("reason") or "")
    if facts.get("cause") == "launch_failed":
        return launch_failed_text(workflow, run_id, reason)
    if facts.get("cause") == "presentation" and facts.get("observedState") == "waiting":
        node = facts.get("nodeId")
        return waiting_text(workflow, run_id, str(node) if node else None, reason)
    return ended_text(workflow, run_id, str(facts.get("observedState", "?")), reason or None,
                      handoff=bool(facts.get("handoff")))
