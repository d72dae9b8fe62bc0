"""Shared helpers for the store conformance suite: the fake clock and record factories."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner import testing
from runner.store import NewLaunch, NewNotification, NewTurnIntent, Store

SECRET = "sk-live-SECRET-0123456789abcdef"


class FakeClock(testing.FakeClock):
    """runner.testing's virtual clock, started where this suite's times start."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        super().__init__(start)

    @property
    def t(self) -> float:
        """The wall time; setting it jumps there (forward also moves the monotonic
        time, as a sleep would; backward moves the wall time only)."""
        return self.now()

    @t.setter
    def t(self, value: float) -> None:
        delta = value - self.now()
        if delta >= 0:
            self.advance(delta)
        else:
            with self._lock:
                self._now = value


@dataclass
class Backend:
    """How to open the store under test: `open` gives another handle on the test's
    store, `fresh` a brand-new empty store each call (for property tests)."""

    name: str
    open: Callable[[FakeClock], Store]
    fresh: Callable[[FakeClock], Store]


def launch(run_id: str = "run-1", **overrides: Any) -> NewLaunch:
    fields: dict[str, Any] = {
        "run_id": run_id,
        "workflow_ref": "review",
        "source": {"kind": "file", "path": "/p/.wfrun/workflows/review.yaml", "sha256": "ab" * 32},
        "definition_digest": "sha256:" + "cd" * 32,
        "input": {"task": "fix the bug", "token": SECRET},
        "options": {"executor": "scripted"},
    }
    fields.update(overrides)
    return NewLaunch(**fields)


def intent(intent_id: str, run_id: str = "run-1", **overrides: Any) -> NewTurnIntent:
    fields: dict[str, Any] = {
        "intent_id": intent_id,
        "source_event_id": f"event-{intent_id}",
        "run_id": run_id,
        "workflow_ref": "review",
        "target_session_id": "session-a",
        "cause": "launch_failed",
        "fallback_facts": {"runId": run_id, "observedState": "failedToStart"},
        "node_id": "$launch",
        "attempt_id": None,
    }
    fields.update(overrides)
    return NewTurnIntent(**fields)


def notification(notification_id: str, index: int = 1, **overrides: Any) -> NewNotification:
    fields: dict[str, Any] = {
        "notification_id": notification_id,
        "run_id": "run-1",
        "node_id": "report",
        "attempt_id": "attempt-1",
        "notification_index": index,
        "target_session_id": "session-a",
        "kind": "progress",
        "content": f"step {index} done",
    }
    fields.update(overrides)
    return NewNotification(**fields)
