"""`ctx.effects.ensure`: record before the call, observe before any retry (DESIGN §7).

A counting fake provider stands in for GitHub. "Crashes" here raise out of the
crash seam inside one process (the pass fails and its claim is released with a
backoff); test_controller_processes.py does the same with real SIGKILLs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.clock import FakeClock
from runner.controllers import (
    Applied,
    ControllerManager,
    EffectError,
    Observation,
    ReconcileContext,
    Result,
    define_controller,
)
from runner.controllers._effects import CRASH_POINTS, Effects, request_fingerprint
from runner.store import SqliteStore
from runner.store._controller_interface import Resource


class Provider:
    """An external system with one idempotency-free mutation, like a merge."""

    def __init__(self) -> None:
        self.applied: list[Any] = []
        self.observed = 0
        self.fail_with: BaseException | None = None
        self.observe_says: str | None = None  # force an observation result

    def observe(self, request: Any) -> Observation:
        self.observed += 1
        if self.observe_says is not None:
            return Observation(self.observe_says)  # type: ignore[arg-type]
        if request in self.applied:
            return Observation("applied", f"ref-{len(self.applied)}")
        return Observation("not_applied")

    def apply(self, request: Any) -> Applied:
        self.applied.append(request)
        if self.fail_with is not None:
            raise self.fail_with
        return Applied("applied", f"ref-{len(self.applied)}")


class Crash(BaseException):
    """Stands in for the process dying at a crash point."""


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = SqliteStore(tmp_path / "store.sqlite3", clock=FakeClock())
    yield s
    s.close()


@pytest.fixture
def resource(store: SqliteStore) -> Resource:
    return store.resources.apply("ctl", "k", {"v": 1})


def effects(store: SqliteStore, resource: Resource, crash_at: str | None = None,
            events: list[str] | None = None) -> Effects:
    def crash(point: str) -> None:
        if point == crash_at:
            raise Crash(point)

    def record(kind: str, payload: dict[str, Any]) -> None:
        if events is not None:
            events.append(kind)

    return Effects(store, resource, record, crash)


def test_pending_record_is_committed_before_the_provider_call(store: SqliteStore,
                                                              resource: Resource) -> None:
    seen: list[str] = []

    def apply(request: Any) -> Applied:
        record = store.effects.get(resource.uid, "merge:1")
        assert record is not None
        seen.append(record.state)
        return Applied("applied", "sha-1")

    out = effects(store, resource).ensure("merge:1", "merge", {"sha": "a"},
                                          lambda _r: Observation("not_applied"), apply)
    assert seen == ["pending"]
    assert (out.state, out.external_ref, out.recovered) == ("applied", "sha-1", False)
    record = store.effects.get(resource.uid, "merge:1")
    assert record is not None
    assert record.state == "applied"
    assert record.request_fingerprint == request_fingerprint({"sha": "a"})
    assert record.generation == resource.generation


def test_terminal_effects_are_final_and_never_observed_or_reapplied(
        store: SqliteStore, resource: Resource) -> None:
    p = Provider()
    e = effects(store, resource)
    assert e.ensure("m", "merge", {"sha": "a"}, p.observe, p.apply).state == "applied"
    for _ in range(3):
        assert e.ensure("m", "merge", {"sha": "a"}, p.observe, p.apply).state == "applied"
    assert (len(p.applied), p.observed) == (1, 0)

    def refuse(_r: Any) -> Applied:
        return Applied("rejected", error="409: Head branch was modified")

    first = e.ensure("r", "merge", {"sha": "b"}, p.observe, refuse)
    again = e.ensure("r", "merge", {"sha": "b"}, p.observe, p.apply)
    assert (first.state, again.state) == ("rejected", "rejected")
    assert again.error == "409: Head branch was modified"
    assert len(p.applied) == 1


def test_a_key_reused_with_another_request_or_kind_is_an_error(store: SqliteStore,
                                                               resource: Resource) -> None:
    p = Provider()
    e = effects(store, resource)
    e.ensure("m", "merge", {"sha": "a"}, p.observe, p.apply)
    with pytest.raises(EffectError, match="different request"):
        e.ensure("m", "merge", {"sha": "b"}, p.observe, p.apply)
    with pytest.raises(EffectError, match="different request"):
        e.ensure("m", "close", {"sha": "a"}, p.observe, p.apply)
    # key order does not change the fingerprint
    e.ensure("n", "merge", {"a": 1, "b": 2}, p.observe, p.apply)
    e.ensure("n", "merge", {"b": 2, "a": 1}, p.observe, p.apply)
    assert len(p.applied) == 2


def test_a_provider_exception_is_indeterminate_and_observed_before_a_retry(
        store: SqliteStore, resource: Resource) -> None:
    p = Provider()
    p.fail_with = TimeoutError("read timed out")  # the merge may or may not have happened
    e = effects(store, resource)
    out = e.ensure("m", "merge", {"sha": "a"}, p.observe, p.apply)
    assert out.state == "indeterminate"
    assert out.error is not None
    assert "TimeoutError" in out.error
    p.fail_with = None
    # the provider did apply it: the next pass finds that out and does not apply again
    again = e.ensure("m", "merge", {"sha": "a"}, p.observe, p.apply)
    assert (again.state, again.recovered) == ("applied", True)
    assert (len(p.applied), p.observed) == (1, 1)


def test_indeterminate_observation_never_applies(store: SqliteStore,
                                                 resource: Resource) -> None:
    p = Provider()
    p.fail_with = TimeoutError("timeout")
    e = effects(store, resource)
    e.ensure("m", "merge", {"sha": "a"}, p.observe, p.apply)
    p.fail_with, p.observe_says = None, "indeterminate"
    for _ in range(3):
        assert e.ensure("m", "merge", {"sha": "a"}, p.observe, p.apply).state == \
            "indeterminate"
    assert (len(p.applied), p.observed) == (1, 3)
    p.observe_says = "not_applied"  # now the provider can tell: it did not happen
    assert e.ensure("m", "merge", {"sha": "a"}, p.observe, p.apply).state == "applied"
    assert len(p.applied) == 2


def test_observe_failing_fails_the_pass_without_applying(store: SqliteStore,
                                                         resource: Resource) -> None:
    p = Provider()
    with pytest.raises(Crash):
        effects(store, resource, "before_provider_call").ensure(
            "m", "merge", {"sha": "a"}, p.observe, p.apply)

    def broken(_r: Any) -> Observation:
        raise ConnectionError("provider unreachable")

    with pytest.raises(ConnectionError):
        effects(store, resource).ensure("m", "merge", {"sha": "a"}, broken, p.apply)
    assert p.applied == []
    record = store.effects.get(resource.uid, "m")
    assert record is not None
    assert record.state == "pending"


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_stop_at_each_crash_point_converges_to_one_application(
        store: SqliteStore, resource: Resource, point: str) -> None:
    p = Provider()
    events: list[str] = []
    with pytest.raises(Crash):
        effects(store, resource, point, events).ensure("m", "merge", {"sha": "a"},
                                                       p.observe, p.apply)
    applied_before = len(p.applied)
    assert applied_before == (0 if point == "before_provider_call" else 1)
    record = store.effects.get(resource.uid, "m")
    assert record is not None
    assert record.state == ("applied" if point == "after_receipt" else "pending")

    out = effects(store, resource, None, events).ensure("m", "merge", {"sha": "a"},
                                                        p.observe, p.apply)
    assert out.state == "applied"
    assert len(p.applied) == 1  # never applied twice
    if point == "after_receipt":
        assert p.observed == 0  # the receipt is final: nothing to look at
    else:
        assert p.observed == 1  # an unfinished record is always observed first
    assert out.recovered == (point == "after_provider_call")
    if point == "after_provider_call":
        assert "effect_recovered" in events


def test_manager_passes_crash_seam_to_effects_and_recovers_on_the_next_pass(
        tmp_path: Path) -> None:
    p = Provider()
    crashes = {"after_provider_call": 1}

    def crash(point: str) -> None:
        if crashes.get(point):
            crashes[point] -= 1
            raise Crash(point)

    def reconcile(ctx: ReconcileContext, r: Resource) -> Result:
        out = ctx.effects.ensure(f"m:{r.generation}", "merge", {"sha": r.spec["sha"]},
                                 p.observe, p.apply)
        return ctx.settled({"effect": out.state, "recovered": out.recovered})

    clock = FakeClock()
    with SqliteStore(tmp_path / "m.sqlite3", clock=clock) as store:
        m = ControllerManager(store, [define_controller("ctl", reconcile)], clock=clock,
                              crash=crash)
        m.apply("ctl", "x", {"sha": "a"})
        assert m.run_until_idle() == 1
        row = store.reconcile_queue.get("ctl", "x")
        assert row is not None
        assert row.consecutive_errors == 1
        assert "Crash" in (row.last_error or "")
        clock.advance(5)
        assert m.run_until_idle() == 1
        r = store.resources.get("ctl", "x")
        assert r is not None
        assert r.status["controller_status"] == {"effect": "applied", "recovered": True}
        assert len(p.applied) == 1
