"""Fan-out items (ADR 0008) on every backend: opened once, claimed under the parent's
claim with the concurrency ceiling kept by the store, settled, taken over after a
crash (a finished item never again, none started a third time), cancelled."""

from __future__ import annotations

from typing import Any

from storekit import FakeClock, launch

from runner.store import Store
from runner.store._records import LostRace
from runner.store.domain._fanout import ItemEnding, ItemKey, ItemLog, SharedNode

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


# -- phase 2: items of shared node visits, claimed by any host under an item lease --------
HOST_A, HOST_B = "item:host-a:1", "item:host-b:1"


def _shared(store: Store, count: int = 6, limit: int = 2, *,
            fail_fast: bool = False) -> str:
    owner = _held(store)
    assert store.fanout.open(KEY, count, owner=owner,
                             shared=SharedNode(limit, 30_000, fail_fast)) == count
    return owner


def _park_waiting(store: Store, owner: str) -> None:
    assert store.fanout.wait_for_hosts(KEY, owner=owner) is True
    assert store.launches.park("run-1", owner, mode="explicit") is not None


def test_hosts_and_the_parent_share_one_ceiling(store: Store) -> None:
    owner = _shared(store, limit=3)
    mine = store.fanout.claim(KEY, owner=owner, limit=3)
    assert not isinstance(mine, LostRace)
    assert mine.items == ((0, 1), (1, 1), (2, 1))
    assert store.fanout.claim_for_host(HOST_A, 4) == []  # the parent holds all three
    assert store.fanout.settle(KEY, [_ok(0)], owner=owner) == 5
    [got] = store.fanout.claim_for_host(HOST_A, 4)
    assert (got.key, got.index, got.start) == (KEY, 3, 1)
    assert store.fanout.claim_for_host(HOST_B, 4) == []  # 1, 2 (parent) and 3 (host A)
    again = store.fanout.claim(KEY, owner=owner, limit=3)
    assert not isinstance(again, LostRace)
    assert again.items == ()


def test_the_settle_that_ends_the_last_item_re_queues_the_parked_parent(
        store: Store) -> None:
    owner = _shared(store, count=3, limit=2)
    _park_waiting(store, owner)
    assert store.launches.get("run-1").status == "parked"  # type: ignore[union-attr]
    first = store.fanout.claim_for_host(HOST_A, 4)
    assert [c.index for c in first] == [0, 1]
    logs = [ItemLog(0, "att-0", '{"stdout":"0\\n"}')]
    assert store.fanout.settle_held(KEY, [_ok(0), _ok(1)], holder=HOST_A, logs=logs) == 2
    assert store.launches.get("run-1").park_mode == "explicit"  # type: ignore[union-attr]
    [last] = store.fanout.claim_for_host(HOST_B, 4)
    assert store.fanout.settle_held(KEY, [_ok(last.index)], holder=HOST_B) == 1
    row = store.launches.get("run-1")
    assert row is not None
    assert (row.status, row.park_mode) == ("parked", "auto")
    assert [(i.state, i.starts) for i in store.fanout.items(KEY)] == [("ok", 1)] * 3
    assert store.fanout.logs(KEY) == logs
    assert store.fanout.claim_for_host(HOST_A, 4) == []


def test_a_slot_that_hands_itself_each_next_item_re_queues_the_parent_at_the_last(
        store: Store) -> None:
    """`settle_and_claim` with `want=1` (a host slot's chain): each settle claims the
    next item and leaves the parent parked while items are pending; the claim that
    takes the last pending one re-queues the parent (to wait for the last items where
    it resumes, engine/_fanout.py), and the settle that ends the last open item finds
    none left to claim."""
    owner = _shared(store, count=3, limit=1)
    _park_waiting(store, owner)
    [got] = store.fanout.claim_for_host(HOST_A, 4)
    chain = [got.index]
    modes = []
    while True:
        done, more = store.fanout.settle_and_claim(KEY, [_ok(got.index)], holder=HOST_A,
                                                   want=1)
        assert done == 1
        row = store.launches.get("run-1")
        assert row is not None
        modes.append(row.park_mode)
        if not more:
            break
        [got] = more
        chain.append(got.index)
    assert chain == [0, 1, 2]
    # Item 1's claim left item 2 pending; item 2's claim took the last: re-queued then.
    assert modes == ["explicit", "auto", "auto"]
    assert row.status == "parked"
    assert [(i.state, i.starts) for i in store.fanout.items(KEY)] == [("ok", 1)] * 3
    assert store.fanout.claim_for_host(HOST_B, 4) == []  # the node is done for the hosts


def test_a_dead_hosts_items_are_taken_over_after_their_lease_and_never_a_third_time(
        store: Store, clock: FakeClock) -> None:
    owner = _shared(store, count=2, limit=2)
    _park_waiting(store, owner)
    assert len(store.fanout.claim_for_host(HOST_A, 4)) == 2
    assert store.fanout.claim_for_host(HOST_B, 4) == []  # host A's leases hold
    clock.advance(31)  # host A died: no renewal
    taken = store.fanout.claim_for_host(HOST_B, 4)
    assert [(c.index, c.start) for c in taken] == [(0, 2), (1, 2)]
    assert store.fanout.settle_held(KEY, [_ok(0)], holder=HOST_A) == 0  # fenced off
    both = {(KEY, 0), (KEY, 1)}
    assert store.fanout.renew_held(HOST_A, both) == set()  # no longer host A's
    assert store.fanout.renew_held(HOST_B, both) == both
    clock.advance(20)
    assert store.fanout.renew_held(HOST_B, both) == both  # found by key, renewed
    clock.advance(20)  # 40 s since the claim, 20 since the renewal: still held
    assert store.fanout.claim_for_host(HOST_A, 4) == []
    assert [(i.state, i.starts) for i in store.fanout.items(KEY)] == [("running", 2)] * 2
    clock.advance(31)  # host B died too
    assert store.fanout.claim_for_host(HOST_A, 4) == []
    items = store.fanout.items(KEY)
    assert [(i.state, i.starts) for i in items] == [("failed", 2)] * 2
    assert all('"interrupted"' in (i.error_json or "") for i in items)
    row = store.launches.get("run-1")
    assert row is not None
    assert row.park_mode == "auto"


def test_fail_fast_on_a_host_cancels_the_rest_for_the_parked_parent(store: Store) -> None:
    owner = _shared(store, count=4, limit=2, fail_fast=True)
    _park_waiting(store, owner)
    store.fanout.claim_for_host(HOST_A, 1)
    store.fanout.claim_for_host(HOST_B, 1)
    failed = ItemEnding(0, "failed", error_json='{"code":"x"}')
    assert store.fanout.settle_held(KEY, [failed], holder=HOST_A) == 1
    assert [i.state for i in store.fanout.items(KEY)] == ["failed"] + ["cancelled"] * 3
    assert store.fanout.renew_held(HOST_B, {(KEY, 1)}) == set()  # host B stops its item
    row = store.launches.get("run-1")
    assert row is not None
    assert row.park_mode == "auto"


def test_a_cancelled_parents_open_items_end_and_holders_let_go(store: Store) -> None:
    owner = _shared(store, count=4, limit=2)
    _park_waiting(store, owner)
    store.fanout.claim_for_host(HOST_A, 1)
    store.launches.cancel("run-1")
    assert store.fanout.renew_held(HOST_A, {(KEY, 0)}) == set()  # its runner stops the item
    assert store.fanout.claim_for_host(HOST_B, 4) == []
    assert [i.state for i in store.fanout.items(KEY)] == ["cancelled"] * 4


def test_a_host_that_cannot_run_the_items_hands_them_back_to_the_parent(
        store: Store) -> None:
    owner = _shared(store, count=2, limit=2)
    _park_waiting(store, owner)
    [first, _] = store.fanout.claim_for_host(HOST_A, 4)
    assert store.fanout.release_held(KEY, [0, 1], holder=HOST_A) == 2
    store.fanout.refuse(first.key)
    row = store.launches.get("run-1")
    assert row is not None
    assert row.park_mode == "auto"
    assert store.fanout.claim_for_host(HOST_B, 4) == []
    assert [(i.state, i.starts) for i in store.fanout.items(KEY)] == [("pending", 0)] * 2
    resumed = store.launches.claim("run-1", runner_id="h2")
    assert not isinstance(resumed, LostRace)
    assert resumed.claim_token is not None
    assert store.fanout.wait_for_hosts(KEY, owner=resumed.claim_token) is False


def test_a_hosts_renewal_stops_only_items_it_lost_not_the_slots_next_item(
        store: Store, clock: FakeClock) -> None:
    """A slot's items share its control. The renewal looks at a snapshot of the items
    running here: one that ended and was settled since (so no longer held) must not
    cancel the control, which now runs the slot's next item; an item the parent
    cancelled while it runs is stopped."""
    from typing import cast

    from runner.engine import RunControl
    from runner.launch._itemwork import HostItems

    _shared(store, count=4, limit=2)
    items = HostItems(store, cast(Any, None), cast(Any, None), clock, runner_id="h",
                      lease_seconds=30)
    [first, other] = items.claim(2)
    slot, other_slot = RunControl(), RunControl()
    controls = items._controls  # what `run` registers for each item it runs
    controls[(KEY, first.index)] = slot
    controls[(KEY, other.index)] = other_slot
    snapshot = dict(controls)
    # `first` ends: its slot lets go of it, settles it and claims its next item.
    del controls[(KEY, first.index)]
    _, more = store.fanout.settle_and_claim(KEY, [_ok(first.index)], holder=items.holder,
                                            want=1)
    assert [m.index for m in more] == [2]
    controls[(KEY, 2)] = slot
    items.renew(snapshot)
    assert not slot.stopping  # item 2 runs on
    assert not other_slot.stopping
    # The parent cancels what is open: the next renewal stops both running items.
    owner = store.launches.get("run-1").claim_token  # type: ignore[union-attr]
    assert store.fanout.cancel_open(KEY, owner=owner, error_json='{"code":"cancelled"}') == 3
    items.renew(dict(controls))
    assert slot.stopping
    assert other_slot.stopping


def test_a_hosts_slots_read_a_new_visit_once(store: Store, clock: FakeClock,
                                             monkeypatch: Any) -> None:
    """A host's slots claiming items of a visit it has not read yet: one reads the
    parent run (folds its trace, resolves its definition), the others wait for that
    read instead of each doing it again."""
    import threading
    from types import SimpleNamespace
    from typing import cast

    from runner.launch import _itemwork
    from runner.launch._itemwork import HostItems

    _shared(store, count=4, limit=2)
    engines = SimpleNamespace(reading=lambda _run_id: None)
    items = HostItems(store, cast(Any, engines), cast(Any, None), clock, runner_id="h",
                      lease_seconds=30)
    opened: list[str] = []
    second_done = threading.Event()
    second: list[object] = []

    def fake_open(*_args: Any) -> str:
        opened.append("read")
        if len(opened) == 1:  # a second slot asks while this read is under way
            thread = threading.Thread(
                target=lambda: (second.append(items._host(KEY)), second_done.set()))
            thread.start()
            second_done.wait(timeout=1)  # before: it read the run too, at once
        return "cannot run them here"

    monkeypatch.setattr(_itemwork, "open_item_host", fake_open)
    first = items._host(KEY)
    assert second_done.wait(timeout=60)
    assert opened == ["read"]
    assert second == [first]
    items.close()



def test_the_ledger_reads_outputs_errors_and_logs_back_as_values(store: Store) -> None:
    """`StoreItems` decodes a visit's stored JSON (every row's in one parse): nulls stay
    None, each value lands on its own row, logs keep their item and attempt."""
    from runner.launch._items import StoreItems, item_rows

    owner = _shared(store, count=5, limit=5)
    store.fanout.claim(KEY, owner=owner, limit=4)
    store.fanout.settle(KEY, [ItemEnding(0, "ok", output_json='[1,"a,b",null]'),
                              ItemEnding(1, "failed", error_json='{"code":"x"}'),
                              ItemEnding(3, "ok", output_json="null")], owner=owner)
    [hosted] = store.fanout.claim_for_host(HOST_A, 1)
    store.fanout.settle_held(KEY, [ItemEnding(hosted.index, "ok", output_json="{}")],
                             holder=HOST_A, logs=[ItemLog(hosted.index, "a1", '{"out":"x,y"}'),
                                                  ItemLog(hosted.index, "a2", "{}")])
    ledger = StoreItems(store.fanout, "run-1", owner)
    got = [(r.index, r.state, r.output, r.error) for r in ledger.items("files", 1)]
    assert got == [(0, "ok", [1, "a,b", None], None), (1, "failed", None, {"code": "x"}),
                   (2, "running", None, None), (3, "ok", None, None), (4, "ok", {}, None)]
    assert [(r.output, r.error) for r in item_rows(store.fanout)("run-1", "files", 1)] == \
        [(r[2], r[3]) for r in got]
    assert ledger.logs("files", 1) == [(4, "a1", {"out": "x,y"}), (4, "a2", {})]


# -- ADR 0014: a host slot's next item claimed ahead --------------------------------------

def _states(store: Store) -> list[tuple[str, int]]:
    return [(i.state, i.starts) for i in store.fanout.items(KEY)]


def test_a_slot_claims_its_next_item_ahead_counted_apart_from_the_ceiling(
        store: Store) -> None:
    """A settle that hands a slot its next item also claims one ahead for it: its start
    counted, shown `pending`, not counted against the ceiling. The slot starts it when
    its item ends, and the settle beside it makes it the holder's own and claims the
    next ahead; one the slot will not start goes back, its start uncounted."""
    owner = _shared(store, count=8, limit=2)
    _park_waiting(store, owner)
    assert [c.index for c in store.fanout.claim_for_host(HOST_A, 2)] == [0, 1]
    handed = store.fanout.hand_on(KEY, [_ok(0)], holder=HOST_A, want=1, ahead=1)
    assert (handed.recorded, handed.promoted) == (1, False)
    assert [(c.index, c.start) for c in handed.claimed] == [(2, 1)]
    assert [(c.index, c.start) for c in handed.ahead] == [(3, 1)]
    assert store.fanout.holds_ahead(handed.ahead[0], HOST_A)
    assert not store.fanout.holds_ahead(handed.ahead[0], HOST_B)
    assert _states(store)[:5] == [("ok", 1), ("running", 1), ("running", 1), ("pending", 1),
                                  ("pending", 0)]
    assert store.fanout.progress("run-1") == {("files", 1): {"ok": 1, "running": 2,
                                                             "pending": 5}}
    assert store.fanout.claim_for_host(HOST_B, 4) == []  # items 1 and 2 fill the ceiling
    # Item 2 ends; the slot has started item 3 and settles item 2 beside it.
    beside = store.fanout.hand_on(KEY, [_ok(2)], holder=HOST_A, ahead=1, promote=3)
    assert (beside.recorded, beside.promoted, beside.claimed) == (1, True, [])
    assert [(c.index, c.start) for c in beside.ahead] == [(4, 1)]
    assert _states(store)[:5] == [("ok", 1), ("running", 1), ("ok", 1), ("running", 1),
                                  ("pending", 1)]
    assert store.fanout.claim_for_host(HOST_B, 4) == []  # items 1 and 3 run: still 2
    # The slot stops before it starts item 4: it goes back, its start uncounted.
    assert store.fanout.release_held(KEY, [4], holder=HOST_A) == 1
    assert _states(store)[4] == ("pending", 0)
    assert store.fanout.renew_held(HOST_A, {(KEY, 1), (KEY, 3), (KEY, 4)}) == {(KEY, 1),
                                                                               (KEY, 3)}


def test_no_item_is_claimed_ahead_once_few_are_left(store: Store) -> None:
    """The last items of a map are left to whichever slot of any host is free first:
    an item is claimed ahead only while the ceiling's worth stays pending besides."""
    owner = _shared(store, count=6, limit=2)
    _park_waiting(store, owner)
    store.fanout.claim_for_host(HOST_A, 2)
    first = store.fanout.hand_on(KEY, [_ok(0)], holder=HOST_A, want=1, ahead=1)
    assert [c.index for c in first.claimed] == [2]
    assert [c.index for c in first.ahead] == [3]  # 4 and 5 stay pending: the ceiling's 2
    second = store.fanout.hand_on(KEY, [_ok(1)], holder=HOST_A, want=1, ahead=1)
    assert [c.index for c in second.claimed] == [4]
    assert second.ahead == []  # only 5 is pending: it is left to any free slot


def test_an_item_claimed_ahead_and_cancelled_since_is_not_made_the_slots(
        store: Store) -> None:
    """fail_fast cancels every open item, those held ahead too: the slot's look before
    it starts one says so, and a settle that would promote it (the slot started it in
    the meantime) says it is not its own, so the slot stops it."""
    owner = _shared(store, count=8, limit=2, fail_fast=True)
    _park_waiting(store, owner)
    store.fanout.claim_for_host(HOST_A, 1)
    store.fanout.claim_for_host(HOST_B, 1)
    handed = store.fanout.hand_on(KEY, [_ok(0)], holder=HOST_A, want=1, ahead=1)
    [ahead] = handed.ahead
    failed = ItemEnding(1, "failed", error_json='{"code":"x"}')
    assert store.fanout.settle_held(KEY, [failed], holder=HOST_B) == 1
    assert not store.fanout.holds_ahead(ahead, HOST_A)
    later = store.fanout.hand_on(KEY, [_ok(2)], holder=HOST_A, ahead=1, promote=ahead.index)
    assert (later.recorded, later.promoted, later.ahead) == (0, False, [])
    assert [i.state for i in store.fanout.items(KEY)] == ["ok", "failed"] + ["cancelled"] * 6


def test_a_dead_hosts_items_claimed_ahead_are_taken_over_with_their_start_counted(
        store: Store, clock: FakeClock) -> None:
    """An item claimed ahead is renewed with the holder's running ones; once the holder
    is dead it is taken over like them, its start (counted at the claim ahead) kept."""
    owner = _shared(store, count=8, limit=2)
    _park_waiting(store, owner)
    store.fanout.claim_for_host(HOST_A, 2)
    handed = store.fanout.hand_on(KEY, [_ok(0)], holder=HOST_A, want=1, ahead=1)
    assert [c.index for c in handed.ahead] == [3]
    held = {(KEY, 1), (KEY, 2), (KEY, 3)}
    clock.advance(20)
    assert store.fanout.renew_held(HOST_A, held) == held
    clock.advance(20)  # 40 s since the claims, 20 since the renewal: all still held
    assert store.fanout.claim_for_host(HOST_B, 4) == []
    assert store.fanout.hand_on(KEY, [], holder=HOST_B, want=1).claimed == []
    clock.advance(31)  # host A died
    taken = store.fanout.claim_for_host(HOST_B, 4)
    assert [(c.index, c.start) for c in taken] == [(1, 2), (2, 2)]
    done, more = store.fanout.settle_and_claim(KEY, [_ok(1)], holder=HOST_B, want=1)
    assert done == 1
    assert [(c.index, c.start) for c in more] == [(3, 2)]  # A's ahead item, second start
    assert store.fanout.hand_on(KEY, [_ok(2)], holder=HOST_A, ahead=1, promote=3).promoted \
        is False  # host A, back from the dead, holds none of it
