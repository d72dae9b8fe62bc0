"""How a manager's workers share the work (real SQLite store, real threads).

- Blocking reconcilers run as many at once as there are workers, however few lanes
  the manager's own Python gets (runner/controllers/_lanes.py): four reconcilers that
  wait on one barrier all reach it, with one lane, inline or under a timeout, for a
  controller known to block and for one whose calls had returned at once.
- An idle manager does not spin: one idle worker looks at the store each
  `idle_poll`, the others sleep until there is work for them.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from ctlkit import meeting_reconciler
from waiting import DEADLINE, wait_until

from runner.controllers import (
    Condition,
    ControllerManager,
    ManagerConfig,
    define_controller,
)
from runner.store import SqliteStore

READY = [Condition("Ready", "True", "Done")]


@pytest.mark.parametrize("timeout", [None, 30.0], ids=["inline", "under-a-timeout"])
@pytest.mark.parametrize("habit", ["blocking", "seemed-fast"])
def test_four_blocking_reconcilers_meet_at_a_barrier_with_one_lane(
        tmp_path: Path, timeout: float | None, habit: str) -> None:
    # With one lane, four passes can only be inside the reconciler together if each
    # worker's lane is handed over: at once for a controller known to block, by a
    # take-over for one whose calls have so far returned at once. If neither
    # happened the barrier (four parties) would break.
    reconcile, met = meeting_reconciler(4)

    with SqliteStore(tmp_path / "store.sqlite3") as store:
        manager = ControllerManager(
            store, [define_controller("slow", reconcile, timeout=timeout)],
            config=ManagerConfig(workers=4, lanes=1, idle_poll=DEADLINE))
        if habit == "seemed-fast":
            for _ in range(50):  # as if its last 50 calls had returned at once
                manager.habits.record("slow", 0.0)
            assert not manager.habits.blocks("slow")
        for key in ("a", "b", "c", "d"):
            manager.apply("slow", key, {})
        manager.start()
        wait_until(lambda: len(met) == 4, what="four passes together")
        manager.stop(grace=DEADLINE)
        assert sorted(met) == ["a", "b", "c", "d"]
        if habit == "seemed-fast":  # three workers took a blocked lane over
            assert manager.lanes.takeovers >= 3
        else:  # handed over before each call, never taken
            assert manager.lanes.takeovers == 0
            assert manager.habits.blocks("slow")
        assert store.reconcile_queue.list() == []
        for key in met:
            r = store.resources.get("slow", key)
            assert r is not None
            assert r.status["observed_generation"] == 1


def test_an_idle_manager_has_one_worker_polling_the_store(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "store.sqlite3") as store:
        manager = ControllerManager(
            store, [define_controller("noop", lambda ctx, r: ctx.settled(None, READY),
                                      timeout=None)],
            config=ManagerConfig(workers=4, idle_poll=0.005))
        callers: list[str] = []
        real_claim = store.reconcile_queue.claim_batch

        def claim_batch(**kwargs: Any) -> Any:  # a spy: the real claim, its caller noted
            callers.append(threading.current_thread().name)
            return real_claim(**kwargs)

        store.reconcile_queue.claim_batch = claim_batch  # type: ignore[method-assign]
        manager.start()
        # Each worker looks once as it starts; once all four have, one polls.
        first = wait_until(lambda: len(set(callers)) == 4 and len(callers),
                           what="every worker's first look")
        wait_until(lambda: len(callers) >= first + 30, what="30 more polls")
        manager.stop(grace=DEADLINE)
        # The poller's role may pass once, to the last worker to go idle, while the
        # previous poller's look is in flight; after that one thread does every look.
        later = callers[first + 2:]
        assert len(later) >= 28
        assert len(set(later)) == 1, sorted(set(later))
        # And it still finds work: a key applied now is reconciled by the poller's look.
        manager.start()
        manager.apply("noop", "late", {})
        wait_until(lambda: manager.passes == 1, what="the late key's pass")
        manager.stop(grace=DEADLINE)
        r = store.resources.get("noop", "late")
        assert r is not None
        assert r.status["observed_generation"] == 1
