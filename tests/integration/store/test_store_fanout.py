"""Fan-out items (ADR 0008) on every backend: opened once, claimed under the parent's
claim with the concurrency ceiling kept by the store, settled, taken over after a
crash (a finished item never again, none started a third time), cancelled."""

from __future__ import annotations

from storekit import FakeClock, launch

from runner.store import Store
from runner.store._records import LostRace
from runner.store.domain._fanout import ItemEnding, ItemKey

KEY = ItemKey("run-1", "files", 1)


def _held(store: Store, run_id: str = "run-1") -> str:
    store.launches.enqueue(launch(run_id))
    record = store.launches.claim(run_id, runner_id="h1")
    assert not isinstance(record, LostRace)
    assert record.claim_token is not None
    store.launches.mark_running(run_id, record.claim_token)
    return record.claim_token


def _ok(index: int) -> ItemEnding:
    return ItemEnding(index, "ok", output_json=f'{{"i":{index}}}')


def test_open_is_idempotent_and_a_claim_keeps_the_ceiling(store: Store) -> None:
    owner = _held(store)
    assert store.fanout.open(KEY, 10, owner=owner) == 10
    assert store.fanout.open(KEY, 10, owner=owner) == 10  # a resumed parent opens again
    first = store.fanout.claim(KEY, owner=owner, limit=4)
    assert not isinstance(first, LostRace)
    assert first.items == ((0, 1), (1, 1), (2, 1), (3, 1))
    again = store.fanout.claim(KEY, owner=owner, limit=4)
    assert not isinstance(again, LostRace)
    assert again.items == ()
    assert store.fanout.settle(KEY, [_ok(1)], owner=owner) == 9
    more = store.fanout.claim(KEY, owner=owner, limit=4)
    assert not isinstance(more, LostRace)
    assert more.items == ((4, 1),)
    states = [i.state for i in store.fanout.items(KEY)]
    assert states[:5] == ["running", "ok", "running", "running", "running"]
    assert store.fanout.progress("run-1") == {("files", 1): {"pending": 5, "running": 4,
                                                             "ok": 1}}


def test_settling_the_last_item_leaves_none_open(store: Store) -> None:
    owner = _held(store)
    store.fanout.open(KEY, 3, owner=owner)
    store.fanout.claim(KEY, owner=owner, limit=8)
    assert store.fanout.settle(KEY, [_ok(0), ItemEnding(2, "failed", error_json='{"code":"x"}')],
                               owner=owner) == 1
    assert store.fanout.settle(KEY, [_ok(1)], owner=owner) == 0
    items = store.fanout.items(KEY)
    assert [(i.state, i.output_json, i.starts) for i in items] == [
        ("ok", '{"i":0}', 1), ("ok", '{"i":1}', 1), ("failed", None, 1)]
    assert all(i.finished_at is not None for i in items)


def test_pure_items_end_without_a_claim_in_one_batch(store: Store) -> None:
    owner = _held(store)
    store.fanout.open(KEY, 3, owner=owner)
    assert store.fanout.settle(KEY, [_ok(0), _ok(1), _ok(2)], owner=owner, claimed=False) == 0
    assert [(i.state, i.starts) for i in store.fanout.items(KEY)] == [("ok", 1)] * 3


def test_a_runner_that_lost_the_parent_changes_nothing(store: Store, clock: FakeClock) -> None:
    owner = _held(store)
    store.fanout.open(KEY, 2, owner=owner)
    store.fanout.claim(KEY, owner=owner, limit=2)
    clock.advance(120)  # the lease ran out: another host holds the parent now
    lost = store.fanout.settle(KEY, [_ok(0)], owner=owner)
    assert isinstance(lost, LostRace)
    assert lost.reason == "lease_expired"
    assert isinstance(store.fanout.claim(KEY, owner="someone-else", limit=2), LostRace)
    assert isinstance(store.fanout.open(KEY, 5, owner="someone-else"), LostRace)
    assert [i.state for i in store.fanout.items(KEY)] == ["running", "running"]


def test_after_crashes_ended_items_stay_and_none_starts_a_third_time(
        store: Store, clock: FakeClock) -> None:
    owner = _held(store)
    store.fanout.open(KEY, 3, owner=owner)
    store.fanout.claim(KEY, owner=owner, limit=3)
    store.fanout.settle(KEY, [_ok(0)], owner=owner)
    # The parent's runner died; a new holder takes over the rows it left running.
    clock.advance(120)
    second = store.launches.claim("run-1", runner_id="h2")
    assert not isinstance(second, LostRace)
    assert second.claim_token is not None
    taken = store.fanout.claim(KEY, owner=second.claim_token, limit=3)
    assert not isinstance(taken, LostRace)
    assert taken.items == ((1, 2), (2, 2))
    assert taken.interrupted == ()
    store.fanout.settle(KEY, [_ok(1)], owner=second.claim_token)
    clock.advance(120)  # and died again, item 2 still running
    third = store.launches.claim("run-1", runner_id="h3")
    assert not isinstance(third, LostRace)
    assert third.claim_token is not None
    last = store.fanout.claim(KEY, owner=third.claim_token, limit=3)
    assert not isinstance(last, LostRace)
    assert last.items == ()
    assert last.interrupted == (2,)
    items = store.fanout.items(KEY)
    assert [(i.state, i.starts) for i in items] == [("ok", 1), ("ok", 2), ("failed", 2)]
    assert items[2].error_json is not None
    assert "interrupted" in items[2].error_json


def test_cancel_ends_every_open_item_in_one_transaction(store: Store) -> None:
    owner = _held(store)
    store.fanout.open(KEY, 5, owner=owner)
    store.fanout.claim(KEY, owner=owner, limit=2)
    store.fanout.settle(KEY, [_ok(0)], owner=owner)
    assert store.fanout.cancel_open(KEY, owner=owner, error_json='{"code":"cancelled"}') == 4
    assert [i.state for i in store.fanout.items(KEY)] == ["ok"] + ["cancelled"] * 4
    assert store.fanout.settle(KEY, [_ok(1)], owner=owner) == 0  # too late: unchanged
    assert store.fanout.items(KEY)[1].state == "cancelled"


def test_a_claim_among_given_indexes(store: Store) -> None:
    owner = _held(store)
    store.fanout.open(KEY, 6, owner=owner)
    got = store.fanout.claim(KEY, owner=owner, limit=6, indexes=[4, 1])
    assert not isinstance(got, LostRace)
    assert [i for i, _ in got.items] == [1, 4]


def test_a_claim_records_the_ends_it_is_given_and_claims_their_slots(store: Store) -> None:
    owner = _held(store)
    store.fanout.open(KEY, 4, owner=owner)
    store.fanout.claim(KEY, owner=owner, limit=2)
    got = store.fanout.claim(KEY, owner=owner, limit=2, settling=[_ok(0), _ok(1)])
    assert not isinstance(got, LostRace)
    assert got.items == ((2, 1), (3, 1))
    assert [i.state for i in store.fanout.items(KEY)] == ["ok", "ok", "running", "running"]


def test_a_release_gives_running_items_back_uncounted(store: Store) -> None:
    owner = _held(store)
    store.fanout.open(KEY, 3, owner=owner)
    store.fanout.claim(KEY, owner=owner, limit=2)
    assert store.fanout.release(KEY, [0, 1, 2], owner=owner) == 2  # 2 was never claimed
    assert [(i.state, i.starts) for i in store.fanout.items(KEY)] == [("pending", 0)] * 3
    assert isinstance(store.fanout.release(KEY, [0], owner="stranger"), LostRace)
