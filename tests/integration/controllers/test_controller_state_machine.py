"""Property test: any interleaving of spec edits, wake-ups, passes, claim expiries and
restarts keeps the controller invariants (seed 004, DESIGN §7).

Hypothesis drives a real SqliteStore on a fake clock and a real ControllerManager.
The reconciler sometimes edits the spec in the middle of its own pass (a CAS
conflict), fails once per generation for some values (backoff), or asks to look
again later (requeue_after). A "dead worker" can grab a claim and never finish.

Invariants after every step:
- at most one queue row per key (a wake-up for a key without a resource is kept
  until a pass finds nothing to do);
- generation equals the model's count of real spec changes (so it only grows, and
  only on a spec change); status.observed_generation <= generation, and so for
  every condition.
After `drain` (expire every lease, run everything due, repeat): no lost wake-up —
every resource was reconciled at its latest generation and reflects its latest
spec, and the queue is empty.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from runner.clock import FakeClock
from runner.controllers import (
    Condition,
    ControllerManager,
    ManagerConfig,
    ReconcileContext,
    Result,
    define_controller,
)
from runner.store import SqliteStore
from runner.store._controller_interface import Resource

LEASE = 30.0
KEYS = st.sampled_from(["a", "b", "c"])
VALUES = st.integers(min_value=0, max_value=3)  # 2: fails once per generation; 3: requeue_after


class ControllerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # Logic, not durability, is under test: a RAM disk keeps fsync out of the way.
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self.dir = Path(tempfile.mkdtemp(prefix="wfrun-ctl-sm-", dir=shm))
        self.clock = FakeClock()
        self.specs: dict[str, dict[str, Any]] = {}
        self.generations: dict[str, int] = {}
        self.max_generation: dict[str, int] = {}
        self.edit_in_pass: dict[str, int] = {}  # key -> value the next pass writes as spec
        self.failed_once: set[tuple[str, int]] = set()
        self.delayed_once: set[tuple[str, int]] = set()
        self.controller = define_controller("sm", self._reconcile)
        self.store = self._open()
        self.manager = self._manager()

    # -- plumbing -------------------------------------------------------------------------
    def _open(self) -> SqliteStore:
        return SqliteStore(self.dir / "store.sqlite3", clock=self.clock)

    def _manager(self) -> ControllerManager:
        return ControllerManager(self.store, [self.controller], clock=self.clock,
                                 config=ManagerConfig(lease_seconds=LEASE))

    def _model_apply(self, key: str, spec: dict[str, Any], got: Resource) -> None:
        if key not in self.specs:
            expected = 1
        elif self.specs[key] != spec:
            expected = self.generations[key] + 1
        else:
            expected = self.generations[key]
        assert got.generation == expected, (key, spec, got.generation, expected)
        self.specs[key], self.generations[key] = dict(spec), expected

    def _reconcile(self, ctx: ReconcileContext, r: Resource) -> Result:
        edit = self.edit_in_pass.pop(r.key, None)
        if edit is not None:  # someone changes the spec while this pass works
            spec = {"value": edit}
            self._model_apply(r.key, spec, self.store.resources.apply("sm", r.key, spec))
        value = r.spec["value"]
        if value == 2 and (r.key, r.generation) not in self.failed_once:
            self.failed_once.add((r.key, r.generation))
            raise RuntimeError("flaky provider")
        status = {"value": value, "generation": r.generation}
        ready = [Condition("Ready", "True", "Reconciled")]
        if value == 3 and (r.key, r.generation) not in self.delayed_once:
            self.delayed_once.add((r.key, r.generation))
            return ctx.requeue_after(45, status, ready)
        return ctx.settled(status, ready)

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- rules ------------------------------------------------------------------------------
    @rule(key=KEYS, value=VALUES)
    def edit_spec(self, key: str, value: int) -> None:
        spec = {"value": value}
        self._model_apply(key, spec, self.manager.apply("sm", key, spec))

    @rule(key=KEYS, value=VALUES)
    def edit_spec_during_next_pass(self, key: str, value: int) -> None:
        if key in self.specs:
            self.edit_in_pass[key] = value

    @rule(key=KEYS, delay=st.sampled_from([0.0, 5.0, 120.0]))
    def wake_up(self, key: str, delay: float) -> None:
        self.manager.enqueue("sm", key, delay=delay)

    @rule(passes=st.integers(min_value=1, max_value=4))
    def work(self, passes: int) -> None:
        for _ in range(passes):
            self.manager.reconcile_one()

    @rule()
    def run_until_idle(self) -> None:
        self.manager.run_until_idle()

    @rule()
    def worker_dies_holding_a_claim(self) -> None:
        self.store.reconcile_queue.claim_next(runner_id="dead-worker", lease_seconds=LEASE)

    @rule(seconds=st.sampled_from([1.0, LEASE + 1, 200.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def restart(self) -> None:
        self.store.close()
        self.store = self._open()
        self.manager = self._manager()

    @rule()
    def drain(self) -> None:
        for _ in range(50):
            self.clock.advance(LEASE + 300)  # every lease expired, every delay due
            if self.manager.run_until_idle() == 0:
                break
        else:
            raise AssertionError("the queue never drained")
        assert self.store.reconcile_queue.list() == []
        for key, spec in self.specs.items():
            r = self.store.resources.get("sm", key)
            assert r is not None
            assert r.spec == spec
            assert r.status.get("observed_generation") == r.generation, (key, r.status)
            assert r.status["controller_status"]["value"] == spec["value"]
            assert r.status["controller_status"]["generation"] == r.generation
            (ready,) = r.status["conditions"]
            assert (ready["status"], ready["observed_generation"]) == ("True", r.generation)

    # -- invariants -------------------------------------------------------------------------
    @invariant()
    def one_queue_row_per_existing_key(self) -> None:
        rows = [(q.controller, q.key) for q in self.store.reconcile_queue.list()]
        assert len(rows) == len(set(rows))
        assert {k for _, k in rows} <= {"a", "b", "c"}

    @invariant()
    def generations_follow_spec_changes_only(self) -> None:
        for r in self.store.resources.list("sm"):
            assert r.generation == self.generations[r.key]
            assert r.generation >= self.max_generation.get(r.key, 0)
            self.max_generation[r.key] = r.generation
            observed = r.status.get("observed_generation", 0)
            assert observed <= r.generation
            for c in r.status.get("conditions") or []:
                assert c["observed_generation"] <= r.generation


ControllerMachine.TestCase.settings = settings(
    max_examples=30, stateful_step_count=30, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow])
TestControllerInvariants = ControllerMachine.TestCase
