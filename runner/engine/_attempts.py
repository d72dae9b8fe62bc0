"""Node attempts: the second fold of a trace, beside the run state (`state.py`).

`RunState` folds a trace into what the run needs to continue; `fold_attempts`
folds it into what people look at: one record per attempt of a node (started,
ended how, with which error, its logs) and the include boundaries. Every view
(`wfrun show`, the web view's timeline and graph states) reads these records
instead of matching event names itself, so a new node kind or event changes one
fold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NODE_ENDS = frozenset({"node_finished", "node_failed"})
INCLUDE_EVENTS = frozenset({"include_entered", "include_exited"})


@dataclass
class Attempt:
    node: str
    attempt: str | None
    kind: str | None  # the node's kind, or include_entered / include_exited
    started_at: str | None
    retry: int = 0
    resumed: bool = False
    finished_at: str | None = None
    duration_ms: int | None = None
    outcome: str = "running"  # running until its end is recorded
    error: Any = None  # the recorded error (a {code, message} mapping) or None
    will_retry: bool = False
    interrupted: bool = False  # its runner died while it ran (`run_interrupted`)
    cached_from: str | None = None  # the run whose kept result it reused (`cache:`)
    logs: list[dict[str, Any]] = field(default_factory=list)  # node_log payloads
    # A fan-out node's items by outcome (`{"ok": 48, "failed": 2}`), once it ended.
    items: dict[str, int] | None = None

    @property
    def ended(self) -> bool:
        return self.outcome != "running"

    @property
    def boundary(self) -> bool:
        """An include's entry or exit (not a node that ran)."""
        return self.kind in INCLUDE_EVENTS

    @property
    def error_message(self) -> str | None:
        error = self.error
        if isinstance(error, dict):
            message = error.get("message")
            return message if isinstance(message, str) else None
        return error if isinstance(error, str) else None

    @property
    def state(self) -> str:
        """running, interrupted, retrying, or the outcome."""
        if not self.ended:
            return "interrupted" if self.interrupted else "running"
        return "retrying" if self.will_retry else self.outcome


def item_counts(payload: dict[str, Any]) -> dict[str, int] | None:
    """A fan-out node's end: its items (a map's) or branches (a parallel's) by outcome."""
    found = payload.get("items")
    if found is None and isinstance(payload.get("branches"), dict):
        found = list(payload["branches"].values())
    if not isinstance(found, list):
        return None
    counts: dict[str, int] = {}
    for item in found:
        outcome = str(item.get("outcome")) if isinstance(item, dict) else "unknown"
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def fold_attempts(events: list[dict[str, Any]]) -> list[Attempt]:
    """Every attempt of every node and every include boundary, in trace order."""
    out: list[Attempt] = []
    open_: dict[str, Attempt] = {}
    for event in events:
        kind, node = event.get("type"), event.get("node")
        p = event.get("payload") or {}
        if kind == "run_interrupted":
            for a in open_.values():
                a.interrupted = True
            continue
        if not isinstance(node, str):
            continue
        if kind == "node_started":
            a = Attempt(node, event.get("attempt"), p.get("kind"), event.get("at"),
                        retry=int(p.get("retry") or 0), resumed=bool(p.get("resumed")))
            open_[node] = a
            out.append(a)
        elif kind in NODE_ENDS and node in open_:
            a = open_.pop(node)
            a.finished_at = event.get("at")
            a.duration_ms = p.get("duration_ms")
            a.outcome = str(p.get("outcome") or ("ok" if kind == "node_finished" else "failed"))
            a.error = p.get("error")
            a.will_retry = bool(p.get("will_retry"))
            a.cached_from = (p.get("cached_from") or {}).get("run_id")
            a.items = item_counts(p)
        elif kind == "node_log" and node in open_:
            open_[node].logs.append(p)
        elif kind in INCLUDE_EVENTS:
            at = event.get("at")
            out.append(Attempt(node, None, kind, at, finished_at=at, duration_ms=0,
                               outcome="ok"))
    return out
