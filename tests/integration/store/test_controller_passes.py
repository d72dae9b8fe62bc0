"""Conformance: batched passes (`claim_batch`, `finish_passes`), on every backend.

A batch claim is N `claim_next`s in one transaction, with each key's resource and
started record; `finish_passes` is N pass ends in one transaction where each end is
judged on its own: its claim must hold, then its status compare-and-swap, then its
events and its completion. One bad end never spoils another.
"""

from __future__ import annotations

import pytest
from storekit import FakeClock

from runner.store import LostRace
from runner.store._controller_interface import (
    STATUS_MAX_BYTES,
    ControllerStore,
    PassEnd,
    QueueItem,
)

C = "noop"


def _started(item: QueueItem) -> tuple[str, dict[str, object], str]:
    return ("reconcile_started", {"runner": "w1"}, f"rid-{item.key}")


def _types(store: ControllerStore, key: str) -> list[str]:
    return [e.type for e in store.controller_events.read(controller=C, key=key)]


def test_a_batch_claim_takes_the_oldest_keys_with_their_resources(
        cstore: ControllerStore, clock: FakeClock) -> None:
    for i in range(5):
        cstore.resources.apply(C, f"k{i}", {"i": i})
        clock.advance(1)
    cstore.reconcile_queue.enqueue(C, "no-resource")
    q = cstore.reconcile_queue
    first = q.claim_batch(runner_id="w1", lease_seconds=30, limit=3, claim_event=_started)
    assert [c.item.key for c in first] == ["k0", "k1", "k2"]
    assert all(c.item.claim_token and c.item.runner_id == "w1" and c.item.epoch == 1
               for c in first)
    assert [c.resource.spec if c.resource else None for c in first] == [
        {"i": 0}, {"i": 1}, {"i": 2}]
    assert len({c.item.claim_token for c in first}) == 1  # one fresh token per batch
    assert _types(cstore, "k0") == ["reconcile_started"]
    rest = q.claim_batch(runner_id="w2", lease_seconds=30, limit=10)
    assert {c.item.claim_token for c in rest}.isdisjoint({c.item.claim_token for c in first})
    assert [(c.item.key, c.resource is None) for c in rest] == [
        ("k3", False), ("k4", False), ("no-resource", True)]
    assert _types(cstore, "k3") == []  # no claim_event asked for
    assert q.claim_batch(runner_id="w3", lease_seconds=30, limit=10) == []
    assert q.claim_batch(runner_id="w3", lease_seconds=30, limit=10, controllers=[]) == []
    with pytest.raises(ValueError, match="1 to 256 keys"):
        q.claim_batch(runner_id="w3", lease_seconds=30, limit=0)


def test_each_end_of_a_group_commit_is_judged_on_its_own(
        cstore: ControllerStore, clock: FakeClock) -> None:
    r, q = cstore.resources, cstore.reconcile_queue
    keys = ("taken", "ok", "stale", "huge", "dirty")
    for key in keys:
        r.apply(C, key, {"key": key})
        clock.advance(0.001)  # "taken" is the oldest
    # "taken" is claimed on a short lease that runs out; the others on a long one.
    claimed = {c.item.key: c for c in q.claim_batch(runner_id="w1", lease_seconds=5,
                                                   limit=1, claim_event=_started)}
    clock.advance(6)
    claimed.update({c.item.key: c for c in q.claim_batch(
        runner_id="w1", lease_seconds=30, limit=4, claim_event=_started)})
    assert set(claimed) == set(keys)
    # While the passes ran: "taken" was reclaimed by another worker, "stale"'s status
    # moved on, "dirty" was woken again.
    assert [c.item.key for c in q.claim_batch(runner_id="w2", lease_seconds=30,
                                              limit=10)] == ["taken"]
    stale = claimed["stale"].resource
    assert stale is not None
    assert not isinstance(r.update_status(C, "stale", stale.resource_version, {"by": "other"}),
                          LostRace)
    q.enqueue(C, "dirty")

    def end(key: str) -> PassEnd:
        c = claimed[key]
        assert c.item.claim_token is not None
        assert c.resource is not None
        status = {"blob": "x" * STATUS_MAX_BYTES} if key == "huge" else {"observed": key}
        return PassEnd(C, key, c.item.claim_token, outcome="settled",
                       events=[("reconcile_finished", {"result": "settled"}, f"rid-{key}")],
                       status=status, expected_version=c.resource.resource_version,
                       conflict_events=[("reconcile_conflict", {}, f"rid-{key}")])

    results = dict(zip(keys, q.finish_passes([end(k) for k in keys]), strict=True))

    assert results["taken"] == LostRace(f"{C}/taken", "token_mismatch")
    taken = r.get(C, "taken")
    assert taken is not None
    assert taken.status == {}
    assert _types(cstore, "taken") == ["reconcile_started"]

    assert results["ok"] == "finished"
    ok = r.get(C, "ok")
    assert ok is not None
    assert ok.status == {"observed": "ok"}
    assert q.get(C, "ok") is None
    assert _types(cstore, "ok") == ["reconcile_started", "reconcile_finished"]

    assert results["stale"] == "conflict"
    after = r.get(C, "stale")
    assert after is not None
    assert after.status == {"by": "other"}
    again = q.get(C, "stale")
    assert again is not None
    assert again.claim_token is None
    assert again.available_at <= cstore.now_ms()
    assert _types(cstore, "stale") == ["reconcile_started", "reconcile_conflict"]

    assert isinstance(results["huge"], ValueError)
    assert "limit is 65536 bytes" in str(results["huge"])
    held = q.get(C, "huge")
    assert held is not None
    assert held.claim_token == claimed["huge"].item.claim_token
    assert _types(cstore, "huge") == ["reconcile_started"]

    assert results["dirty"] == "finished"
    row = q.get(C, "dirty")
    assert row is not None
    assert row.claim_token is None
    assert not row.dirty
    dirty = r.get(C, "dirty")
    assert dirty is not None
    assert dirty.status == {"observed": "dirty"}


def test_an_unchanged_status_is_not_rewritten(cstore: ControllerStore) -> None:
    r, q = cstore.resources, cstore.reconcile_queue
    applied = r.apply(C, "k", {}, {"observed": 1})
    (c,) = q.claim_batch(runner_id="w1", lease_seconds=30, limit=5)
    assert c.item.claim_token is not None
    assert q.finish_passes([PassEnd(C, "k", c.item.claim_token, outcome="requeue_after",
                                    delay=60, status={"observed": 1},
                                    expected_version=applied.resource_version)]) == ["finished"]
    same = r.get(C, "k")
    assert same is not None
    assert same.resource_version == applied.resource_version
    row = q.get(C, "k")
    assert row is not None
    assert row.available_at == cstore.now_ms() + 60_000
