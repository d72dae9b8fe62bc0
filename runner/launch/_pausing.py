"""`wfrun pause` / `wfrun unpause`: any run, from any process or host, through the store.

A run that is running (or about to: queued, starting) is asked through a run event,
the road a cross-process cancel takes: its runner's lease keeper reads it
(keeper.py) and the engine stops at the next node boundary, recorded as paused, and
parks; its launch parks `paused`, so it holds no slot and no host claims it. A run
already parked is switched to `paused` in place. `unpause` makes a paused launch
`auto` again, so the next host (or `wfrun resume`) resumes it; a pause still
pending is withdrawn by an unpause event, and should the runner have parked in
between, `settle_pause` sees that event after the park and unpauses it.

A running launch whose runner is gone (its lease ran out) is taken over and parked
`paused` here, as `cancel` takes such a launch over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from runner.errors import ConflictError, InputError, NotFoundError
from runner.store import LaunchBook, LaunchRecord, LostRace, Store

from ._keeper import PAUSE_EVENT, UNPAUSE_EVENT, pause_pending


class PauseSite(Protocol):
    """What pausing needs of a runner (the coordinator; launch/ never imports it)."""

    @property
    def store(self) -> Store: ...
    @property
    def runner_id(self) -> str: ...
    @property
    def lease_seconds(self) -> float: ...

#: `paused`: it is paused now; `pausing`: its runner pauses it at the next boundary;
#: `unpaused`: it is claimable again (or a pending pause was withdrawn).
PauseState = Literal["paused", "pausing", "unpaused"]


@dataclass(frozen=True)
class PauseResult:
    run_id: str
    state: PauseState
    launch: str  # the launch row's status afterwards

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "state": self.state, "launch": self.launch}


def _record(co: PauseSite, run_id: str) -> LaunchRecord:
    record = LaunchBook(co.store).get(run_id)
    if record is None:
        raise NotFoundError(f"no launch '{run_id}'; `wfrun runs` lists runs")
    return record


def _pending(store: Store, run_id: str) -> bool:
    return pause_pending([e.type for e in store.run_events.read(run_id=run_id)])


def pause(co: PauseSite, run_id: str, *,
          dead_runner: str | None = None) -> PauseResult:
    """`dead_runner`: the runner the caller proved dead (a process of this machine that
    is gone); its lease is void now, as for `wfrun resume`."""
    record = _record(co, run_id)
    status = record.status
    if status in ("done", "failed", "cancelled"):
        raise ConflictError(f"run '{run_id}' already ended ({status}); nothing to pause")
    if status == "parked":
        if record.park_mode == "paused":
            return PauseResult(run_id, "paused", status)
        result = co.store.pauses.pause_parked(run_id, runner_id=co.runner_id)
        if isinstance(result, LostRace):
            raise ConflictError(f"run '{run_id}' changed state ({result.status}); try again")
        return PauseResult(run_id, "paused", result.status)
    if status == "running" and (not record.lease_live(co.store.now_ms())
                                or (dead_runner is not None
                                    and dead_runner == record.runner_id)):
        return _pause_abandoned(co, record, dead_runner)
    if not _pending(co.store, run_id):
        co.store.run_events.append(run_id, PAUSE_EVENT, {}, workflow_ref=record.workflow_ref,
                                   runner_id=co.runner_id)
    return PauseResult(run_id, "pausing", status)


def _pause_abandoned(co: PauseSite, record: LaunchRecord,
                     dead_runner: str | None) -> PauseResult:
    """Its runner died mid-run: take the claim over and park it `paused` (the bundle
    is resumed at its interrupted node once it is unpaused)."""
    claimed = LaunchBook(co.store).claim(record.run_id, runner_id=co.runner_id,
                                      lease_seconds=co.lease_seconds, dead_runner=dead_runner)
    if isinstance(claimed, LostRace):
        raise ConflictError(f"run '{record.run_id}' changed state ({claimed.status}); "
                            "try again")
    parked = LaunchBook(co.store).park(record.run_id, claimed.claim_token or "", mode="paused")
    if isinstance(parked, LostRace):
        raise ConflictError(f"run '{record.run_id}' changed state ({parked.status}); "
                            "try again")
    return PauseResult(record.run_id, "paused", parked.status)


def unpause(co: PauseSite, run_id: str) -> PauseResult:
    record = _record(co, run_id)
    if record.status == "parked" and record.park_mode == "paused":
        result = co.store.pauses.unpause(run_id, runner_id=co.runner_id)
        if isinstance(result, LostRace):
            raise ConflictError(f"run '{run_id}' changed state ({result.status}); try again")
        return PauseResult(run_id, "unpaused", result.status)
    if record.status in ("queued", "starting", "running") and _pending(co.store, run_id):
        co.store.run_events.append(run_id, UNPAUSE_EVENT, {}, workflow_ref=record.workflow_ref,
                                   runner_id=co.runner_id)
        settle_pause(co.store, run_id)  # it may have parked while we looked
        return PauseResult(run_id, "unpaused", record.status)
    raise InputError(f"run '{run_id}' is not paused (its launch is {record.status}"
                     f"{' ' + record.park_mode if record.park_mode else ''}); "
                     f"`wfrun status {run_id}` says more")


def settle_pause(store: Store, run_id: str) -> None:
    """After a park for a pause: an unpause that came in between (its event after the
    request) makes the launch claimable again."""
    events = [e.type for e in store.run_events.read(run_id=run_id)]
    # The park's own `launch.parked` ends the request; what matters is whether an
    # unpause followed the last request.
    last_pause = max((i for i, t in enumerate(events) if t == PAUSE_EVENT), default=-1)
    if UNPAUSE_EVENT in events[last_pause + 1:]:
        record = LaunchBook(store).get(run_id)
        if record is not None and record.status == "parked" and record.park_mode == "paused":
            store.pauses.unpause(run_id)
