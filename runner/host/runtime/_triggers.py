"""The project's triggers as a host runs them (`wfrun host`, DESIGN §10).

Only workflows of the project's own folder (.wfrun/workflows) start on their
triggers: a workflow in the user's folder or a built-in one is shared by every
project, and a schedule of its own would fire once per project host. A workflow
that does not compile keeps its triggers out (one log line) until it is fixed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from runner.clock import iso
from runner.compiler._diagnostics import did_you_mean
from runner.errors import InputError, WfrunError
from runner.launch._slots import next_slot, slot_key
from runner.launch._triggers import Scheduled, TriggerLoop

from ._audit import Done, audited

if TYPE_CHECKING:
    from runner.controllers import Controller
    from runner.launch._coordinator import LaunchCoordinator
    from runner.store import Store
    from runner.store.domain._triggers import Firing

    from ._audit import Actor
    from ._filetriggers import FileTriggers
    from ._local import Workspace

log = logging.getLogger("wfrun.triggers")

#: Seconds between two looks at the project's workflows for their triggers (a look
#: re-hashes each file; a new or edited schedule applies within this long).
REFRESH_EVERY = 2.0
#: A webhook request re-reads them itself only when they are this old (`served`).
SERVED_STALE = 3 * REFRESH_EVERY


def project_triggers(ws: Workspace, broken: dict[str, str] | None = None) -> list[Scheduled]:
    """Every trigger of the project's valid workflows; `broken` collects why a
    workflow with a problem was left out (name -> message)."""
    found: list[Scheduled] = []
    for entry in ws.definitions().active:
        if entry.origin != "project":
            continue
        try:
            definition, _ = ws.compile(entry.name)
        except WfrunError as exc:
            if broken is not None:
                broken[entry.name] = exc.message
            continue
        found.extend(Scheduled(definition.name, spec) for spec in definition.triggers)
    return found


@dataclass
class HostTriggers:
    """The trigger loop of one host: its workflows re-read every REFRESH_EVERY."""

    ws: Workspace
    store: Store
    coordinator: LaunchCoordinator
    on_launched: Callable[[str], None] | None = None
    listening: bool = False  # serving webhooks (`--listen`)
    # The controllers this host runs, and how a key goes on one's queue (the manager).
    controllers: Callable[[], Iterable[Controller]] | None = None
    enqueue: Callable[[str, str], None] | None = None
    # (trigger, outcome, slots) as the loop records them: the host's metrics.
    counted: Callable[[Scheduled, str, int], None] | None = None
    loop: TriggerLoop = field(init=False)
    _triggers: list[Scheduled] = field(default_factory=list, init=False)
    _read_at: float | None = field(default=None, init=False)
    _broken: dict[str, str] = field(default_factory=dict, init=False)
    _told: set[str] = field(default_factory=set, init=False)
    files: FileTriggers | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.loop = TriggerLoop(self.store.triggers, self.ws.clock,
                                self._launcher(self.coordinator), triggers=self.current,
                                cancel=self._cancel, on_launched=self.on_launched,
                                enqueue=self.enqueue, counted=self.counted,
                                starter=self.coordinator)

    def current(self) -> list[Scheduled]:
        now = self.ws.clock.monotonic()
        if self._read_at is None or now - self._read_at >= REFRESH_EVERY:
            broken: dict[str, str] = {}
            found = project_triggers(self.ws, broken)
            for controller in (self.controllers() if self.controllers is not None else ()):
                found.extend(Scheduled.of_controller(controller.name, spec)
                             for spec in controller.triggers)
            self._triggers = found  # whole: a webhook request reads it from its thread
            for name, why in broken.items():
                if self._broken.get(name) != why:
                    log.warning("wfrun host: workflow '%s' starts on no trigger: %s", name, why)
            self._broken = broken
            self._read_at = now
            for item in self._triggers:
                self._unserved(item)
            if self.files is None and any(t.spec.files for t in self._triggers) and \
                    self.ws.project_root is not None:
                from ._filetriggers import FileTriggers  # watchdog: only when needed

                self.files = FileTriggers(self.ws.project_root, self.loop, self.ws.clock)
                self.files.start()
            if self.files is not None:
                self.files.watch(self._triggers)
        return self._triggers

    def served(self) -> list[Scheduled]:
        """The triggers as last read, for a webhook request: the re-read (each file
        re-hashed, ~0.6 ms of CPU under the GIL, many times that on a loaded host)
        is the host loop's, which ticks every poll, not a waiting sender's. Read
        here only when no loop read them for SERVED_STALE (none runs: a test)."""
        read_at = self._read_at
        if read_at is None or self.ws.clock.monotonic() - read_at >= SERVED_STALE:
            return self.current()
        return self._triggers

    def _unserved(self, item: Scheduled) -> None:
        """One log line per trigger this host does not fire."""
        name = f"{item.workflow}/{item.spec.name}"
        why = None
        if item.spec.webhook is not None and not self.listening:
            why = "a webhook trigger needs `wfrun host --listen ADDR:PORT`"
        if why is not None and name not in self._told:
            self._told.add(name)
            log.warning("wfrun host: trigger %s starts nothing here: %s", name, why)

    def tick(self) -> float | None:
        """Fire what is due; seconds until the next slot or file batch (None: none)."""
        due = self.loop.tick()
        batch = self.files.due() if self.files is not None else None
        return due if batch is None else batch if due is None else min(due, batch)

    def stop(self) -> None:
        if self.files is not None:
            self.files.stop()

    @staticmethod
    def _launcher(coordinator: LaunchCoordinator) -> Callable[[str, Any, str], None]:
        def launch(workflow: str, run_input: Any, run_id: str) -> None:
            coordinator.prepare(workflow, run_input, run_id=run_id)
        return launch

    def _cancel(self, run_id: str) -> None:
        self.coordinator.cancel(run_id)


# -- `wfrun triggers` ------------------------------------------------------------------
def all_triggers(ws: Workspace, broken: dict[str, str] | None = None) -> list[Scheduled]:
    """The project's workflow triggers, then its controllers' (`controller:NAME`)."""
    from ._controllers import discover

    found = project_triggers(ws, broken)
    for entry in discover(ws, ws.catalog.user_dir):
        definition = entry.result.definition
        if entry.shadowed_by is None and entry.result.valid and definition is not None:
            found.extend(Scheduled.of_controller(entry.name, spec)
                         for spec in definition.triggers)
    return found


def find_trigger(ws: Workspace, name: str) -> Scheduled:
    """`WORKFLOW/TRIGGER` (`controller:NAME/TRIGGER`), or a TRIGGER name only one
    workflow or controller of the project has."""
    broken: dict[str, str] = {}
    every = all_triggers(ws, broken)
    workflow, _, trigger = name.rpartition("/")
    matches = [s for s in every if s.spec.name == trigger
               and (not workflow or workflow in (s.workflow, s.controller))]
    if len(matches) == 1:
        return matches[0]
    names = [f"{s.workflow}/{s.spec.name}" for s in every]
    if len(matches) > 1:
        raise InputError(f"trigger '{name}' is in several workflows; name one of: "
                         + ", ".join(f"{s.workflow}/{s.spec.name}" for s in matches))
    if workflow in broken:
        raise InputError(f"workflow '{workflow}' does not compile: {broken[workflow]}")
    hint = did_you_mean(name, names + [s.spec.name for s in every])
    known = ", ".join(names) if names else "none (add `triggers:` to a project workflow)"
    raise InputError(f"no trigger '{name}'" + (f"; {hint}" if hint else "")
                     + f"; the project's triggers: {known}")


def trigger_rows(ws: Workspace, store: Store | None) -> list[dict[str, Any]]:
    """What `wfrun triggers` and the console's triggers page show: each trigger, its
    policy, last and next firing, and the slots it skipped or missed (a project
    without a store yet: none fired)."""
    now = ws.clock.now()
    rows = []
    for item in all_triggers(ws):
        spec = item.spec
        state = store.triggers.state(item.workflow, spec.name) if store else None
        summary = store.triggers.summary(item.workflow, spec.name) if store else None
        paused = bool(state and state.paused)
        upcoming = next_slot(spec, now) if spec.scheduled and not paused else None
        last = summary.last if summary else None
        rows.append({
            "name": f"{item.workflow}/{spec.name}", "workflow": item.workflow,
            "controller": item.controller, "key": spec.key,
            "trigger": spec.name, "kind": spec.kind, "schedule": spec.schedule_text(),
            "missed": spec.missed if spec.scheduled else None,
            "catch_up_window": spec.catch_up_window if spec.scheduled else None,
            "overlap": spec.overlap, "paused": paused,
            "last": None if last is None else {**last.to_json(), "slot": _key_time(last)},
            "next": None if upcoming is None else slot_key(upcoming),
            "counts": summary.counts if summary else {},
            "skipped": [{**f.to_json(), "slot": _key_time(f)}
                        for f in (summary.recent_skipped if summary else ())],
        })
    return rows


def _key_time(firing: Firing) -> str:
    return firing.key if firing.slot_at is not None else iso(firing.created_at / 1000)


def set_paused(ws: Workspace, store: Store, name: str, paused: bool) -> tuple[str, bool]:
    """Pause or resume; (the trigger's full name, whether it changed)."""
    item = find_trigger(ws, name)
    changed = store.triggers.set_paused(item.workflow, item.spec.name, paused,
                                        round(ws.clock.now() * 1000))
    return f"{item.workflow}/{item.spec.name}", changed


def pause_trigger(ws: Workspace, store: Store, actor: Actor, name: str,
                  paused: bool) -> dict[str, Any]:
    """`wfrun triggers pause|resume` and the console's buttons: one audited action
    (`pause`/`unpause` naming the trigger). The reply: the trigger's full name, its
    state now and whether this changed it."""
    def do() -> dict[str, Any]:
        full, changed = set_paused(ws, store, name, paused)
        return {"action": "pause" if paused else "resume", "trigger": full,
                "paused": paused, "changed": changed}

    return audited(store, actor, "pause" if paused else "unpause", run_id=None,
                   workflow=None, detail={"trigger": name}, do=do,
                   done=lambda r: Done(None, r["trigger"].rpartition("/")[0]))


def backfill(ws: Workspace, store: Store, coordinator: LaunchCoordinator, name: str,
             start: str, end: str, limit: int, *,
             actor: Actor) -> list[tuple[str, str | None, str]]:
    """Queue a run for each slot of a cron or every trigger in [start, end] that has
    none; times are ISO 8601, in the trigger's time zone when they name none. One
    audited action (`start`, naming the trigger and the window)."""
    def told(done: list[tuple[str, str | None, str]]) -> Done:
        queued = sum(1 for _, _, outcome in done if outcome == "launched")
        return Done(detail={"queued": queued})

    return audited(store, actor, "start", run_id=None, workflow=None,
                   detail={"trigger": name, "backfill": {"from": start, "to": end}},
                   do=lambda: _backfill(ws, store, coordinator, name, start, end, limit),
                   done=told)


def _backfill(ws: Workspace, store: Store, coordinator: LaunchCoordinator, name: str,
              start: str, end: str, limit: int) -> list[tuple[str, str | None, str]]:
    item = find_trigger(ws, name)
    if not item.spec.scheduled:
        raise InputError(f"trigger '{name}' is a {item.spec.kind} trigger; only cron and "
                         "every triggers have slots to backfill")
    zone = ZoneInfo(item.spec.timezone)
    first, last = _when(start, "--from", zone), _when(end, "--to", zone)
    if last < first:
        raise InputError("--to is before --from")
    queue: Any = store  # a controller's key goes on its queue (every Store has one)
    loop = TriggerLoop(store.triggers, ws.clock, HostTriggers._launcher(coordinator),
                       triggers=list, enqueue=lambda controller, key:
                       queue.reconcile_queue.enqueue(controller, key))
    try:
        return loop.backfill(item, first, last, limit)
    except ValueError as exc:
        raise InputError(f"{exc}; narrow --from/--to or raise --max") from None


def _when(text: str, flag: str, zone: ZoneInfo) -> float:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"{flag} '{text}' is not an ISO 8601 time like 2027-03-01T00:00 "
                         "or 2027-03-01T00:00+01:00") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return moment.timestamp()
