"""A disk that refuses a run bundle: the launch waits, nothing is lost (issue 10).

A full, read-only or forbidden file system is not the run's fault and not the
launch's: failing the launch would throw a queued launch away, and counting it as an
activation crash would poison it after three tries. So, by how far the run got:

    nothing began (no durable `run_started`)   the half-made bundle is removed and the
                                               launch goes back to `queued` (input kept,
                                               no crash counted); a foreground launch
                                               (`wfrun run`) fails instead, its caller
                                               is told to run it again
    the run began                              the launch is parked (`explicit`): its
                                               trace is the truth, `wfrun resume`
                                               continues it, the interrupted node runs
                                               again

Then the runner holds off claiming (`FaultGate`) so a host on a full disk does not
spin claiming and releasing the same launch; one log line says what to do.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from runner.clock import Clock
from runner.errors import MachineFault, WfrunError
from runner.store import (
    LostRace,
    StoreDiskFull,
    StoreError,
    StoreNoPermission,
    StoreReadOnly,
)

if TYPE_CHECKING:
    from .coordinator import Activation, LaunchCoordinator

log = logging.getLogger(__name__)
HOLD_OFF_SECONDS = 30.0


class FaultGate:
    """The last machine fault a coordinator met; claiming waits until it is old."""

    def __init__(self, clock: Clock, hold_off: float = HOLD_OFF_SECONDS) -> None:
        self.clock = clock
        self.hold_off = hold_off
        self.last: MachineFault | None = None
        self.announce = False  # a host sets it: its log is where the news goes
        self._at: float | None = None

    def say(self, text: str, *args: object) -> None:
        """One line per launch left waiting: a warning in a host's log (`announce`), a
        debug line where a command reports the fault itself (`wfrun start --wait`)."""
        (log.warning if self.announce else log.debug)(text, *args)

    def record(self, fault: MachineFault) -> None:
        self.last, self._at = fault, self.clock.monotonic()

    def active(self) -> bool:
        """True while the last fault is younger than `hold_off` seconds."""
        return self._at is not None and self.clock.monotonic() - self._at < self.hold_off


def store_fault(exc: StoreError) -> MachineFault | None:
    """A store that refused a write for the machine's sake (its disk full or read-only,
    or not this user's) as the fault its launch waits out; None for any other error."""
    if isinstance(exc, StoreDiskFull):
        return MachineFault("no space left on the device holding the store",
                            "free some space")
    if isinstance(exc, StoreReadOnly):
        return MachineFault("the store is on a read-only file system or folder",
                            "make it writable")
    if isinstance(exc, StoreNoPermission):
        return MachineFault("this user may not write the store",
                            "run wfrun as the project's owner")
    return None


def hold(co: LaunchCoordinator, act: Activation, fault: MachineFault) -> None:
    """Leave `act`'s launch consistent and resumable after `fault` (see the module)."""
    co.faults.record(fault)
    record, token = act.record, act.token
    run_id = record.run_id
    foreground = record.affinity_runner_id == co.runner_id  # `wfrun run`: it tells its user
    if act.driver is not None:
        act.driver.bundle.close()
    try:
        began = co.reader.started(run_id)
    except WfrunError:
        began = None  # the runs folder cannot be read: its bundle is left alone
    try:
        if not began:
            if began is False:
                _discard(co, act)
            if foreground:
                co.fail_launch(record, token, "activation_failed",
                               f"{fault.problem}; {fault.todo}, then start it again",
                               fixed=True)
                return
            released = co.store.launches.release(run_id, token)
            if not isinstance(released, LostRace):
                co.faults.say("run %s stays queued: %s; %s and it starts again", run_id,
                            fault.problem, fault.todo)
            return
        current = co.store.launches.get(run_id)
        if current is not None and current.status == "starting":
            co.store.launches.mark_running(run_id, token)
        parked = co.store.launches.park(run_id, token, mode="explicit")
        if not isinstance(parked, LostRace) and not foreground:
            co.faults.say("run %s is parked: %s; %s, then `wfrun resume %s` continues it",
                        run_id, fault.problem, fault.todo, run_id)
    except StoreError as exc:
        # The store is on the same refusing disk: its lease expires and recovery
        # settles the launch from the bundle, which is unchanged.
        log.warning("run %s: %s; the store could not record it either (%s)", run_id,
                    fault.problem, exc.message)


def _discard(co: LaunchCoordinator, act: Activation) -> None:
    """Remove the half-made bundle; a read-only disk keeps it, and the next activation
    removes it (it never began, so nothing in it counts)."""
    engine = act.engine or co.bare_engine()
    try:
        engine.discard_unstarted(act.record.run_id, act.record.parent_run_id)
    except OSError as exc:
        log.debug("run %s: half-made bundle left for the next activation (%s)",
                  act.record.run_id, exc.strerror)
