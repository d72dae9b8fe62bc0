"""Conformance: `ControllerStore.reconcile_queue`, the durable keyed queue.

Dedupe, dirty passes, delayed wake-ups (sooner wins), claims with tokens, leases
and epochs, completion outcomes, and recovery after a fresh process opens the store.
"""

from __future__ import annotations

import pytest
from storekit import Backend, FakeClock

from runner.store import LostRace
from runner.store._controller_interface import ControllerStore, QueueItem

C = "pull-request"


def _claim(store: ControllerStore, runner: str = "w1", lease: float = 30) -> QueueItem:
    item = store.reconcile_queue.claim_next(runner_id=runner, lease_seconds=lease)
    assert item is not None
    assert item.claim_token is not None
    return item


def _token(item: QueueItem) -> str:
    assert item.claim_token is not None
    return item.claim_token


def test_ten_identical_enqueues_make_one_row_and_one_pass(cstore: ControllerStore) -> None:
    q = cstore.reconcile_queue
    for _ in range(10):
        q.enqueue(C, "pr-1")
    assert [(i.controller, i.key, i.dirty, i.epoch) for i in q.list()] == [(C, "pr-1", False, 0)]
    item = _claim(cstore)
    assert q.claim_next(runner_id="w2", lease_seconds=30) is None
    assert q.complete(C, "pr-1", _token(item), outcome="settled") is None
    assert q.list() == []
    assert q.claim_next(runner_id="w1", lease_seconds=30) is None


def test_enqueue_many_dedupes_in_one_call(cstore: ControllerStore) -> None:
    q = cstore.reconcile_queue
    wakeups = [(C, f"pr-{i % 3}") for i in range(30)] + [("other", "pr-0")]
    assert q.enqueue_many(wakeups) == 31
    assert sorted((i.controller, i.key) for i in q.list()) == [
        ("other", "pr-0"),
        (C, "pr-0"),
        (C, "pr-1"),
        (C, "pr-2"),
    ]
    assert q.enqueue_many([]) == 0
    with pytest.raises(ValueError, match="printable"):
        q.enqueue_many([(C, "ok"), (C, "")])
    assert q.get(C, "ok") is None  # checked before anything was written


def test_a_wakeup_during_a_claim_makes_exactly_one_more_pass(cstore: ControllerStore) -> None:
    q = cstore.reconcile_queue
    q.enqueue(C, "pr-1")
    first = _claim(cstore)
    assert first.dirty is False
    for _ in range(5):
        woken = q.enqueue(C, "pr-1")
        assert woken.dirty is True
        assert woken.claim_token == first.claim_token  # still the holder's; no second claim
    assert q.claim_next(runner_id="w2", lease_seconds=30) is None
    back = q.complete(C, "pr-1", _token(first), outcome="settled")
    assert isinstance(back, QueueItem)
    assert back.dirty is False
    assert back.claim_token is None
    assert back.available_at == cstore.now_ms()
    second = _claim(cstore, "w2")
    assert second.epoch == first.epoch + 1
    assert second.dirty is False
    assert q.complete(C, "pr-1", _token(second), outcome="settled") is None
    assert q.claim_next(runner_id="w1", lease_seconds=30) is None


def test_dirty_wins_over_a_delayed_completion(cstore: ControllerStore) -> None:
    q = cstore.reconcile_queue
    q.enqueue(C, "pr-1")
    item = _claim(cstore)
    q.enqueue(C, "pr-1")
    back = q.complete(C, "pr-1", _token(item), outcome="requeue_after", delay=300)
    assert isinstance(back, QueueItem)
    assert back.available_at == cstore.now_ms()
    assert _claim(cstore).epoch == 2


def test_delayed_wakeups_keep_the_sooner_time(cstore: ControllerStore, clock: FakeClock) -> None:
    q = cstore.reconcile_queue
    now = cstore.now_ms()
    assert q.enqueue(C, "pr-1", delay=60).available_at == now + 60_000
    assert q.enqueue(C, "pr-1", delay=120).available_at == now + 60_000  # later loses
    assert q.enqueue(C, "pr-1", delay=10).available_at == now + 10_000  # sooner wins
    assert q.claim_next(runner_id="w", lease_seconds=30) is None
    clock.advance(9.999)
    assert q.claim_next(runner_id="w", lease_seconds=30) is None
    clock.advance(0.001)
    assert _claim(cstore).key == "pr-1"
    with pytest.raises(ValueError, match="delay"):
        q.enqueue(C, "pr-2", delay=-1)
    with pytest.raises(ValueError, match="delay"):
        q.enqueue(C, "pr-2", delay=float("nan"))


def test_claims_take_the_oldest_available_and_honour_filters(
    cstore: ControllerStore, clock: FakeClock
) -> None:
    q = cstore.reconcile_queue
    q.enqueue(C, "late", delay=5)
    q.enqueue(C, "b")
    q.enqueue("other", "a")
    clock.advance(1)
    q.enqueue(C, "a")
    only_c = q.claim_next(runner_id="w", lease_seconds=30, controllers=[C])
    assert only_c is not None
    assert (only_c.controller, only_c.key) == (C, "b")
    assert q.claim_next(runner_id="w", lease_seconds=30, controllers=[]) is None
    skipped = q.claim_next(runner_id="w", lease_seconds=30, exclude=[("other", "a")])
    assert skipped is not None
    assert (skipped.controller, skipped.key) == (C, "a")
    oldest = _claim(cstore)
    assert (oldest.controller, oldest.key) == ("other", "a")
    assert oldest.runner_id == "w1"
    assert oldest.claim_expires_at == cstore.now_ms() + 30_000
    assert oldest.available_at == oldest.claim_expires_at  # when a claimer may take it again
    assert q.claim_next(runner_id="w", lease_seconds=30) is None  # "late" is not due


def test_renew_needs_the_token_and_a_live_lease(cstore: ControllerStore, clock: FakeClock) -> None:
    q = cstore.reconcile_queue
    q.enqueue(C, "pr-1")
    item = _claim(cstore, lease=30)
    clock.advance(20)
    renewed = q.renew(C, "pr-1", _token(item), lease_seconds=30)
    assert isinstance(renewed, QueueItem)
    assert renewed.claim_expires_at == cstore.now_ms() + 30_000
    assert renewed.available_at == renewed.claim_expires_at
    assert renewed.epoch == item.epoch
    assert q.renew(C, "pr-1", "forged", lease_seconds=30) == LostRace(
        f"{C}/pr-1", "token_mismatch"
    )
    assert q.renew(C, "nope", _token(item), lease_seconds=30) == LostRace(f"{C}/nope", "not_found")
    clock.advance(30)
    assert q.renew(C, "pr-1", _token(item), lease_seconds=30) == LostRace(
        f"{C}/pr-1", "lease_expired"
    )
    assert q.get(C, "pr-1") == renewed  # lost races change nothing


def test_completion_outcomes_and_error_counts(cstore: ControllerStore, clock: FakeClock) -> None:
    q = cstore.reconcile_queue
    q.enqueue(C, "pr-1")
    item = _claim(cstore)
    failed = q.complete(C, "pr-1", _token(item), outcome="error", delay=2, error="boom\n  again")
    assert isinstance(failed, QueueItem)
    assert (failed.consecutive_errors, failed.last_error) == (1, "boom again")
    assert failed.available_at == cstore.now_ms() + 2000
    assert (failed.claim_token, failed.claim_expires_at, failed.runner_id) == (None, None, None)
    clock.advance(2)
    item = _claim(cstore)
    assert item.consecutive_errors == 1
    failed = q.complete(C, "pr-1", _token(item), outcome="error", delay=4, error="x" * 10_000)
    assert isinstance(failed, QueueItem)
    assert failed.consecutive_errors == 2
    assert failed.last_error is not None
    assert len(failed.last_error.encode()) <= 8192
    clock.advance(4)
    item = _claim(cstore)
    later = q.complete(C, "pr-1", _token(item), outcome="requeue_after", delay=60)
    assert isinstance(later, QueueItem)
    assert (later.consecutive_errors, later.last_error) == (0, None)
    assert later.available_at == cstore.now_ms() + 60_000
    clock.advance(60)
    item = _claim(cstore)
    now = q.complete(C, "pr-1", _token(item), outcome="requeue")
    assert isinstance(now, QueueItem)
    assert now.available_at == cstore.now_ms()
    with pytest.raises(ValueError, match="unknown queue outcome"):
        q.complete(C, "pr-1", "t", outcome="done")  # type: ignore[arg-type]


def test_a_reclaim_bumps_the_epoch_and_fences_the_old_holder(
    cstore: ControllerStore, clock: FakeClock
) -> None:
    q = cstore.reconcile_queue
    q.enqueue(C, "pr-1")
    old = _claim(cstore, "zombie", lease=30)
    assert q.enqueue(C, "pr-1").dirty is True  # a wake-up for the (soon dead) holder
    clock.advance(29.999)
    assert q.claim_next(runner_id="w2", lease_seconds=30) is None  # lease still live
    clock.advance(0.001)
    new = _claim(cstore, "w2")
    assert new.epoch == old.epoch + 1
    assert new.claim_token != old.claim_token
    assert new.runner_id == "w2"
    assert new.dirty is False  # the new pass reads current state: it covers that wake-up
    lost = LostRace(f"{C}/pr-1", "token_mismatch")
    assert q.renew(C, "pr-1", _token(old), lease_seconds=30) == lost
    assert q.complete(C, "pr-1", _token(old), outcome="settled") == lost
    assert q.get(C, "pr-1") == new
    assert q.complete(C, "pr-1", _token(new), outcome="settled") is None


def test_an_expired_holder_may_still_complete_until_someone_reclaims(
    cstore: ControllerStore, clock: FakeClock
) -> None:
    q = cstore.reconcile_queue
    q.enqueue(C, "pr-1")
    slow = _claim(cstore, lease=1)
    clock.advance(5)
    q.enqueue(C, "pr-1")  # a wake-up meanwhile still counts as one more pass
    back = q.complete(C, "pr-1", _token(slow), outcome="settled")
    assert isinstance(back, QueueItem)
    assert back.dirty is False
    assert _claim(cstore).epoch == 2


def test_delayed_work_and_expired_claims_survive_a_fresh_process(
    backend: Backend, clock: FakeClock
) -> None:
    first = backend.open(clock)
    first.resources.apply(C, "claimed", {})
    first.reconcile_queue.enqueue(C, "later", delay=120)
    held = _claim(first, "dead-host", lease=30)
    assert held.key == "claimed"
    first.close()  # the process stops without completing

    clock.advance(31)
    second = backend.open(clock)
    try:
        q = second.reconcile_queue
        reclaimed = _claim(second, "new-host")
        assert (reclaimed.key, reclaimed.epoch) == ("claimed", held.epoch + 1)
        assert reclaimed.runner_id == "new-host"
        lost = LostRace(f"{C}/claimed", "token_mismatch")
        assert q.renew(C, "claimed", _token(held), lease_seconds=30) == lost
        assert q.complete(C, "claimed", _token(held), outcome="settled") == lost
        assert q.claim_next(runner_id="new-host", lease_seconds=30) is None
        assert q.complete(C, "claimed", _token(reclaimed), outcome="settled") is None
        clock.advance(88.999)
        assert q.claim_next(runner_id="new-host", lease_seconds=30) is None
        clock.advance(0.001)
        due = _claim(second, "new-host")
        assert (due.key, due.epoch) == ("later", 1)
    finally:
        second.close()


def test_a_lost_completion_changes_nothing(cstore: ControllerStore) -> None:
    q = cstore.reconcile_queue
    q.enqueue(C, "pr-1")
    item = _claim(cstore)
    before = q.get(C, "pr-1")
    for outcome in ("settled", "requeue", "requeue_after", "error"):
        result = q.complete(C, "pr-1", "wrong", outcome=outcome, delay=1)  # type: ignore[arg-type]
        assert result == LostRace(f"{C}/pr-1", "token_mismatch")
    assert q.complete(C, "nope", _token(item), outcome="settled") == LostRace(
        f"{C}/nope", "not_found"
    )
    assert q.get(C, "pr-1") == before


@pytest.mark.parametrize("delay", [0.001, 0.004, 0.731])
def test_a_delay_is_due_after_exactly_that_much_clock_time(
    cstore: ControllerStore, clock: FakeClock, delay: float
) -> None:
    """Float seconds carry representation noise (1800000000.001 + 0.001 is not exact):
    the store converts to the nearest millisecond, so a wake-up is never a millisecond late."""
    clock.advance(0.001)
    item = cstore.reconcile_queue.enqueue(C, "pr-1", delay=delay)
    assert item.available_at == cstore.now_ms() + round(delay * 1000)
    clock.advance(delay)
    assert cstore.now_ms() == item.available_at
    assert _claim(cstore).key == "pr-1"
