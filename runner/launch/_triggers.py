"""Scheduled triggers (DESIGN §10): which slots are due, and one launch per slot.

`TriggerLoop.tick()` looks at every `cron` and `every` trigger of the project's
workflows: the slots after the trigger's cursor up to now are due. Each due slot
is claimed in the store under its idempotency key (workflow, trigger, slot); the
claim that lands decides what the slot does (launch, skip, miss), so two hosts, a
restarted host or a slow tick never start a slot twice, and a crash between the
claim and the launch is finished by the next tick with the same run id.

Policies, as docs/triggers.md documents them:
- the newest due slot is *on time* when it is at most `ON_TIME` late; every other
  due slot was missed (the host was down or busy). `missed: all` launches every
  missed slot inside `catch_up_window`; `last` launches only the newest due slot;
  `none` launches only an on-time slot. Slots older than the window are recorded
  as missed, in one row per gap.
- `overlap` applies when an earlier run of the trigger has not ended: `skip`
  records the slot as skipped, `queue` keeps it pending until the runs before it
  ended, `cancel_running` cancels them and launches, `allow` launches.
- which instants are slots (cron in a time zone, across DST; `every`): `_slots`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from runner._safety import safe_message
from runner.compiler._templates import TemplateError, render_native
from runner.compiler._triggers import TriggerSpec
from runner.errors import TemporaryError, WfrunError
from runner.store import StoreError, StoreUnavailable
from runner.store.domain._triggers import NewFiring

from ._slots import (
    MAX_CATCH_UP,
    MAX_COUNTED,
    count_slots,
    firing_run_id,
    newest_slots,
    next_slot,
    slot_key,
    slots_after,
)

if TYPE_CHECKING:
    from runner.clock import Clock
    from runner.launch._queue import PlannedLaunch
    from runner.store import LaunchRecord
    from runner.store.domain._triggers import Firing, TriggerLedger

log = logging.getLogger("wfrun.triggers")

#: The newest due slot at most this late is on time (a busy or restarting host
#: still fires it, under every `missed` policy).
ON_TIME = 60.0
#: A pending firing another host claimed is finished here only after this long
#: (its host had the time to queue it; a crash left it).
STALE_PENDING = 30.0


@dataclass(frozen=True)
class Scheduled:
    """One trigger of one workflow, or of a controller (`controller`: its name; then
    `workflow` is `controller:NAME`, the firings' own namespace)."""

    workflow: str
    spec: TriggerSpec
    controller: str | None = None

    @staticmethod
    def of_controller(name: str, spec: TriggerSpec) -> Scheduled:
        return Scheduled(f"controller:{name}", spec, controller=name)


#: Queue run `run_id` of `workflow` with this input; raises WfrunError when refused.
Launcher = Callable[[str, Any, str], None]


class Starter(Protocol):
    """Starts whose rows the trigger ledger writes with their firings (group commit:
    `deliver_many`); `LaunchCoordinator` is one."""

    def plan(self, ref: str, run_input: Any, run_id: str) -> PlannedLaunch:
        """Every check of a start (raises WfrunError: refused, nothing stored)."""
        ...

    def queued(self, planned: PlannedLaunch, record: LaunchRecord) -> LaunchRecord:
        """What follows its commit (raises WfrunError)."""
        ...


@dataclass(frozen=True, slots=True)
class Prepared:
    """A delivery's start checked before its commit (`TriggerLoop.prepare`): the firing
    to record, with its run's launch unless the checks refused it (then `reason`)."""

    firing: NewFiring
    planned: PlannedLaunch | None


#: One webhook delivery: its trigger, its delivery id, its event, and its start
#: checked ahead (`prepare`; None: checked in `deliver_many`, or started one by one).
Delivery = tuple[Scheduled, str, dict[str, Any], Prepared | None]


class TriggerLoop:
    """The host's trigger evaluation; one per host, ticked from its loop."""

    def __init__(self, ledger: TriggerLedger, clock: Clock, launch: Launcher, *,
                 triggers: Callable[[], Iterable[Scheduled]],
                 cancel: Callable[[str], None] | None = None,
                 on_launched: Callable[[str], None] | None = None,
                 enqueue: Callable[[str, str], None] | None = None,
                 counted: Callable[[Scheduled, str, int], None] | None = None,
                 starter: Starter | None = None) -> None:
        """`on_launched(run_id)`: a firing queued a run (the host claims it at once).
        `starter`: runs queued in one commit with their firings (`deliver_many`).
        `enqueue(controller, key)`: what a controller's trigger does instead.
        `counted(trigger, outcome, slots)`: this loop recorded that many slots or
        deliveries as launched, skipped, missed or failed (the host's metrics)."""
        self.ledger = ledger
        self.counted = counted
        self.enqueue = enqueue
        self.on_launched = on_launched
        self.clock = clock
        self.launch = launch
        self.starter = starter
        self.triggers = triggers
        self.cancel = cancel
        self._mine: set[str] = set()  # pending firings this loop claimed (run ids)
        self._failed: str | None = None  # the last evaluation error logged

    def tick(self) -> float | None:
        """Evaluate every scheduled trigger; the seconds until the next slot (None:
        no scheduled trigger)."""
        now = self.clock.now()
        soonest: float | None = None
        for item in self.triggers():
            hook = item.spec.webhook
            if hook is not None and hook.debounce:
                try:
                    upcoming = self.flush_debounced(item, hook.debounce, now)
                except (WfrunError, StoreError) as exc:
                    self._log_once(f"trigger {item.workflow}.{item.spec.name}: {exc.message}")
                    continue
                if upcoming is not None:
                    soonest = upcoming if soonest is None else min(soonest, upcoming)
                continue
            if not item.spec.scheduled:
                if hook is not None or item.spec.files is not None:
                    try:  # event firings a crash or an overlap policy left pending
                        self._finish_pending(item, now)
                    except (WfrunError, StoreError) as exc:
                        self._log_once(f"trigger {item.workflow}.{item.spec.name}: "
                                       f"{exc.message}")
                continue
            try:
                upcoming = self.evaluate(item, now)
            except (WfrunError, StoreError) as exc:  # refused: the next tick tries again
                self._log_once(f"trigger {item.workflow}.{item.spec.name}: {exc.message}")
                continue
            if upcoming is not None:
                soonest = upcoming if soonest is None else min(soonest, upcoming)
        return None if soonest is None else max(0.0, soonest - self.clock.now())

    def evaluate(self, item: Scheduled, now: float) -> float | None:
        """One trigger's due slots at `now`; its next slot."""
        workflow, spec = item.workflow, item.spec
        state = self.ledger.ensure(workflow, spec.name, _ms(now))
        if state.paused:
            return next_slot(spec, now)
        self._finish_pending(item, now)
        cursor = state.cursor_at / 1000.0
        window_start = now - spec.catch_up_window
        if cursor < window_start:
            self._record_gap(item, cursor, window_start)
            self.ledger.advance(workflow, spec.name, _ms(window_start))
            cursor = window_start
        due, older = newest_slots(spec, cursor, now, MAX_CATCH_UP)
        if older:  # more due slots than one evaluation starts: the older ones are a gap
            self._record_gap(item, cursor, due[0] - 0.001, why="over the catch-up limit "
                             f"of {MAX_CATCH_UP} slots")
        if due:
            launch, missed = self._plan(spec, due, now)
            self.ledger.claim_many(workflow, spec.name, [
                (slot_key(s), _ms(s), "missed", why) for s, why in missed])
            self._count(item, "missed", len(missed))
            for slot in launch:
                self.fire(item, slot)
            self.ledger.advance(workflow, spec.name, _ms(due[-1]))
        return next_slot(spec, now)

    @staticmethod
    def _plan(spec: TriggerSpec, due: list[float], now: float
              ) -> tuple[list[float], list[tuple[float, str]]]:
        """Which due slots launch and which were missed (with why)."""
        newest = due[-1]
        on_time = now - newest <= ON_TIME
        if spec.missed == "all":
            return due, []
        if spec.missed == "last":
            why = f"missed: last (the slot at {slot_key(newest)} ran instead)"
            return [newest], [(s, why) for s in due[:-1]]
        why = "missed: none (no host was running the trigger at that time)"
        launch = [newest] if on_time else []
        return launch, [(s, why) for s in due if s not in launch]

    def _record_gap(self, item: Scheduled, after: float, until: float, *,
                    why: str | None = None) -> None:
        count, last = count_slots(item.spec, after, until)
        if not count or last is None:
            return
        first = slots_after(item.spec, after, until, limit=1)[0]
        many = f"{count}+" if count >= MAX_COUNTED else str(count)
        reason = (f"{many} slot(s) from {slot_key(first)} to {slot_key(last)} missed: "
                  + (why or "older than catch_up_window "
                     f"({item.spec.catch_up_window:g}s)"))
        self.ledger.claim_many(item.workflow, item.spec.name, [
            (f"gap:{slot_key(first)}..{slot_key(last)}", _ms(last), "missed", reason)])
        self._count(item, "missed", count)

    # -- one firing ------------------------------------------------------------------
    def fire(self, item: Scheduled, slot: float) -> str | None:
        """Claim the slot and start it; the run id when this call claimed it."""
        key = slot_key(slot)
        run_id = firing_run_id(item.workflow, item.spec.name, key, slot)
        if not self.ledger.claim(item.workflow, item.spec.name, key, slot_at=_ms(slot),
                                 outcome="pending", run_id=run_id):
            return None  # another host (or an earlier tick) has this slot
        self._mine.add(run_id)
        self._start(item, key, run_id, slot, {})
        return run_id

    def deliver(self, item: Scheduled, delivery: str, event: dict[str, Any]
                ) -> tuple[Firing, bool]:
        """Start the trigger for one event (a webhook delivery): claimed under its
        delivery id, so a replayed delivery starts nothing new and gets the firing the
        first one made. The firing as it stands after this call, and whether this
        call made it (False: a replay)."""
        hook = item.spec.webhook
        if hook is not None and hook.debounce:
            # Kept (durably, with its event) until no delivery came for `debounce`;
            # then the newest starts the run and the others are recorded as skipped.
            key = f"delivery:{delivery}"
            run_id = firing_run_id(item.workflow, item.spec.name, key, self.clock.now())
            fresh = self.ledger.claim(item.workflow, item.spec.name, key, slot_at=None,
                                      outcome="pending", run_id=run_id, event=event)
            found = self.ledger.firing(item.workflow, item.spec.name, key)
            assert found is not None
            return found, fresh
        return self.fire_event(item, f"delivery:{delivery}", event)

    def grouped(self, item: Scheduled) -> bool:
        """Whether a delivery of `item` is queued with its firing in one transaction
        (`deliver_many`). A debounced, controller or non-`allow` overlap trigger's
        delivery, whose start reads or changes other runs first, takes `deliver`."""
        hook = item.spec.webhook
        return not (self.starter is None or item.controller is not None
                    or (hook is not None and hook.debounce) or item.spec.overlap != "allow")

    def prepare(self, item: Scheduled, delivery: str, event: dict[str, Any]
                ) -> Prepared | None:
        """Every check of a delivery's start (its input rendered, the workflow's
        compile cache, the input schema), made in the request's own thread before it
        joins a commit: while the commit ahead of it waits for the disk, not inside
        the next one, whose deliveries all wait for it. None: `deliver` starts it."""
        if not self.grouped(item):
            return None
        assert self.starter is not None
        w, t, key = item.workflow, item.spec.name, f"delivery:{delivery}"
        run_id = firing_run_id(w, t, key, self.clock.now())
        planned, why = None, None
        try:  # a replay's checks are wasted, and cheaper than a read first
            planned = self.starter.plan(w, self._input(item, key, None, event), run_id)
        except TemplateError as exc:
            why = f"the trigger's input: {exc}"
        except WfrunError as exc:
            why = safe_message(exc.message)
        return Prepared(NewFiring(w, t, key, run_id, planned.launch if planned else None,
                                  why), planned)

    def deliver_many(self, deliveries: Sequence[Delivery]
                     ) -> list[tuple[Firing, bool] | WfrunError | StoreError]:
        """`deliver` for deliveries that arrived together (group commit): every new
        one's firing is recorded and its run queued in one transaction, one commit
        (one sync) for all. Per delivery, what `deliver` returns, or why the store
        refused it (the sender retries)."""
        done: list[tuple[Firing, bool] | WfrunError | StoreError | None] = []
        grouped: list[tuple[int, Scheduled, Prepared]] = []
        for item, delivery, event, prepared in deliveries:
            if not self.grouped(item):
                try:
                    done.append(self.deliver(item, delivery, event))
                except (WfrunError, StoreError) as exc:
                    done.append(exc)
                continue
            ready = prepared or self.prepare(item, delivery, event)
            assert ready is not None
            grouped.append((len(done), item, ready))
            done.append(None)
        if grouped:
            try:
                for at, found in zip([g[0] for g in grouped], self._fire_many(grouped),
                                     strict=True):
                    done[at] = found
            except (WfrunError, StoreError) as exc:  # the sender retries: a replay then
                for at, *_ in grouped:
                    done[at] = exc
        return [d for d in done if d is not None]

    def _fire_many(self, grouped: list[tuple[int, Scheduled, Prepared]]
                   ) -> list[tuple[Firing, bool]]:
        assert self.starter is not None
        done = self.ledger.fire_many([ready.firing for _, _, ready in grouped])
        for (_, item, ready), fired in zip(grouped, done, strict=True):
            if not fired.made:
                continue  # a replay: another host, batch or delivery of this one was first
            if ready.planned is not None and fired.launch is not None:
                try:
                    self.starter.queued(ready.planned, fired.launch)
                except WfrunError as exc:  # a concurrency strategy: the run stays queued
                    log.info("trigger %s.%s: %s", item.workflow, item.spec.name, exc.message)
            firing = fired.firing
            self._count(item, firing.outcome, 1)
            self._told(item, firing.key, firing.run_id or "", firing.outcome, firing.reason)
        return [(fired.firing, fired.made) for fired in done]

    def fire_event(self, item: Scheduled, key: str, event: dict[str, Any]
                   ) -> tuple[Firing, bool]:
        """Start the trigger once for the event whose idempotency key is `key` (a
        delivery, a batch of file changes); as `deliver`."""
        now = self.clock.now()
        run_id = firing_run_id(item.workflow, item.spec.name, key, now)
        # The event is kept with the claim until the firing settles: a host killed
        # before the run was queued leaves a pending firing that the next tick, here
        # or on another host, starts with that same event (`_finish_pending`). Not
        # durable on its own: nobody hears of the firing before the run's durable
        # queue commit, which carries the claim with it.
        kept: dict[str, Any] | None = event
        try:
            fresh = self.ledger.claim(item.workflow, item.spec.name, key, slot_at=None,
                                      outcome="pending", run_id=run_id, event=kept,
                                      durable=False)
        except ValueError:  # too large to keep: the run's input is rendered from it now
            kept = None
            fresh = self.ledger.claim(item.workflow, item.spec.name, key, slot_at=None,
                                      outcome="pending", run_id=run_id)
        if fresh:
            try:
                self._start(item, key, run_id, None, event)
            except BaseException:
                self._mine.add(run_id)  # the next tick retries it at once
                raise
        found = self.ledger.firing(item.workflow, item.spec.name, key)
        assert found is not None  # claimed by this call or an earlier one; never deleted
        return found, fresh

    def flush_debounced(self, item: Scheduled, debounce: float, now: float) -> float | None:
        """A debounced webhook's kept deliveries, once none came for `debounce`: the
        newest starts its run, the others are skipped naming it. When the batch is due
        (None: nothing kept)."""
        kept = self.ledger.pending(item.workflow, item.spec.name)
        if not kept:
            return None
        newest = max(kept, key=lambda f: (f.created_at, f.key))
        due = newest.created_at / 1000.0 + debounce
        if due > now:
            return due
        assert newest.run_id is not None
        event = json.loads(newest.event_json) if newest.event_json else {}
        event["debounced"] = [f.key.removeprefix("delivery:") for f in kept]
        self._start(item, newest.key, newest.run_id, None, event)
        for firing in kept:
            if firing.key != newest.key and self.ledger.settle(
                    item.workflow, item.spec.name, firing.key, "skipped",
                    f"debounced: {newest.key} started run {newest.run_id}"):
                self._count(item, "skipped", 1)
        return None

    def backfill(self, item: Scheduled, start: float, end: float,
                 limit: int = MAX_CATCH_UP) -> list[tuple[str, str | None, str]]:
        """Queue a run for every slot in [start, end] that has none (a missed, skipped
        or failed slot included), whatever the overlap policy; (slot key, run id,
        what happened) per slot. Raises ValueError past `limit` slots."""
        slots = slots_after(item.spec, start - 0.001, end, limit=limit + 1)
        if len(slots) > limit:
            raise ValueError(f"more than {limit} slots between those times")
        done: list[tuple[str, str | None, str]] = []
        for slot in slots:
            key = slot_key(slot)
            run_id = firing_run_id(item.workflow, item.spec.name, key, slot)
            found = self.ledger.firing(item.workflow, item.spec.name, key)
            if found is not None and found.outcome in ("launched", "pending"):
                done.append((key, found.run_id, f"has run {found.run_id} already"))
                continue
            won = (self.ledger.claim(item.workflow, item.spec.name, key, slot_at=_ms(slot),
                                     outcome="pending", run_id=run_id) if found is None
                   else self.ledger.reopen(item.workflow, item.spec.name, key, run_id))
            if not won:
                done.append((key, None, "taken by a host meanwhile"))
                continue
            self._start(item, key, run_id, slot, {}, overlap="allow")
            after = self.ledger.firing(item.workflow, item.spec.name, key)
            outcome = after.outcome if after is not None else "?"
            done.append((key, run_id if outcome == "launched" else None,
                         outcome if not (after and after.reason) else
                         f"{outcome}: {after.reason}"))
        return done

    def _start(self, item: Scheduled, key: str, run_id: str, slot: float | None,
               event: dict[str, Any], overlap: str | None = None) -> bool:
        """Apply the overlap policy to a pending firing and queue its run; False when
        it stays pending (`overlap: queue` behind a running run)."""
        workflow, spec = item.workflow, item.spec
        policy = overlap or spec.overlap
        active = [] if policy == "allow" else [
            (r, s) for r, s in self.ledger.active_runs(workflow, spec.name) if r != run_id]
        if active and policy == "skip":
            holder, status = active[0]
            self._settle(item, key, run_id, "skipped",
                         f"overlap: skip (run {holder} is still {status})")
            return True
        if active and policy == "queue":
            return False
        if active and policy == "cancel_running" and self.cancel is not None:
            for holder, _ in active:
                try:
                    self.cancel(holder)
                except WfrunError as exc:  # it ended meanwhile, or the store refused
                    log.info("trigger %s.%s: could not cancel %s: %s", workflow, spec.name,
                             holder, exc.message)
        if item.controller is not None:
            return self._enqueue(item, key, run_id, _context(item, key, slot, event))
        try:
            run_input = self._input(item, key, slot, event)
        except TemplateError as exc:
            self._settle(item, key, run_id, "failed", f"the trigger's input: {exc}")
            return True
        try:
            self.launch(workflow, run_input, run_id)
        except (StoreUnavailable, TemporaryError):
            # The store refused for now (full, busy, unreachable): the firing stays
            # pending, and this loop's next tick starts it again (`_mine`): failed
            # for good, a disk-full minute would have dropped its slot or delivery.
            raise
        except WfrunError as exc:
            if self.ledger.run_exists(run_id):  # another host queued it first
                self._settle(item, key, run_id, "launched")
                return True
            self._settle(item, key, run_id, "failed", safe_message(exc.message))
            return True
        self._settle(item, key, run_id, "launched")
        return True

    def _enqueue(self, item: Scheduled, key: str, run_id: str,
                 context: dict[str, Any]) -> bool:
        """A controller's firing: the rendered resource key goes on its reconcile queue
        (duplicate wake-ups of one key collapse there: seed 004)."""
        assert item.controller is not None
        try:
            resource = str(render_native(item.spec.key or "", context)).strip()
        except TemplateError as exc:
            self._settle(item, key, run_id, "failed", f"the trigger's key: {exc}")
            return True
        if not resource or len(resource) > 512 or not resource.isprintable():
            self._settle(item, key, run_id, "failed", "the trigger's key must render to "
                         "1-512 printable characters")
            return True
        if self.enqueue is None:
            self._settle(item, key, run_id, "failed", "no controller manager runs here")
            return True
        self.enqueue(item.controller, resource)
        if self.ledger.settle(item.workflow, item.spec.name, key, "launched",
                              f"reconcile {item.controller}/{resource}"):
            self._count(item, "launched", 1)
        self._mine.discard(run_id)
        return True

    def _settle(self, item: Scheduled, key: str, run_id: str, outcome: str,
                reason: str | None = None) -> None:
        if self.ledger.settle(item.workflow, item.spec.name, key, outcome, reason):
            self._count(item, outcome, 1)
        self._told(item, key, run_id, outcome, reason)

    def _told(self, item: Scheduled, key: str, run_id: str, outcome: str,
              reason: str | None) -> None:
        """A firing settled: the host hears of its run, the log of its fate."""
        self._mine.discard(run_id)
        if outcome == "launched":
            if self.on_launched is not None:
                self.on_launched(run_id)
            log.info("trigger %s.%s fired %s: run %s", item.workflow, item.spec.name, key,
                     run_id)
        elif outcome == "failed":
            log.warning("trigger %s.%s could not start %s: %s", item.workflow,
                        item.spec.name, key, reason)

    @staticmethod
    def _input(item: Scheduled, key: str, slot: float | None, event: dict[str, Any]) -> Any:
        """The run's input: the trigger's `input:` rendered (raises TemplateError)."""
        spec = item.spec
        return None if spec.input is None else render_native(
            spec.input, _context(item, key, slot, event))

    def _finish_pending(self, item: Scheduled, now: float) -> None:
        """Queued-behind firings whose turn came, and firings a crash left pending."""
        for firing in self.ledger.pending(item.workflow, item.spec.name):
            assert firing.run_id is not None
            if self.ledger.run_exists(firing.run_id):  # queued, but not settled: a crash
                self._settle(item, firing.key, firing.run_id, "launched")
                continue
            waiting = item.spec.overlap == "queue"
            stale = now - firing.created_at / 1000.0 >= STALE_PENDING
            if not (waiting or stale or firing.run_id in self._mine):
                continue  # its host is queueing it right now
            slot = None if firing.slot_at is None else firing.slot_at / 1000.0
            event = json.loads(firing.event_json) if firing.event_json else {}
            if not self._start(item, firing.key, firing.run_id, slot, event):
                break  # behind a running run: the later ones wait too, in order

    def _count(self, item: Scheduled, outcome: str, slots: int) -> None:
        if self.counted is not None and slots:
            self.counted(item, outcome, slots)

    def _log_once(self, text: str) -> None:
        if text != self._failed:
            log.warning("wfrun host: %s", text)
            self._failed = text


def _context(item: Scheduled, key: str, slot: float | None,
             event: dict[str, Any]) -> dict[str, Any]:
    """What a trigger's `input:` and `key:` templates see."""
    spec = item.spec
    return {"trigger": {"name": spec.name, "workflow": item.workflow,
                        "slot": None if slot is None else slot_key(slot),
                        "kind": spec.kind, "key": key},
            "event": event}


def _ms(seconds: float) -> int:
    return round(seconds * 1000)
