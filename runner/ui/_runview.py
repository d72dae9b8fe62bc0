"""What the run page shows, folded from trace events held in memory.

The live stream (live.py) tails the trace and re-folds the events it holds, so the
first paint and every update come from the same function, and no update re-reads
the bundle. Values are masked before they leave: the engine already redacts what
it persists; the page adds the exact values of this process's secret variables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runner._safety import mask_json, mask_values, redact
from runner.engine import RunState, fold, fold_attempts
from runner.host.runtime._runstate import run_state
from runner.host.runtime._views import progress_bars

from ._fanoutview import LiveItems, fanout_view

if TYPE_CHECKING:
    from runner.store import LaunchRecord

#: Node states the graph shows (the CSS colours them).
NODE_STATES = ("pending", "running", "retrying", "ok", "failed", "timed_out", "cancelled",
               "skipped", "interrupted", "waiting")
LOG_LINES_PER_NODE = 400
LOG_TEXT_CHARS = 20_000  # per stream and attempt: the page keeps the end


def masked(value: Any, secrets: tuple[str, ...]) -> Any:
    """`value` with known secret values and credential-shaped strings masked."""
    value = mask_json(value, mask_values(secrets)) if secrets else value
    return _redact_strings(value)


def _redact_strings(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {str(k): _redact_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_strings(v) for v in value]
    return value


def node_states(events: list[dict[str, Any]], node_ids: list[str],
                status: str) -> dict[str, str]:
    """Each node's state; a node the ended run never reached was skipped by routing."""
    states = {n: "pending" for n in node_ids}
    for a in fold_attempts(events):
        if not a.boundary:
            states[a.node] = a.state  # the last attempt's
    if status == "waiting":
        for n, s in states.items():
            if s == "running":
                states[n] = "waiting"
    if status not in ("running",):
        for n, s in states.items():
            if s == "pending":
                states[n] = "skipped"
    return states


def timeline(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per node attempt: when, how long, outcome, retry number, error, and a
    fan-out node's items by outcome."""
    return [{"node": a.node, "attempt": a.attempt, "kind": a.kind, "retry": a.retry,
             "resumed": a.resumed, "started_at": a.started_at, "finished_at": a.finished_at,
             "duration_ms": a.duration_ms, "outcome": a.outcome, "error": a.error_message,
             "will_retry": a.will_retry, "cached_from": a.cached_from, "items": a.items}
            for a in fold_attempts(events) if not a.boundary]


def reused_rows(state: RunState) -> list[dict[str, Any]]:
    """A rerun's reused nodes (they ran in the run it reran), as timeline rows."""
    rows = []
    for node in (state.rerun or {}).get("reused") or []:
        result = state.results.get(node) or {}
        error = result.get("error")
        rows.append({"node": node, "attempt": result.get("attempt_id"),
                     "kind": result.get("kind"), "retry": 0, "resumed": False,
                     "started_at": result.get("started_at"),
                     "finished_at": result.get("finished_at"),
                     "duration_ms": result.get("duration_ms"),
                     "outcome": result.get("outcome") or "ok",
                     "error": error.get("message") if isinstance(error, dict) else error,
                     "will_retry": False, "reused_from": result.get("reused_from")})
    return rows


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def node_logs(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per node: its attempts, the stdout and stderr its `node_log` events recorded
    (the logs `wfrun logs` prints; artifacts already read back), updates and errors."""
    logs: dict[str, list[str]] = {}
    for event in events:
        node, kind, p = event.get("node"), event.get("type"), event.get("payload") or {}
        if not isinstance(node, str):
            continue
        lines = logs.setdefault(node, [])
        at = str(event.get("at") or "")
        if kind == "node_started":
            retry = int(p.get("retry") or 0)
            lines.append(f"{at} started{f' (retry {retry})' if retry else ''}"
                         f"{' (resumed)' if p.get('resumed') else ''}")
        elif kind == "agent_prompt_sent":
            lines.append(f"{at} prompt sent to the agent")
        elif kind == "update_published":
            lines.append(f"{at} update {p.get('type')} {p.get('key') or ''}: "
                         f"{_text(p.get('data'))[:500]}")
        elif kind == "node_log" and isinstance(p.get("cached_from"), dict):
            lines.append(f"{at} a cached result of run {p['cached_from'].get('run_id')}; "
                         "nothing ran")
        elif kind == "node_log":
            code = p.get("exit_code")
            for stream in ("stdout", "stderr"):
                text = p.get(stream)
                if isinstance(text, str) and text:
                    cut = " (cut at the output cap)" if p.get(f"{stream}_truncated") else ""
                    lines.append(f"--- {stream}{cut} ---")
                    lines.extend(text[-LOG_TEXT_CHARS:].splitlines())
            if code is not None:
                lines.append(f"{at} exit status {code}")
        elif kind in ("node_finished", "node_failed"):
            error = p.get("error")
            if isinstance(error, dict):
                lines.append(f"{at} error {error.get('code')}: {error.get('message')}")
            lines.append(f"{at} {p.get('outcome') or 'ok'} in {p.get('duration_ms')} ms"
                         f"{' (will retry)' if p.get('will_retry') else ''}")
        if len(lines) > LOG_LINES_PER_NODE:
            del lines[:len(lines) - LOG_LINES_PER_NODE]
    return logs


def run_live(run_id: str, events: list[dict[str, Any]], snapshot: dict[str, Any],
             secrets: tuple[str, ...] = (), *, continued_by: str | None = None,
             launch: LaunchRecord | None = None,
             fanout: LiveItems | None = None) -> dict[str, Any]:
    """The dynamic part of the run page (graph states, fan-out items and branches,
    timeline, outputs, logs, progress), as JSON for the page's script; its status is
    `run_state` of the launch row and the folded events, the name every other view
    gives the run. `fanout`: the store's rows of the running fan-out nodes."""
    state = fold(run_id, events)
    folded = state.status if events else "starting"
    if folded == "running" and state.paused:
        folded = "paused"
    if folded == "waiting" and continued_by is not None:
        folded = "continued"
    if events:
        status: str = run_state(launch, folded)
    else:  # the bundle is being made
        status = run_state(launch, None) if launch is not None else "starting"
    node_ids = [str(n) for n in (snapshot.get("nodes") or {})]
    updates = [u for u in state.updates.values()
               if not (isinstance(u, dict) and u.get("type") == "progress")]
    nodes = node_states(events, node_ids, state.status if events else "running")
    for row in reused_rows(state):
        if nodes.get(row["node"]) in ("pending", "skipped"):
            nodes[row["node"]] = str(row["outcome"])  # a rerun's reused node: it ran before
    if state.status == "waiting" and state.waiting_on in nodes:
        nodes[str(state.waiting_on)] = "waiting"  # the checkpoint that asks the question
    items, branches = fanout_view(events, snapshot, fanout)
    view = {
        "run_id": run_id,
        "status": status,
        "current_node": state.current_node,
        "steps": state.steps,
        "waiting_on": state.waiting_on,
        "finished_at": state.finished_at,
        "nodes": nodes,
        "items": items,
        "branches": branches,
        "timeline": reused_rows(state) + timeline(events),
        "outputs": state.outputs,
        "final_output": state.final_output,
        "error": state.error,
        "logs": node_logs(events),
        "progress": progress_bars(events),
        "updates": updates,
        "seq": state.trace_seq,
    }
    live: dict[str, Any] = masked(view, secrets)
    return live
