"""`SqliteStore`: the embedded default store (DESIGN §5), one file per project.

    store = SqliteStore(project / ".wfrun/state/store.sqlite3")      # opens or creates
    SqliteStore.reset(project / ".wfrun/state/store.sqlite3")        # `wfrun store reset`
    SqliteStore(path, read_only=True)     # views: creates and changes nothing (`wfrun status`)

The caller decides the path; the store never looks at run bundles.

The input scrub (`BatchedScrub`, `input_scrub`): no stale WAL frame keeps a copy of
cleared private input.

A launch's private input is cleared from its row when it goes `running` (or fails,
or is cancelled); `secure_delete` zeroes it in the database file, but the WAL still
holds the frames written before. A TRUNCATE checkpoint folds the WAL into the file
and empties it. One checkpoint per run made every later commit grow the WAL again
(issue 15), so an activation *owes* its scrub and the owed scrubs are paid together:
when the runner finds the queue empty, when a run claimed by id ends, or once
SCRUB_BATCH activations or SCRUB_SECONDS have passed since the first one owed
(checked at each activation, claim and run end, and by the lease keeper's tick while
a run executes). docs/launch.md ("Secrets") has the bound.

SQLite discipline, so it lives in the SQLite store (huey keeps its own in
`storage.py`); Postgres has no WAL file to scrub and its store hands out `NoScrub`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from runner.clock import Clock, SystemClock
from runner.store._errors import StoreError
from runner.store._layout import SCHEMA_ID
from runner.store._parts import part
from runner.store.domain._launch_side import LaunchSide
from runner.store.sqlite._connector import SqliteConnector
from runner.store.sqlite._db import SqliteDatabase, open_database
from runner.store.sqlite._files import DEFAULT_BUSY_TIMEOUT_MS, remove_store_files

if TYPE_CHECKING:
    import logging

    from runner.store._controller_interface import ControllerStore
    from runner.store._interface import Store
    from runner.store.sqlite._controllers import (
        SqliteControllerEvents,
        SqliteEffects,
        SqliteReconcileQueue,
        SqliteResources,
        SqliteWorkflowRequests,
    )


def _log() -> logging.Logger:
    """This module's logger. `logging` loads only when something is logged: this
    module loads on every command (cold start)."""
    import logging

    return logging.getLogger(__name__)


SCRUB_BATCH = 64
SCRUB_SECONDS = 1.0


class BatchedScrub:
    """One runner's owed scrubs over one store file. Thread-safe: the run path and
    the lease keeper's thread both pay it. `monotonic` is the runner's clock."""

    def __init__(self, checkpoint: Callable[[], None], monotonic: Callable[[], float], *,
                 enabled: bool = True, batch: int = SCRUB_BATCH,
                 seconds: float = SCRUB_SECONDS) -> None:
        self._checkpoint = checkpoint
        self._monotonic = monotonic
        self._enabled = enabled  # False: benches compare the cost without it
        self._batch = batch
        self._seconds = seconds
        self._lock = threading.Lock()
        self._owed = 0
        self._since = 0.0

    def cleared(self) -> None:
        """An activation cleared input: owe its scrub; pay now if the batch is due."""
        now = self._monotonic()
        with self._lock:
            if not self._owed:
                self._since = now
            self._owed += 1
        self.tick()

    def tick(self) -> None:
        """Pay the owed scrubs if the batch is due (by count or by age)."""
        now = self._monotonic()
        with self._lock:
            due = self._owed >= self._batch or (
                self._owed > 0 and now - self._since >= self._seconds)
        if due:
            self.now()

    def flush(self) -> None:
        """Pay the owed scrubs, if any (idle, or a run claimed by id ended)."""
        with self._lock:
            owed = self._owed > 0
        if owed:
            self.now()

    def now(self) -> None:
        """Scrub at once (a failed start, a cancel, recovery): this pays what is owed
        too. Best effort: a busy store keeps the frames until the next scrub."""
        with self._lock:
            self._owed = 0
        if not self._enabled:
            return
        try:
            self._checkpoint()
        except StoreError as exc:
            _log().debug("could not checkpoint the store after clearing input: %s", exc.message)


class SqliteStore(LaunchSide):
    """The durable store on one SQLite file.

    Time is read on `clock` (`clock.now()`: wall-clock seconds since the Unix epoch;
    the system clock when none is given); the store keeps integer milliseconds.
    Leases and expiry are computed from it, so tests pass a fake clock. One store
    object may be shared by threads: each thread gets its own connection.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        read_only: bool = False,
    ) -> None:
        self._path = Path(path)
        self._now = (clock if clock is not None else SystemClock()).now
        self._db: SqliteDatabase = open_database(
            self._path, now_ms=self.now_ms(), busy_timeout_ms=busy_timeout_ms,
            read_only=read_only,
        )
        # The launch side is the backend-neutral domain over this file's connector.
        super().__init__(SqliteConnector(self._db, self.now_ms))

    @classmethod
    def reset(
        cls,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    ) -> SqliteStore:
        """Delete the store file (and its -wal/-shm/-journal) and create a fresh one.

        Touches nothing else: run bundles live elsewhere and are never removed.
        Stop every host using the store first.
        """
        remove_store_files(Path(path))
        return cls(path, clock=clock, busy_timeout_ms=busy_timeout_ms)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def schema_id(self) -> str:
        return SCHEMA_ID

    # --- controller side (ControllerStore) ---------------------------------------

    @part
    def resources(self) -> SqliteResources:
        from runner.store.sqlite._controllers import SqliteResources

        return SqliteResources(self._db, self.now_ms)

    @part
    def reconcile_queue(self) -> SqliteReconcileQueue:
        from runner.store.sqlite._controllers import SqliteReconcileQueue

        return SqliteReconcileQueue(self._db, self.now_ms)

    @part
    def effects(self) -> SqliteEffects:
        from runner.store.sqlite._controllers import SqliteEffects

        return SqliteEffects(self._db, self.now_ms)

    @part
    def workflow_requests(self) -> SqliteWorkflowRequests:
        from runner.store.sqlite._controllers import SqliteWorkflowRequests

        return SqliteWorkflowRequests(self._db, self.now_ms)

    @part
    def controller_events(self) -> SqliteControllerEvents:
        from runner.store.sqlite._controllers import SqliteControllerEvents

        return SqliteControllerEvents(self._db, self.now_ms)

    def now_ms(self) -> int:
        return round(self._now() * 1000)  # nearest ms: float seconds carry representation noise

    def settings(self) -> dict[str, object]:
        """The durability settings in force (journal_mode, synchronous, ...)."""
        return self._db.settings()

    def checkpoint(self) -> None:
        """Fold the WAL into the database file and truncate the WAL.

        With `secure_delete=ON` this leaves no copy of cleared private input in
        either file.
        """
        self._db.checkpoint()

    def input_scrub(self, monotonic: Callable[[], float], *,
                    enabled: bool = True) -> BatchedScrub:
        """A runner's batched scrub of cleared input from the WAL (scrub.py)."""
        return BatchedScrub(self.checkpoint, monotonic, enabled=enabled)

    def integrity_problems(self, limit: int = 20) -> list[str]:
        """SQLite's `quick_check` of every page and index (empty: the file is sound).
        It reads the whole file, so only `wfrun store check` asks."""
        return self._db.integrity_problems(limit)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteStore({str(self._path)!r})"


if TYPE_CHECKING:
    _conforms: type[Store] = SqliteStore
    _conforms_controller: type[ControllerStore] = SqliteStore
