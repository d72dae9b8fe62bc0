"""What a reconciler raises decides its next pass (kopf's convention, house review item 5).

`TemporaryError(msg, delay=N)` comes back after exactly N seconds, `PermanentError`
does not come back until the resource changes or is woken, anything else backs off
(tests/integration/controllers/test_controller_runtime.py has the backoff itself).
The store runs on the Harness's FakeClock, so "after N seconds" is exact.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from ctlkit import Harness

from runner import PermanentError, TemporaryError
from runner.controllers import (
    Condition,
    ManagerConfig,
    ReconcileContext,
    Result,
    define_controller,
)
from runner.store._controller_interface import Resource

CONFIG = ManagerConfig(backoff_base=1.0, backoff_cap=300.0)


def _failures(h: Harness, controller: str) -> list[dict[str, object]]:
    return [dict(e.payload) for e in h.store.controller_events.read(controller=controller)
            if e.type == "reconcile_failed"]


def test_temporary_error_is_retried_after_exactly_its_delay_every_time(
        project: Path) -> None:
    calls: list[int] = []

    def rate_limited(ctx: ReconcileContext, r: Resource) -> Result:
        calls.append(1)
        if len(calls) <= 3:
            raise TemporaryError("rate limited by the provider", delay=7)
        return ctx.settled({"calls": len(calls)}, [Condition("Ready", "True", "Done")])

    h = Harness(project, [define_controller("limited", rate_limited)])
    try:
        m = h.manager(config=CONFIG)
        m.apply("limited", "k", {})
        for n in (1, 2, 3):
            assert m.run_until_idle() == 1
            row = h.store.reconcile_queue.get("limited", "k")
            assert row is not None
            # Exactly the delay asked for: no jitter, and not growing with the count.
            assert row.available_at - h.store.now_ms() == 7000
            assert row.consecutive_errors == n
            assert row.last_error is not None
            assert "rate limited by the provider" in row.last_error
            h.clock.advance(6.999)
            assert m.run_until_idle() == 0  # not a millisecond early
            h.clock.advance(0.001)
        assert m.run_until_idle() == 1
        assert len(calls) == 4
        assert h.store.reconcile_queue.list() == []
        assert h.resource("limited", "k").status["controller_status"] == {"calls": 4}
        failed = _failures(h, "limited")
        assert [(f["retry"], f["retry_in"]) for f in failed] == [("delay", 7.0)] * 3
        assert all("TemporaryError: rate limited" in str(f["error"]) for f in failed)
    finally:
        h.close()


def test_permanent_error_is_not_retried_until_the_resource_changes(project: Path) -> None:
    seen: list[int] = []

    def strict(ctx: ReconcileContext, r: Resource) -> Result:
        seen.append(r.generation)
        if not r.spec.get("repository"):
            raise PermanentError("the spec names no repository; apply one that does")
        return ctx.settled({"repository": r.spec["repository"]},
                           [Condition("Ready", "True", "Configured")])

    # With a resync too: a permanent failure must not come back on the resync timer.
    h = Harness(project, [define_controller("strict", strict, resync=30.0)])
    try:
        m = h.manager(config=CONFIG)
        m.apply("strict", "k", {})
        assert m.run_until_idle() == 1
        assert h.store.reconcile_queue.get("strict", "k") is None  # settled, not parked
        [failed] = _failures(h, "strict")
        assert failed["retry"] == "never"
        assert failed["retry_in"] is None
        assert failed["error"] == ("PermanentError: the spec names no repository; "
                                   "apply one that does")
        assert failed["generation"] == 1

        # Far past the backoff cap (300 s) and the resync (30 s): still no pass.
        for _ in range(6):
            h.clock.advance(600)
            assert m.run_until_idle() == 0
        assert seen == [1]

        # Woken by hand (`wfrun controller reconcile`): one more pass, then settled again.
        m.enqueue("strict", "k")
        assert m.run_until_idle() == 1
        assert seen == [1, 1]
        h.clock.advance(3600)
        assert m.run_until_idle() == 0

        # A new spec is a change: reconciled at once, and it succeeds.
        m.apply("strict", "k", {"repository": "octo/widgets"})
        assert m.run_until_idle() == 1
        assert seen == [1, 1, 2]
        ready = h.ready("strict", "k")
        assert ready is not None
        assert (ready["status"], ready["reason"]) == ("True", "Configured")
    finally:
        h.close()


@pytest.mark.parametrize("delay", [-1.0, math.nan, math.inf])
def test_temporary_error_without_a_usable_delay_backs_off(project: Path,
                                                          delay: float) -> None:
    def broken(ctx: ReconcileContext, r: Resource) -> Result:
        raise TemporaryError("try later", delay=delay)

    h = Harness(project, [define_controller("odd", broken)])
    try:
        m = h.manager(config=CONFIG)
        m.apply("odd", "k", {})
        assert m.run_until_idle() == 1
        row = h.store.reconcile_queue.get("odd", "k")
        assert row is not None
        wait = (row.available_at - h.store.now_ms()) / 1000
        assert 0.5 <= wait <= 1.0  # the first backoff step, base 1 s with jitter
        [failed] = _failures(h, "odd")
        assert failed["retry"] == "backoff"
    finally:
        h.close()


def test_other_exceptions_keep_the_exponential_backoff(project: Path) -> None:
    def flaky(ctx: ReconcileContext, r: Resource) -> Result:
        raise RuntimeError("connection reset")

    h = Harness(project, [define_controller("flaky", flaky)])
    try:
        m = h.manager(config=CONFIG)
        m.apply("flaky", "k", {})
        waits = []
        for _ in range(4):
            assert m.run_until_idle() == 1
            row = h.store.reconcile_queue.get("flaky", "k")
            assert row is not None
            waits.append((row.available_at - h.store.now_ms()) / 1000)
            h.clock.advance(waits[-1])
        for n, wait in enumerate(waits, start=1):
            full = 2 ** (n - 1)
            assert full / 2 <= wait <= full
        assert {f["retry"] for f in _failures(h, "flaky")} == {"backoff"}
    finally:
        h.close()
