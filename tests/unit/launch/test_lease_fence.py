"""`LeaseFence` owns what it learned of its claim: it answers from a committed
answer or its own read while a third of the lease surely holds (`starting` too: a
live lease's row changes only through its holder), asks the store otherwise, and
forgets on `lost` (a renewal that lost). Real SQLite store, virtual clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner._leases import renew_every
from runner.store import LaunchBook, LaunchRecord, LeaseFence, LostRace, NewLaunch, SqliteStore
from runner.testing import FakeClock

LEASE = 30.0


class _Asked:
    """The book, counting the fence's questions to the store."""

    def __init__(self, book: LaunchBook) -> None:
        self.book, self.asked = book, 0

    def claim_left(self, run_id: str, token: str) -> Any:
        self.asked += 1
        return self.book.claim_left(run_id, token)


def _claimed(tmp_path: Path, clock: FakeClock) -> tuple[SqliteStore, LaunchRecord]:
    store = SqliteStore(tmp_path / "store.sqlite3", clock=clock)
    book = LaunchBook(store)
    book.enqueue(NewLaunch(run_id="r1", workflow_ref="w", source={}, definition_digest="d",
                           input={}))
    record = book.claim_next(runner_id="me", lease_seconds=LEASE)
    assert record is not None
    assert record.claim_token is not None
    return store, record


def test_a_running_claim_is_answered_locally_until_a_third_of_the_lease_is_left(
        tmp_path: Path) -> None:
    clock = FakeClock()
    store, record = _claimed(tmp_path, clock)
    book = LaunchBook(store)
    asked = _Asked(book)
    token = record.claim_token or ""
    fence = LeaseFence(asked, "r1", token, clock, renew_every(LEASE))  # type: ignore[arg-type]
    assert (fence(), asked.asked) == (True, 1)  # nothing learned yet: the store says
    clock.advance(LEASE - fence.margin - 1)
    # `starting`, and the read's lease surely holds: no cancel can take the row from
    # its live holder (the store refuses it), so no round trip.
    assert (fence(), asked.asked) == (True, 1)
    clock.advance(2)
    assert (fence(), asked.asked) == (True, 2)  # within the margin: the store is asked
    assert book.renew_lease("r1", record.claim_token or "", lease_seconds=LEASE)
    sent = clock.monotonic()
    running = book.mark_running("r1", token)
    assert not isinstance(running, LostRace)
    fence.running(running, sent)
    clock.advance(LEASE - fence.margin - 1)
    assert (fence(), asked.asked) == (True, 2)  # the lease surely holds: no round trip
    clock.advance(2)
    assert (fence(), asked.asked) == (True, 3)  # within the margin: the store is asked
    store.close()


def test_a_lost_claim_is_asked_again_and_refused(tmp_path: Path) -> None:
    clock = FakeClock()
    store, record = _claimed(tmp_path, clock)
    book = LaunchBook(store)
    token = record.claim_token or ""
    fence = LeaseFence(book, "r1", token, clock, renew_every(LEASE))
    sent = clock.monotonic()
    running = book.mark_running("r1", token)
    assert not isinstance(running, LostRace)
    fence.running(running, sent)
    assert book.yield_lease("r1", token)  # the claim is given up behind the fence's back
    assert fence()  # what the fence learned still holds: it answers locally
    fence.lost()  # a renewal lost: the fence forgets
    assert not fence()
    assert not fence.running_here
    store.close()
