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

Then the runner holds off claiming (`claims.FaultGate`) so a host on a full disk does not
spin claiming and releasing the same launch; one log line says what to do.
"""

from __future__ import annotations

import logging

from runner.engine import RunReader
from runner.errors import MachineFault, WfrunError
from runner.store import (
    LaunchBook,
    LostRace,
    StoreDiskFull,
    StoreError,
    StoreNoPermission,
    StoreReadOnly,
)

from ._activation import Activation
from ._endings import Endings
from ._engines import Engines
from ._queue import FaultGate

log = logging.getLogger(__name__)


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


class FaultHold:
    """Leaves a launch consistent and resumable after a machine fault (see the module)."""

    def __init__(self, book: LaunchBook, runner_id: str, reader: RunReader, gate: FaultGate,
                 endings: Endings, engines: Engines) -> None:
        self._book = book
        self._runner_id = runner_id
        self._reader = reader
        self._gate = gate
        self._endings = endings
        self._engines = engines

    def hold(self, act: Activation, fault: MachineFault) -> None:
        """Leave `act`'s launch consistent and resumable after `fault`."""
        self._gate.record(fault)
        record, token = act.record, act.token
        run_id = record.run_id
        launches = self._book
        foreground = record.affinity_runner_id == self._runner_id  # `wfrun run` tells its user
        if act.driver is not None:
            act.driver.bundle.close()
        try:
            began = self._reader.started(run_id)
        except WfrunError:
            began = None  # the runs folder cannot be read: its bundle is left alone
        try:
            if not began:
                if began is False:
                    self._discard(act)
                if foreground:
                    self._endings.fail_launch(
                        record, token, "activation_failed",
                        f"{fault.problem}; {fault.todo}, then start it again", fixed=True)
                    return
                released = launches.release(run_id, token)
                if not isinstance(released, LostRace):
                    self._gate.say("run %s stays queued: %s; %s and it starts again", run_id,
                                   fault.problem, fault.todo)
                return
            current = launches.get(run_id)
            if current is not None and current.status == "starting":
                launches.mark_running(run_id, token)
            parked = launches.park(run_id, token, mode="explicit")
            if not isinstance(parked, LostRace) and not foreground:
                self._gate.say("run %s is parked: %s; %s, then `wfrun resume %s` continues "
                               "it", run_id, fault.problem, fault.todo, run_id)
        except StoreError as exc:
            # The store is on the same refusing disk: its lease expires and recovery
            # settles the launch from the bundle, which is unchanged.
            log.warning("run %s: %s; the store could not record it either (%s)", run_id,
                        fault.problem, exc.message)

    def _discard(self, act: Activation) -> None:
        """Remove the half-made bundle; a read-only disk keeps it, and the next
        activation removes it (it never began, so nothing in it counts)."""
        engine = act.engine or self._engines.bare()
        try:
            engine.space.discard_unstarted(act.record.run_id, act.record.parent_run_id)
        except OSError as exc:
            log.debug("run %s: half-made bundle left for the next activation (%s)",
                      act.record.run_id, exc.strerror)
