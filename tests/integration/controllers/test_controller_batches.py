"""Batched claims and group-committed ends inside one manager (real SQLite store).

- A stopping manager hands back the keys of its batch it has not reached
  (`reconcile_released`), so another process need not wait for their lease.
- Several workers' pass ends share commits, and every pass is committed by the
  time `stop()` returns (no end is left in memory).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ctlkit import meeting_reconciler
from waiting import DEADLINE, wait_until

from runner.controllers import (
    Condition,
    ControllerManager,
    ManagerConfig,
    ReconcileContext,
    Result,
    define_controller,
    is_true,
)
from runner.store import SqliteStore

READY = [Condition("Ready", "True", "Done")]


def test_a_stopping_manager_releases_the_keys_it_has_not_reached(tmp_path: Path) -> None:
    entered = threading.Event()
    seen: list[str] = []

    def reconcile(ctx: ReconcileContext, resource: Any) -> Result:
        seen.append(resource.key)
        entered.set()
        ctx.cancelled.wait(DEADLINE)  # stop() cancels the running pass
        return ctx.settled(None, READY)

    with SqliteStore(tmp_path / "store.sqlite3") as store:
        manager = ControllerManager(
            store, [define_controller("gate", reconcile, timeout=None)],
            config=ManagerConfig(workers=1, claim_batch=8, idle_poll=0.01))
        for key in ("a", "b", "c"):
            manager.apply("gate", key, {})
        manager.start()
        assert entered.wait(DEADLINE)
        held = store.reconcile_queue.list("gate")
        assert all(i.claim_token is not None for i in held)  # one batch took all three
        manager.stop(grace=DEADLINE)
        assert seen == ["a"]
        rows = {i.key: i for i in store.reconcile_queue.list("gate")}
        assert set(rows) == {"b", "c"}  # "a" settled; the others handed back
        assert all(i.claim_token is None and i.available_at <= store.now_ms()
                   for i in rows.values())
        for key in ("b", "c"):
            types = [e.type for e in store.controller_events.read(controller="gate", key=key)]
            assert types[-2:] == ["reconcile_started", "reconcile_released"]
        # Another manager takes them at once (no lease to wait for).
        again = ControllerManager(store, [define_controller(
            "gate", lambda ctx, r: ctx.settled(None, READY), timeout=None)])
        assert again.run_until_idle() == 2


def test_four_workers_share_commits_and_stop_leaves_nothing_uncommitted(
        tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "store.sqlite3") as store:
        manager = ControllerManager(
            store, [define_controller("noop", lambda ctx, r: ctx.settled(None, READY),
                                      timeout=None)],
            config=ManagerConfig(workers=4, idle_poll=0.01))
        keys = [f"k{i:03d}" for i in range(200)]
        for key in keys:
            manager.apply("noop", key, {})
        manager.start()
        wait_until(lambda: manager.passes >= len(keys), timeout=DEADLINE,
                   what="every key to be reconciled")
        manager.stop(grace=DEADLINE)
        assert store.reconcile_queue.list() == []  # every end committed by stop()
        for key in keys:
            r = store.resources.get("noop", key)
            assert r is not None
            assert is_true(r.status, "Ready", r.generation)
        assert manager.passes == len(keys)
        assert manager.ends.items == len(keys)
        assert manager.ends.commits < len(keys)  # ends shared transactions
        events = store.controller_events.read(controller="noop", limit=10_000)
        finished = [e.key for e in events if e.type == "reconcile_finished"]
        assert sorted(finished) == keys  # one finished record per pass, none lost


def test_a_batch_is_shared_by_the_workers_so_slow_passes_still_run_in_parallel(
        tmp_path: Path) -> None:
    # One worker claims all four keys in one transaction; the other three are woken and
    # take them from the batch, so four slow passes run at once (the barrier needs all
    # four inside a pass together; one worker running its batch alone would break it).
    reconcile, met = meeting_reconciler(4)

    with SqliteStore(tmp_path / "store.sqlite3") as store:
        manager = ControllerManager(
            store, [define_controller("slow", reconcile, timeout=None)],
            config=ManagerConfig(workers=4, claim_batch=8, idle_poll=DEADLINE))
        for key in ("a", "b", "c", "d"):
            manager.apply("slow", key, {})
        manager.start()
        wait_until(lambda: len(met) == 4, timeout=DEADLINE, what="four passes together")
        manager.stop(grace=DEADLINE)
        assert manager.claims == 1  # one claim transaction took all four
        assert sorted(met) == ["a", "b", "c", "d"]
        assert store.reconcile_queue.list() == []


def test_a_key_that_waited_in_a_claimed_batch_is_read_again_before_its_pass(
        tmp_path: Path) -> None:
    # Issue 34.17: the batch's claim read every row at once; a key that waits behind a
    # slow pass must be reconciled against its resource as it is when its turn comes
    # (deleting that re-read failed no test).
    release = threading.Event()
    entered = threading.Event()
    seen: list[tuple[str, Any, int]] = []

    def reconcile(ctx: ReconcileContext, resource: Any) -> Result:
        seen.append((resource.key, resource.spec, resource.generation))
        if resource.key == "a":
            entered.set()
            release.wait(DEADLINE)
        return ctx.settled(None, READY)

    with SqliteStore(tmp_path / "store.sqlite3") as store:
        manager = ControllerManager(
            store, [define_controller("gate", reconcile, timeout=None)],
            config=ManagerConfig(workers=1, claim_batch=8, idle_poll=0.01))
        manager.apply("gate", "a", {"v": 1})
        manager.apply("gate", "b", {"v": 1})
        manager.start()
        try:
            assert entered.wait(DEADLINE)
            held = {i.key: i for i in store.reconcile_queue.list("gate")}
            assert held["b"].claim_token is not None  # b waits inside the claimed batch
            manager.apply("gate", "b", {"v": 2})  # the user edits b meanwhile
            release.set()
            wait_until(lambda: any(k == "b" for k, _, _ in seen), timeout=DEADLINE,
                       what="b's pass")
        finally:
            release.set()
            manager.stop(grace=DEADLINE)
        first_b = next((spec, gen) for key, spec, gen in seen if key == "b")
        assert first_b == ({"v": 2}, 2)
