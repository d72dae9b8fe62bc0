"""Controller children as launch rows: the host side of `ctx.workflows.ensure`.

A child run is a detached launch row like any other (so `wfrun status`, `cancel`
and `wfrun host` see it, and a host takes over a killed host's children after
their lease). This launcher queues the row with the run id the request already
saved, then executes it on a worker thread, at most `max_workers` at once across
every controller (the global worker limit). The store settles the child's request
and wakes the parent's key in the transaction that ends the launch.

Taking over a child whose runner died first reaps the shell process groups that
dead runners left (`reap`), so an orphaned node does not run on beside its rerun.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from runner.engine import RunControl
from runner.errors import ConflictError, InputError
from runner.launch import LaunchCoordinator, PreflightError
from runner.store import LaunchRecord, LaunchStatus

log = logging.getLogger(__name__)
DEFAULT_CHILD_WORKERS = 4


class LocalChildLauncher:
    """Runs controller children in this process, through the launch coordinator."""

    def __init__(self, coordinator: LaunchCoordinator, *,
                 max_workers: int = DEFAULT_CHILD_WORKERS,
                 reap: Callable[[], object] | None = None) -> None:
        self.coordinator = coordinator
        # Kills the process groups recorded by runners that are no longer alive.
        self._reap = reap or (lambda: None)
        self._slots = threading.BoundedSemaphore(max(max_workers, 1))
        self._lock = threading.Lock()
        self._active: dict[str, tuple[threading.Thread, RunControl]] = {}

    # -- the ChildLauncher protocol (runner.controllers._workflows) ----------------------
    def launch(self, run_id: str, workflow: str, run_input: Any) -> str | None:
        """Queue the child's launch row and run it; an error text when it cannot start."""
        try:
            self.coordinator.prepare(workflow, run_input, run_id=run_id)
        except PreflightError as exc:
            return f"cannot start child workflow: {exc.message} [{exc.code}]"
        self._run(run_id)
        return None

    def status(self, run_id: str) -> LaunchStatus | None:
        record = self.coordinator.book.get(run_id)
        return None if record is None else record.status

    def take_over(self, run_id: str) -> bool:
        """Resume a child whose runner is gone (expired lease, or parked); False while
        another live runner holds it or it has ended."""
        if self.active(run_id):
            return True
        # A dead runner's shell groups would go on running the interrupted node
        # beside its rerun (and repeat its side effect): kill them first.
        try:
            self._reap()
        except OSError as exc:
            log.warning("could not reap the process groups of dead runners: %s", exc)
        try:
            self.coordinator.claim(run_id)
        except (ConflictError, InputError):
            # Held by a live runner, gone, or ended since the caller read its status
            # (another process ran it to its end in between).
            return False
        self._start_thread(run_id, claimed=True)
        return True

    def active(self, run_id: str | None) -> bool:
        with self._lock:
            return run_id is not None and run_id in self._active

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._active)

    def shutdown(self, grace: float = 10.0) -> None:
        """Park running children (a later host resumes them) and wait, bounded."""
        with self._lock:
            active = list(self._active.values())
        for _, control in active:
            control.park("controller shutdown", auto_resume=True)
        for thread, _ in active:
            thread.join(timeout=grace)

    # -- running -------------------------------------------------------------------------
    def _run(self, run_id: str) -> None:
        self._start_thread(run_id, claimed=False)

    def _start_thread(self, run_id: str, *, claimed: bool) -> None:
        control = RunControl()
        thread = threading.Thread(target=self._execute, args=(run_id, control, claimed),
                                  daemon=True, name=f"wfrun-child-{run_id}")
        with self._lock:
            self._active[run_id] = (thread, control)
        thread.start()

    def _execute(self, run_id: str, control: RunControl, claimed: bool) -> None:
        try:
            with self._slots:
                if control.stopping:
                    return  # shut down before a slot freed up: the row stays for a host
                record: LaunchRecord | None
                if claimed:
                    record = self.coordinator.book.get(run_id)
                else:
                    try:
                        record = self.coordinator.claim(run_id)
                    except (ConflictError, InputError):
                        return  # a host took it first (perhaps ended it); it settles the request
                if record is not None and record.claim_token is not None:
                    self.coordinator.execute(record, control=control)
        except Exception:  # execute has its own boundary; this guards the claim
            log.exception("child run %s could not be executed", run_id)
        finally:
            with self._lock:
                self._active.pop(run_id, None)
