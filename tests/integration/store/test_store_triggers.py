"""Trigger firings (DESIGN §10) on every backend: one launch per slot, decided by the
store's primary key; a simulated year of hourly cron slots in two DST zones on a fake
clock; the `missed` policies after a 3-day outage; `overlap`; the tables added to v1.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from storekit import Backend, FakeClock, launch

from runner.compiler._triggers import TriggerSpec, WebhookSpec
from runner.errors import TemporaryError, WfrunError
from runner.launch._slots import slot_key, slots_after
from runner.launch._triggers import Scheduled, TriggerLoop
from runner.store import LaunchRecord, LostRace, Store, StoreDiskFull
from runner.store._layout import ADDED_TABLES
from runner.store._records import INPUT_MAX_BYTES
from runner.store.domain._triggers import NewFiring

HOUR = 3600.0


class Crash(Exception):
    """A host killed between claiming a slot and queueing its run."""


class Queue:
    """A launcher that queues real launch rows (the overlap checks read them)."""

    def __init__(self, store: Store, crash_rate: float = 0.0, seed: int = 0,
                 memory: bool = False) -> None:
        self.store = store
        self.memory = memory
        self.started: list[tuple[str, Any, str]] = []
        self.crash_rate = crash_rate
        self.random = random.Random(seed)

    def __call__(self, workflow: str, run_input: Any, run_id: str) -> None:
        if self.random.random() < self.crash_rate:
            raise Crash(run_id)
        if self.memory:  # the year: the ledger is under test, not 8,760 queue rows
            if any(r == run_id for _, _, r in self.started[-5:]):
                raise WfrunError(f"run {run_id} exists")
            self.started.append((workflow, run_input, run_id))
            return
        result = self.store.launches.enqueue(launch(run_id, input=run_input or {}))
        if not hasattr(result, "run_id") or getattr(result, "reason", None):
            raise WfrunError(f"refused: {result}")
        self.started.append((workflow, run_input, run_id))


def _loop(store: Store, clock: FakeClock, spec: TriggerSpec, launcher: Queue,
          workflow: str = "nightly") -> TriggerLoop:
    return TriggerLoop(store.triggers, clock, launcher,
                       triggers=lambda: [Scheduled(workflow, spec)],
                       cancel=lambda run_id: _cancel(store, run_id))


def _cancel(store: Store, run_id: str) -> None:
    store.launches.cancel(run_id)


def _at(zone: str, *parts: int) -> float:
    return datetime(*parts, tzinfo=ZoneInfo(zone)).timestamp()  # type: ignore[misc]


def _launched(store: Store, spec: TriggerSpec, workflow: str = "nightly") -> list[int]:
    rows = store.triggers.firings(workflow, spec.name, limit=100_000, outcomes=("launched",))
    return sorted(f.slot_at or 0 for f in rows)


def test_a_slot_is_claimed_once_however_many_hosts_try(backend: Backend,
                                                       clock: FakeClock) -> None:
    store = backend.open(clock)
    try:
        wins = []

        def claim() -> None:
            wins.append(store.triggers.claim("wf", "t", "2030-01-01T00:00:00Z",
                                             slot_at=1, outcome="pending", run_id="wf-run"))
        threads = [threading.Thread(target=claim) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert wins.count(True) == 1
        firing = store.triggers.firing("wf", "t", "2030-01-01T00:00:00Z")
        assert firing is not None
        assert firing.outcome == "pending"
        assert store.triggers.settle("wf", "t", firing.key, "launched")
        assert not store.triggers.settle("wf", "t", firing.key, "skipped")  # settled once
    finally:
        store.close()


DST_DAYS = {"Europe/Berlin": ((2027, 3, 28), (2027, 10, 31)),
            "America/New_York": ((2027, 3, 14), (2027, 11, 7))}


@pytest.mark.timeout(300)  # 8,760 slots through a real store: ~30 s on a busy 2-core box
@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York"])
def test_a_simulated_year_of_an_hourly_cron_starts_every_slot_once(
        backend: Backend, clock: FakeClock, zone: str) -> None:
    """Random ticks (1 minute to 3 hours apart), hosts killed at random moments between
    a claim and its launch, and a second host ticking beside the first: every hourly
    slot of 2027 starts exactly once. An hourly cron follows real hours (cronsim,
    Debian cron's rules): the spring-forward day has 23 slots (the skipped hour has
    none), the fall-back day 25 (the repeated hour fires in each of its occurrences).
    On Postgres (a round trip per statement) the months around both changes."""
    spring, fall = DST_DAYS[zone]
    spans = ([((2027, 1, 1), (2028, 1, 1))] if backend.name == "sqlite" else
             [((2027, 3, spring[2] - 3), (2027, 4, 1)), ((2027, 10, 25), (2027, 11, 12))])
    store = backend.open(clock)
    try:
        per_day: Counter[Any] = Counter()
        for n, (first, last) in enumerate(spans):
            per_day += _simulate(store, clock, zone, f"hourly{n}", _at(zone, *first),
                                 _at(zone, *last))
        assert per_day[datetime(*spring).date()] == 23
        assert per_day[datetime(*fall).date()] == 25
        others = {v for d, v in per_day.items()
                  if d not in (datetime(*spring).date(), datetime(*fall).date())}
        assert others == {24}
    finally:
        store.close()


def _simulate(store: Store, clock: FakeClock, zone: str, name: str, start: float,
              end: float) -> Counter[Any]:
    """Every slot of [start, end) once; the slots per local day."""
    clock.t = start - 1
    spec = TriggerSpec(name=name, cron="0 * * * *", timezone=zone, missed="all",
                       overlap="allow", input={"slot": "{{ trigger.slot }}"})
    store.triggers.ensure("nightly", name, round(clock.now() * 1000))
    rng = random.Random(zone + name)
    launcher = Queue(store, crash_rate=0.02, seed=len(zone), memory=True)
    hosts = [_loop(store, clock, spec, launcher), _loop(store, clock, spec, launcher)]
    while clock.now() < end + 2 * HOUR:
        clock.advance(rng.uniform(60, 3 * HOUR))
        host = rng.randrange(2)
        try:
            hosts[host].tick()
        except Crash:  # the host dies: a new one starts from the store alone
            hosts[host] = _loop(store, clock, spec, launcher)
    clock.advance(120)  # the last crash's pending firing is stale now
    for host in hosts:
        host.tick()
    expected = [round(s * 1000) for s in slots_after(spec, start - 1, end - 1,
                                                      limit=10_000)]
    every = _launched(store, spec)
    launched = [s for s in every if s < end * 1000]
    assert launched == expected
    runs = Counter(run_id for _, _, run_id in launcher.started)
    assert max(runs.values()) == 1
    assert len(runs) == len(every)
    # Each run's input names its own slot.
    slots = {f.run_id: (f.slot_at or 0) / 1000
             for f in store.triggers.firings("nightly", spec.name, limit=100_000)}
    assert all(inp == {"slot": slot_key(slots[rid])} for _, inp, rid in launcher.started)
    return Counter(datetime.fromtimestamp(s / 1000, ZoneInfo(zone)).date() for s in launched)


@pytest.mark.parametrize(("missed", "launches"), [("all", 24), ("last", 1), ("none", 0)])
def test_missed_slots_after_a_three_day_outage(backend: Backend, clock: FakeClock,
                                               missed: str, launches: int) -> None:
    """Hourly, catch_up_window 1d, the host back 20 minutes after a slot, 3 days on:
    `all` starts the 24 slots inside the window, `last` the newest, `none` nothing;
    every other slot is recorded as missed (the 48 older ones as one gap)."""
    zone = "Europe/Berlin"
    clock.t = _at(zone, 2027, 6, 1, 9, 30)
    spec = TriggerSpec(name="hourly", cron="0 * * * *", timezone=zone, missed=missed,
                       overlap="allow")
    store = backend.open(clock)
    try:
        launcher = Queue(store)
        _loop(store, clock, spec, launcher).tick()  # first sight: no catch-up
        clock.t = _at(zone, 2027, 6, 1, 10, 0, 5)
        _loop(store, clock, spec, launcher).tick()
        assert len(launcher.started) == 1  # 10:00, on time
        launcher.started.clear()
        clock.t = _at(zone, 2027, 6, 4, 10, 20)  # the host was down for 3 days
        _loop(store, clock, spec, launcher).tick()
        assert len(launcher.started) == launches
        launched = _launched(store, spec)[1:]
        if missed == "last":
            assert launched == [round(_at(zone, 2027, 6, 4, 10) * 1000)]
        summary = store.triggers.summary("nightly", "hourly")
        assert summary.counts.get("launched", 0) == 1 + launches
        gaps = store.triggers.firings("nightly", "hourly", outcomes=("missed",), limit=1000)
        singles = [f for f in gaps if not f.key.startswith("gap:")]
        (gap,) = [f for f in gaps if f.key.startswith("gap:")]
        assert gap.reason is not None
        assert gap.reason.startswith("48 slot(s)")
        assert len(singles) == 24 - launches
        # Another host after the same outage starts nothing more.
        _loop(store, clock, spec, launcher).tick()
        assert len(launcher.started) == launches
    finally:
        store.close()


def test_overlap_skip_queue_and_cancel_running(backend: Backend, clock: FakeClock) -> None:
    store = backend.open(clock)
    try:
        clock.t = 1_900_000_000.0
        for overlap in ("skip", "queue", "cancel_running"):
            spec = TriggerSpec(name=overlap, every=60.0, overlap=overlap)
            launcher = Queue(store)
            loop = _loop(store, clock, spec, launcher, workflow="often")
            loop.tick()
            for _ in range(3):
                clock.advance(60)
                loop.tick()
            outcomes = Counter(f.outcome for f in store.triggers.firings("often", overlap))
            runs = [rid for _, _, rid in launcher.started]
            if overlap == "skip":
                assert outcomes == {"launched": 1, "skipped": 2}
            elif overlap == "queue":
                assert outcomes == {"launched": 1, "pending": 2}
                first = store.launches.get(runs[0])
                assert first is not None
                store.launches.cancel(runs[0])  # the first run ends: the next one starts
                loop.tick()
                assert Counter(f.outcome for f in store.triggers.firings("often", overlap)) \
                    == {"launched": 2, "pending": 1}
            else:
                assert outcomes == {"launched": 3}
                statuses = [store.launches.get(r).status for r in runs]  # type: ignore[union-attr]
                assert statuses == ["cancelled", "cancelled", "queued"]
    finally:
        store.close()


class FullOnce(Queue):
    """A launcher whose store is full at its first start, as `coordinator.prepare`
    raises it (StoreDiskFull), or busy (the host's translated TemporaryError)."""

    def __init__(self, store: Store, refusal: WfrunError) -> None:
        super().__init__(store)
        self.refusal: WfrunError | None = refusal

    def __call__(self, workflow: str, run_input: Any, run_id: str) -> None:
        refusal, self.refusal = self.refusal, None
        if refusal is not None:
            raise refusal
        super().__call__(workflow, run_input, run_id)


@pytest.mark.parametrize("refusal", [
    StoreDiskFull("no space left on the device holding the store"),
    TemporaryError("the store is busy")], ids=["full", "busy"])
def test_a_start_the_store_refuses_for_now_stays_pending_and_the_next_tick_starts_it(
        backend: Backend, clock: FakeClock, refusal: WfrunError) -> None:
    """A slot whose run the store could not queue for now (a full disk, a lock) is
    not failed for good: its firing stays pending, and the loop's next tick queues
    that same run; a delivery's too (its sender's retry is answered with it)."""
    store = backend.open(clock)
    try:
        clock.t = 1_900_000_000.0
        spec = TriggerSpec(name="often", every=60.0, overlap="allow")
        launcher = FullOnce(store, refusal)
        loop = _loop(store, clock, spec, launcher)
        loop.tick()  # the trigger's first evaluation: from now on
        clock.advance(60)
        loop.tick()
        (firing,) = store.triggers.firings("nightly", "often")
        assert (firing.outcome, firing.reason) == ("pending", None)
        assert firing.run_id is not None
        assert store.launches.get(firing.run_id) is None
        loop.tick()  # the same minute: the retry, not a new slot
        (firing,) = store.triggers.firings("nightly", "often")
        assert firing.outcome == "launched"
        assert [r for _, _, r in launcher.started] == [firing.run_id]
        assert store.launches.get(firing.run_id) is not None

        hook = TriggerSpec(name="hook", webhook=WebhookSpec(path="/h", secret=None), overlap="skip")
        launcher.refusal = refusal
        hooked = TriggerLoop(store.triggers, clock, launcher,
                             triggers=lambda: [Scheduled("nightly", hook)])
        with pytest.raises(type(refusal)):  # the sender is told to try again (503)
            hooked.deliver(Scheduled("nightly", hook), "d-1", {})
        first, fresh = hooked.deliver(Scheduled("nightly", hook), "d-1", {})
        assert not fresh
        assert first.outcome == "pending"  # a replay, answered with its run
        hooked.tick()
        (done,) = store.triggers.firings("nightly", "hook")
        assert (done.outcome, done.run_id) == ("launched", first.run_id)
    finally:
        store.close()


def test_pause_and_resume_catch_up_nothing(backend: Backend, clock: FakeClock) -> None:
    store = backend.open(clock)
    try:
        clock.t = 1_900_000_000.0
        spec = TriggerSpec(name="t", every=60.0, missed="all", overlap="allow")
        launcher = Queue(store)
        loop = _loop(store, clock, spec, launcher)
        loop.tick()
        assert store.triggers.set_paused("nightly", "t", True, round(clock.now() * 1000))
        assert not store.triggers.set_paused("nightly", "t", True, 0)  # already paused
        clock.advance(600)
        loop.tick()
        assert launcher.started == []
        assert store.triggers.set_paused("nightly", "t", False, round(clock.now() * 1000))
        loop.tick()
        assert launcher.started == []  # the slots passed while paused are not caught up
        clock.advance(60)
        loop.tick()
        assert len(launcher.started) == 1
    finally:
        store.close()


def test_a_store_made_before_the_trigger_tables_gains_them(backend: Backend,
                                                           clock: FakeClock) -> None:
    store = backend.open(clock)
    with store._db.write() as conn:  # type: ignore[attr-defined]  # as an older store is
        for table in sorted(ADDED_TABLES):
            conn.execute(f"DROP TABLE {table}")
    store.close()
    again = backend.open(clock)  # not refused as another layout
    try:
        assert again.triggers.ensure("wf", "t", 5).cursor_at == 5
    finally:
        again.close()


def test_retention_trims_settled_firings_whose_run_is_gone(backend: Backend,
                                                          clock: FakeClock) -> None:
    store = backend.open(clock)
    try:
        ledger = store.triggers
        ledger.claim("wf", "t", "old-missed", slot_at=1, outcome="missed")
        ledger.claim("wf", "t", "old-pending", slot_at=2, outcome="pending", run_id="wf-p")
        ledger.claim("wf", "t", "old-live", slot_at=3, outcome="pending", run_id="wf-live")
        ledger.settle("wf", "t", "old-live", "launched")
        store.launches.enqueue(launch("wf-live"))  # its run is still queued
        clock.advance(100)
        ledger.claim("wf", "t", "new-missed", slot_at=4, outcome="missed")
        trimmed = store.retention.trim(round((clock.now() - 50) * 1000))
        assert trimmed.trigger_firings == 1
        assert sorted(f.key for f in ledger.firings("wf", "t")) == [
            "new-missed", "old-live", "old-pending"]
    finally:
        store.close()


def test_a_long_outage_of_a_fast_schedule_is_bounded(backend: Backend,
                                                     clock: FakeClock) -> None:
    """`every: 1s`, window 1h, down for 2h: one launch (the newest slot, `missed: last`),
    the 1,000 newest slots evaluated one by one, the rest as two gap rows."""
    store = backend.open(clock)
    try:
        clock.t = 1_900_000_000.0
        spec = TriggerSpec(name="fast", every=1.0, missed="last", catch_up_window=3600.0,
                           overlap="allow")
        launcher = Queue(store, memory=True)
        _loop(store, clock, spec, launcher).tick()
        clock.advance(2 * 3600)
        _loop(store, clock, spec, launcher).tick()
        assert [slot_key(_launched(store, spec)[0] / 1000)] == [slot_key(clock.now())]
        missed = store.triggers.firings("nightly", "fast", limit=5000, outcomes=("missed",))
        gaps = sorted(f.reason or "" for f in missed if f.key.startswith("gap:"))
        assert len(missed) - len(gaps) == 999
        assert [g.split(" ")[0] for g in gaps] == ["2600", "3600"]
    finally:
        store.close()


def test_deliveries_that_arrive_together_are_recorded_and_queued_in_one_commit(
        backend: Backend, clock: FakeClock) -> None:
    """Group commit's store side: event firings of any triggers recorded with their
    runs' launches in one transaction; a replay (even of a delivery in the same
    batch) queues nothing; each is judged alone: a launch the store refuses leaves
    its firing failed, saying why, and the others queued."""
    store = backend.open(clock)
    try:
        ledger = store.triggers
        assert ledger.claim("hooked", "push", "delivery:old", slot_at=None,
                            outcome="launched", run_id="hooked-old")
        assert not isinstance(store.launches.enqueue(launch("hooked-taken")), LostRace)
        done = ledger.fire_many([
            NewFiring("hooked", "push", "delivery:a", "hooked-a", launch("hooked-a")),
            NewFiring("hooked", "push", "delivery:old", "hooked-x", launch("hooked-x")),
            NewFiring("other", "push", "delivery:a", "other-a", launch(
                "other-a", input={"big": "x" * (INPUT_MAX_BYTES + 1)})),
            NewFiring("hooked", "push", "delivery:a", "hooked-y", launch("hooked-y")),
            NewFiring("hooked", "push", "delivery:b", "hooked-taken",
                      launch("hooked-taken")),
            NewFiring("hooked", "push", "delivery:c", "hooked-c", None,
                      "the trigger's input: 'event' has no attribute 'x'")])
        assert [(d.made, d.firing.outcome, d.firing.run_id) for d in done] == [
            (True, "launched", "hooked-a"), (False, "launched", "hooked-old"),
            (True, "failed", "other-a"), (False, "launched", "hooked-a"),
            (True, "failed", "hooked-taken"), (True, "failed", "hooked-c")]
        assert isinstance(done[0].launch, LaunchRecord)
        assert done[0].launch.run_id == "hooked-a"
        assert [d.launch for d in done[1:]] == [None] * 5
        assert "launch input" in (done[2].firing.reason or "")
        assert done[4].firing.reason == "could not queue the run (already_exists)"
        assert done[5].firing.reason == "the trigger's input: 'event' has no attribute 'x'"
        assert {r.run_id for r in store.launches.query()} == {"hooked-taken", "hooked-a"}
        stored = ledger.firing("other", "push", "delivery:a")
        assert stored == done[2].firing  # as recorded
    finally:
        store.close()
