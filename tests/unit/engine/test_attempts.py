"""The attempts fold: one record per node attempt, read by every view."""

from __future__ import annotations

from typing import Any

from runner.engine import fold_attempts


def _ev(event: str, node: str | None = None, attempt: str | None = None,
        **payload: Any) -> dict[str, Any]:
    return {"type": event, "node": node, "attempt": attempt, "at": f"t-{event}",
            "payload": payload}


def test_attempts_fold_retries_logs_interruptions_and_include_boundaries() -> None:
    events = [
        _ev("run_started"),
        _ev("include_entered", "fix", mount="fix"),
        _ev("node_started", "fix/a", "a1", kind="action", retry=0),
        _ev("node_log", "fix/a", "a1", stdout="out", exit_code=1),
        _ev("node_failed", "fix/a", "a1", outcome="failed", duration_ms=5, will_retry=True,
            error={"code": "nonzero_exit", "message": "exited with 1"}),
        _ev("node_started", "fix/a", "a2", kind="action", retry=1),
        _ev("run_interrupted", reason="the host died"),
        _ev("node_started", "fix/a", "a3", kind="action", retry=1, resumed=True),
        _ev("node_finished", "fix/a", "a3", outcome="ok", duration_ms=7),
    ]
    entry, first, second, third = fold_attempts(events)
    assert (entry.boundary, entry.kind, entry.outcome) == (True, "include_entered", "ok")
    assert (first.state, first.error_message, first.retry) == ("retrying", "exited with 1", 0)
    assert first.logs == [{"stdout": "out", "exit_code": 1}]
    assert (second.ended, second.state) == (False, "interrupted")
    assert (third.state, third.resumed, third.duration_ms) == ("ok", True, 7)
