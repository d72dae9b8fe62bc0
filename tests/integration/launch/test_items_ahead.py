"""A host slot's next item, claimed ahead, starts before the settle of the item before
it commits (ADR 0014): that commit and its WAL flush overlap the next item instead of
standing between the two. Real SQLite store, real item processes (faultkit's map of 8
shell items, 2 at a time, each logging its run to effects.log)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from faultkit import FAN_ITEMS, World
from waiting import wait_until

from runner.engine import RunControl
from runner.store.domain._fanout import ItemKey


def test_a_slot_starts_its_item_claimed_ahead_before_the_last_ones_settle_commits(
        tmp_path: Path) -> None:
    world = World(tmp_path / "p", seed=1, hosted=True)
    co = world.coordinator(0.0)
    record = co.prepare("fan", {"who": "ahead"})
    claimed = co.claim_next(None)
    assert claimed is not None
    co.execute(claimed)  # the run parks at its shared map: host slots run the items
    assert world.store.launches.get(record.run_id).status == "parked"  # type: ignore[union-attr]
    items = co.host_items()
    fanout = items._fanout
    hand_on = fanout.hand_on
    promoted: list[int] = []

    def settle_beside(*args: Any, **kwargs: Any) -> Any:
        started = kwargs.get("promote")
        if started is not None:
            # Held until the item claimed ahead has run: its effect is in the log before
            # the settle of the item before it commits. Settled first, it never would be.
            line = f"{record.run_id} item {started}"
            wait_until(lambda: line in world.effects(), what=lambda: f"{line!r} in the log")
            assert [i.state for i in fanout.items(args[0])][started] == "pending"
            promoted.append(started)
        return hand_on(*args, **kwargs)

    fanout.hand_on = settle_beside  # type: ignore[method-assign]
    try:
        for claim in items.claim(2):  # two slots, one after the other
            assert items.run(claim, RunControl()) == "ok"
    finally:
        items.close()
    assert promoted  # the chain ran items claimed ahead, each started before its settle
    ran = [line.split()[-1] for line in world.effects() if line.startswith(record.run_id)]
    assert sorted(ran) == sorted(str(i) for i in range(FAN_ITEMS))  # each item once
    rows = fanout.items(ItemKey(record.run_id, "each", 1))
    assert [(r.state, r.starts) for r in rows] == [("ok", 1)] * FAN_ITEMS
    world.store.close()


def test_a_slot_whose_look_at_its_ahead_item_fails_gives_it_back_and_goes_on(
        tmp_path: Path) -> None:
    """The store does not answer the look before an ahead item starts: the slot does
    not start it, gives it back, and the map still runs every item once."""
    from runner.store import StoreUnavailable

    world = World(tmp_path / "p", seed=2, hosted=True)
    co = world.coordinator(0.0)
    record = co.prepare("fan", {"who": "busy"})
    claimed = co.claim_next(None)
    assert claimed is not None
    co.execute(claimed)
    items = co.host_items()
    fanout = items._fanout
    holds = fanout.holds_ahead
    refused: list[int] = []

    def busy_once(claim: Any, holder: str) -> bool:
        if not refused:
            refused.append(claim.index)
            raise StoreUnavailable("database is locked (busy)")
        return holds(claim, holder)

    fanout.holds_ahead = busy_once  # type: ignore[method-assign]
    try:
        for claim in items.claim(2):
            items.run(claim, RunControl())
        # The item given back is pending again: a later claim runs it.
        for claim in items.claim(2):
            items.run(claim, RunControl())
    finally:
        items.close()
    assert refused
    ran = [line.split()[-1] for line in world.effects() if line.startswith(record.run_id)]
    assert sorted(ran) == sorted(str(i) for i in range(FAN_ITEMS))  # each item once
    rows = fanout.items(ItemKey(record.run_id, "each", 1))
    assert [r.state for r in rows] == ["ok"] * FAN_ITEMS
    assert rows[refused[0]].starts == 1  # given back uncounted, then run once
    world.store.close()
