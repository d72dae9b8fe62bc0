"""The controller runtime in one process: queue, CAS, generations, recovery (seed 004).

Acceptance criteria proved here (the multi-process ones are in
test_controller_processes.py):
(a) ten identical enqueues -> one pending key and no duplicate child run
(c) a stale resource version cannot overwrite newer status
(d) a spec change invalidates readiness from an older generation
(e) delayed work and expired claims recover after the store is opened again
(i) shutdown leaves no in-memory state needed for recovery
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from ctlkit import Harness, probe_controller, read_log, store_path, wait_for
from waiting import DEADLINE

from runner.clock import FakeClock, SystemClock
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
from runner.store._controller_interface import Resource
from runner.store._records import LostRace


class Gate:
    """A reconciler that waits for the test to let each pass finish."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.seen: list[tuple[int, int]] = []  # (generation, resource_version) per pass

    def reconcile(self, ctx: ReconcileContext, r: Resource) -> Result:
        self.seen.append((r.generation, r.resource_version))
        self.entered.set()
        assert self.release.wait(10)
        return ctx.settled({"value": r.spec.get("value")}, [Condition("Ready", "True", "Done")])


@pytest.fixture
def gate() -> Gate:
    return Gate()


#: A child that runs until the test creates `child.gate` in the project (its working
#: folder), so it cannot end, and wake its parent's key again, before the test says so.
GATED_CHILD = """\
name: gated-child
input: {type: object}
start: wait
nodes:
  wait: {action: {shell: [sh, -c, "until [ -e child.gate ]; do sleep 0.1; done"]}}
"""


@pytest.fixture
def h(project: Path, gate: Gate) -> Any:
    (project / ".wfrun" / "workflows" / "gated-child.yaml").write_text(GATED_CHILD)
    harness = Harness(project, [probe_controller(project),
                                define_controller("gate", gate.reconcile)])
    yield harness
    gate.release.set()
    (project / "child.gate").touch()  # a test that failed early leaves no child waiting
    harness.close()


def in_thread(fn: Any) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


# -- (a) ----------------------------------------------------------------------------------
def test_ten_identical_enqueues_make_one_pending_key_and_one_child_run(h: Harness) -> None:
    m = h.manager()
    # The child waits for the test: a quick one could end, and wake the key for a second
    # (legitimate) pass, before run_until_idle's next look at the queue.
    m.apply("probe", "k", {"child": "gated-child"})
    for _ in range(10):
        m.enqueue("probe", "k")
    h.store.reconcile_queue.enqueue_many([("probe", "k")] * 10)
    rows = h.store.reconcile_queue.list()
    assert [(r.controller, r.key, r.claim_token, r.dirty) for r in rows] == [
        ("probe", "k", None, False)]
    assert m.run_until_idle() == 1  # one pass for eleven wake-ups; it asks for the child
    assert m.children is not None
    assert m.children.busy  # the child runs, waiting for its gate
    for _ in range(10):  # more wake-ups while the child runs
        m.enqueue("probe", "k")
    (h.root / "child.gate").touch()
    h.drain(m, lambda: (h.ready("probe", "k") or {}).get("status") == "True")
    uid = h.resource("probe", "k").uid
    requests = h.store.workflow_requests.list(uid)
    assert [(r.request_key, r.state, r.attempt) for r in requests] == [
        ("child:1", "succeeded", 1)]
    assert h.run_ids() == [requests[0].run_id]
    assert h.events("probe", "k").count("reconcile_started") == m.passes


def test_wake_up_during_a_pass_makes_exactly_one_more_pass(h: Harness, gate: Gate) -> None:
    m = h.manager()
    m.apply("gate", "k", {"value": 1})
    t = in_thread(m.reconcile_one)
    assert gate.entered.wait(DEADLINE)
    for _ in range(5):
        h.store.reconcile_queue.enqueue("gate", "k")
    row = h.store.reconcile_queue.get("gate", "k")
    assert row is not None
    assert row.dirty
    assert row.claim_token is not None
    gate.release.set()
    t.join(DEADLINE)
    assert m.run_until_idle() == 1
    assert m.run_until_idle() == 0
    assert len(gate.seen) == 2
    assert h.store.reconcile_queue.list() == []


# -- (c) ----------------------------------------------------------------------------------
def test_stale_pass_cannot_overwrite_newer_status(h: Harness, gate: Gate) -> None:
    m = h.manager()
    first = m.apply("gate", "k", {"value": "old"})
    t = in_thread(m.reconcile_one)
    assert gate.entered.wait(DEADLINE)
    newer = m.apply("gate", "k", {"value": "new"})  # lands while the pass works on "old"
    assert newer.generation == first.generation + 1
    gate.release.set()
    t.join(DEADLINE)
    after = h.resource("gate", "k")
    assert after.status == newer.status  # the stale pass wrote nothing
    assert after.status["observed_generation"] == 0
    assert after.resource_version == newer.resource_version
    types = h.events("gate", "k")
    assert "reconcile_conflict" in types
    assert "reconcile_finished" not in types
    row = h.store.reconcile_queue.get("gate", "k")
    assert row is not None
    assert row.claim_token is None
    assert row.available_at <= h.store.now_ms()  # another pass is due now
    assert m.run_until_idle() == 1
    final = h.resource("gate", "k")
    assert final.status["controller_status"] == {"value": "new"}
    assert final.status["observed_generation"] == 2
    assert gate.seen == [(1, first.resource_version), (2, newer.resource_version)]


def test_status_write_is_compare_and_swap_on_resource_version(h: Harness) -> None:
    m = h.manager()
    r = m.apply("probe", "k", {"value": 1})
    ok = h.store.resources.update_status("probe", "k", r.resource_version, {"x": 1})
    assert not isinstance(ok, LostRace)
    assert ok.generation == r.generation
    stale = h.store.resources.update_status("probe", "k", r.resource_version, {"x": 2})
    assert isinstance(stale, LostRace)
    assert h.resource("probe", "k").status == {"x": 1}


# -- (d) ----------------------------------------------------------------------------------
def test_spec_change_invalidates_readiness_of_an_older_generation(h: Harness) -> None:
    m = h.manager()
    m.apply("probe", "k", {"value": 1})
    m.run_until_idle()
    r1 = h.resource("probe", "k")
    ready1 = h.ready("probe", "k")
    assert ready1 is not None
    assert (ready1["status"], ready1["observed_generation"]) == ("True", 1)
    assert is_true(r1.status, "Ready", r1.generation)

    same = m.apply("probe", "k", {"value": 1})  # identical spec: no new generation
    assert same.generation == 1
    assert is_true(same.status, "Ready", same.generation)
    m.run_until_idle()

    r2 = m.apply("probe", "k", {"value": 2})
    assert r2.generation == 2
    assert r2.status["conditions"] == h.resource("probe", "k").status["conditions"]
    assert not is_true(r2.status, "Ready", r2.generation)  # still "True", but for gen 1
    assert is_true(r2.status, "Ready", 1)

    h.clock.advance(60)
    m.run_until_idle()
    r3 = h.resource("probe", "k")
    assert is_true(r3.status, "Ready", r3.generation)
    assert r3.status["observed_generation"] == 2
    assert r3.status["controller_status"]["value"] == 2
    ready3 = h.ready("probe", "k")
    assert ready3 is not None
    # the condition stayed True, so its transition time did not move
    assert ready3["last_transition_time"] == ready1["last_transition_time"]
    assert ready3["observed_generation"] == 2


# -- (e) ----------------------------------------------------------------------------------
def test_delayed_wake_up_survives_reopening_the_store(h: Harness) -> None:
    m = h.manager()
    m.apply("probe", "k", {"delay": 120})
    assert m.run_until_idle() == 1
    assert (h.ready("probe", "k") or {}).get("reason") == "Waiting"
    h.reopen()  # a new process: nothing in memory
    m2 = h.manager()
    assert m2.run_until_idle() == 0
    h.clock.advance(119)
    assert m2.run_until_idle() == 0
    h.clock.advance(1)
    assert m2.run_until_idle() == 1
    assert (h.ready("probe", "k") or {}).get("reason") == "Done"
    assert h.store.reconcile_queue.list() == []


def test_sooner_wake_up_wins_over_a_delayed_one(h: Harness) -> None:
    m = h.manager()
    m.apply("probe", "k", {"delay": 300})
    m.run_until_idle()
    m.enqueue("probe", "k", delay=600)  # later: ignored
    row = h.store.reconcile_queue.get("probe", "k")
    assert row is not None
    assert row.available_at == h.store.now_ms() + 300_000
    m.enqueue("probe", "k", delay=5)  # sooner: wins
    h.clock.advance(5)
    assert m.run_until_idle() == 1


def test_expired_claim_of_a_dead_worker_is_reclaimed_after_the_lease(h: Harness) -> None:
    m = h.manager(config=ManagerConfig(lease_seconds=30))
    m.apply("probe", "k", {"value": 1})
    dead = h.store.reconcile_queue.claim_next(runner_id="dead-process", lease_seconds=30)
    assert dead is not None
    h.reopen()
    m2 = h.manager(config=ManagerConfig(lease_seconds=30))
    assert m2.run_until_idle() == 0  # the claim still holds
    h.clock.advance(30)
    assert m2.run_until_idle() == 1
    assert (h.ready("probe", "k") or {}).get("status") == "True"
    # the dead worker's late writes lose
    late = h.store.reconcile_queue.complete("probe", "k", dead.claim_token or "",
                                            outcome="settled")
    assert isinstance(late, LostRace)


def test_zombie_pass_cannot_release_the_new_holders_claim(h: Harness, gate: Gate) -> None:
    m = h.manager(config=ManagerConfig(lease_seconds=30))
    m.apply("gate", "k", {"value": 1})
    t = in_thread(m.reconcile_one)
    assert gate.entered.wait(DEADLINE)
    h.clock.advance(31)  # the lease ran out (the renewal timer is real time: not yet)
    taker = h.store.reconcile_queue.claim_next(runner_id="other", lease_seconds=30)
    assert taker is not None
    gate.release.set()
    t.join(DEADLINE)
    row = h.store.reconcile_queue.get("gate", "k")
    assert row is not None
    assert row.claim_token == taker.claim_token
    assert row.runner_id == "other"
    assert row.epoch == taker.epoch


def test_lost_claim_is_noticed_by_the_renewal_timer(project: Path) -> None:
    """Real time: a lease of 1 s renewed every 1/3 s keeps a 2 s pass (two leases)
    alive; a pass whose row is taken over stops with reconcile_lost and writes nothing.
    (The lease leaves a renewal 2/3 s of slack for a stall on a loaded machine.)"""
    def slow(ctx: ReconcileContext, r: Resource) -> Result:
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            time.sleep(0.02)
        return ctx.settled({"done": r.spec["n"]})

    h = Harness(project, [define_controller("slow", slow)], clock=SystemClock(),
                config=ManagerConfig(lease_seconds=1.0))
    try:
        m = h.manager()
        m.apply("slow", "k", {"n": 1})
        assert m.run_until_idle() == 1
        assert h.resource("slow", "k").status["controller_status"] == {"done": 1}
        assert "reconcile_lost" not in h.events("slow", "k")

        m.apply("slow", "k", {"n": 2})
        t = in_thread(m.reconcile_one)
        q = h.store.reconcile_queue
        wait_for(lambda: getattr(q.get("slow", "k"), "claim_token", None) is not None)
        # another host whose clock runs 100 s ahead sees the lease expired and takes it
        ahead = SqliteStore(store_path(project), clock=FakeClock(time.time() + 100))
        try:
            assert ahead.reconcile_queue.claim_next(runner_id="other", lease_seconds=300)
        finally:
            ahead.close()
        t.join(DEADLINE)
        assert not t.is_alive()
        assert "reconcile_lost" in h.events("slow", "k")
        assert h.resource("slow", "k").status["controller_status"] == {"done": 1}
    finally:
        h.close()


# -- errors, timeouts, deletion, limits ---------------------------------------------------
def test_errors_back_off_exponentially_and_success_resets(project: Path) -> None:
    calls: list[int] = []

    def flaky(ctx: ReconcileContext, r: Resource) -> Result:
        calls.append(1)
        if len(calls) <= 3:
            raise RuntimeError("provider down " + "x" * 5000)
        return ctx.settled()

    h = Harness(project, [define_controller("flaky", flaky)])
    try:
        m = h.manager(config=ManagerConfig(backoff_base=1.0, backoff_cap=300.0))
        m.apply("flaky", "k", {})
        waits = []
        for n in (1, 2, 3):
            assert m.run_until_idle() == 1
            row = h.store.reconcile_queue.get("flaky", "k")
            assert row is not None
            assert row.consecutive_errors == n
            assert row.last_error is not None
            assert "provider down" in row.last_error
            wait = (row.available_at - h.store.now_ms()) / 1000
            full = 2 ** (n - 1)
            assert full / 2 <= wait <= full  # jitter d/2 + U(0, d/2)
            waits.append(wait)
            assert m.run_until_idle() == 0
            h.clock.advance(wait)
        assert m.run_until_idle() == 1
        assert h.store.reconcile_queue.list() == []
        failed = [e for e in h.store.controller_events.read(controller="flaky")
                  if e.type == "reconcile_failed"]
        assert len(failed) == 3
        assert all(len(str(e.payload["error"]).encode()) <= 2000 for e in failed)
    finally:
        h.close()


def test_reconcile_timeout_and_bad_result_are_failures(project: Path) -> None:
    def hangs(ctx: ReconcileContext, r: Resource) -> Result:
        ctx.cancelled.wait(60)  # only the 0.2 s timeout's cancel ends it
        return ctx.settled()

    def wrong(ctx: ReconcileContext, r: Resource) -> Any:
        return {"not": "a result"}

    h = Harness(project, [define_controller("hangs", hangs, timeout=0.2),
                          define_controller("wrong", wrong)])
    try:
        m = h.manager()
        m.apply("hangs", "k", {})
        m.apply("wrong", "k", {})
        started = time.monotonic()
        assert m.run_until_idle() == 2
        assert time.monotonic() - started < 30  # the timeout, not the 60 s wait
        errors = {e.controller: str(e.payload.get("error")) for e in
                  h.store.controller_events.read() if e.type == "reconcile_failed"}
        assert "timed out after 0.2s" in errors["hangs"]
        assert "must return ctx.settled()" in errors["wrong"]
        assert all(r.consecutive_errors == 1 for r in h.store.reconcile_queue.list())
    finally:
        h.close()


def test_deletion_waits_for_finalizers_then_removes_resource_and_queue_row(
        project: Path) -> None:
    def finalizing(ctx: ReconcileContext, r: Resource) -> Result:
        if r.deletion_timestamp is None:
            return ctx.settled({"phase": "live"}, finalizers=["cleanup"])
        return ctx.settled({"phase": "cleaned"}, finalizers=[])

    h = Harness(project, [define_controller("fin", finalizing)])
    try:
        m = h.manager()
        m.apply("fin", "k", {})
        m.run_until_idle()
        assert h.resource("fin", "k").finalizers == ("cleanup",)
        deleting = m.delete("fin", "k")
        assert deleting.deletion_timestamp is not None
        early = h.store.resources.delete("fin", "k", deleting.resource_version)
        assert isinstance(early, LostRace)
        assert h.store.resources.get("fin", "k") is not None
        m.run_until_idle()
        assert h.store.resources.get("fin", "k") is None
        assert h.store.reconcile_queue.list() == []
        assert h.events("fin", "k")[-1] == "resource_deleted"
    finally:
        h.close()


def test_per_controller_limit_bounds_concurrency(project: Path, tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    h = Harness(project, [probe_controller(project)], clock=SystemClock())
    try:
        m = h.manager(config=ManagerConfig(workers=4, per_controller={"probe": 1},
                                           idle_poll=0.01))
        for i in range(6):
            m.apply("probe", f"k{i}", {"sleep": 0.05, "log": str(log)})
        m.start()
        wait_for(lambda: len(read_log(log)) == 6)
        m.stop(grace=2)
        spans = sorted((e["enter"], e["exit"]) for e in read_log(log))
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start, "two probe passes overlapped despite a limit of 1"
    finally:
        h.close()


# -- (i) ------------------------------------------------------------------------------------
def test_stopping_mid_work_leaves_everything_recoverable_by_a_new_manager(
        project: Path) -> None:
    h = Harness(project, [probe_controller(project)], clock=SystemClock(),
                config=ManagerConfig(workers=4, lease_seconds=1.0, idle_poll=0.01))
    try:
        m = h.manager()
        for i in range(3):
            m.apply("probe", f"child{i}", {"child": "slow-child"})
            m.apply("probe", f"count{i}", {"passes": 4, "sleep": 0.05})
        m.start()
        wait_for(lambda: len(h.store.workflow_requests.list()) >= 2
                 and any(e.type == "reconcile_finished"
                         for e in h.store.controller_events.read()))
        m.stop(grace=5)  # mid-work: children are parked, passes finish or expire
        in_flight = [r for r in h.store.resources.list()
                     if not is_true(r.status, "Ready", r.generation)]
        assert in_flight, "the stop should have caught work in progress"
        h.reopen()
        m2 = h.manager()
        deadline = time.monotonic() + 20
        while not all(is_true(r.status, "Ready", r.generation)
                      for r in h.store.resources.list()):
            m2.run_until_idle()
            assert time.monotonic() < deadline, [
                (r.key, r.status.get("conditions")) for r in h.store.resources.list()]
            time.sleep(0.05)
        requests = h.store.workflow_requests.list()
        assert sorted(r.request_key for r in requests) == ["child:1"] * 3
        assert all(r.state == "succeeded" for r in requests)
        for i in range(3):
            assert h.resource("probe", f"count{i}").status["controller_status"]["passes"] >= 4
    finally:
        h.close()


def test_manager_leaves_rows_of_controllers_it_does_not_run_alone(h: Harness) -> None:
    """Another host may run that controller: never claim (or settle) its keys."""
    h.store.reconcile_queue.enqueue("nobody", "k")
    m: ControllerManager = h.manager()
    assert m.run_until_idle() == 0
    row = h.store.reconcile_queue.get("nobody", "k")
    assert row is not None
    assert (row.claim_token, row.epoch, row.last_error) == (None, 0, None)
