"""`SqliteStore`: the embedded default store (DESIGN §5), one file per project.

    store = SqliteStore(project / ".wfrun/state/store.sqlite3")      # opens or creates
    SqliteStore.reset(project / ".wfrun/state/store.sqlite3")        # `wfrun store reset`
    SqliteStore(path, read_only=True)     # views: creates and changes nothing (`wfrun status`)

The caller decides the path; the store never looks at run bundles.

The input scrub it hands out (`input_scrub`) is db.py's `BatchedScrub`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from runner.clock import Clock, SystemClock
from runner.store._layout import SCHEMA_ID
from runner.store._parts import part
from runner.store.domain._launch_side import LaunchSide
from runner.store.sqlite._connector import SqliteConnector
from runner.store.sqlite._db import BatchedScrub, SqliteDatabase
from runner.store.sqlite._files import DEFAULT_BUSY_TIMEOUT_MS, remove_store_files
from runner.store.sqlite._open import open_database

if TYPE_CHECKING:
    from runner.store._controller_interface import ControllerStore
    from runner.store._interface import Store
    from runner.store.sqlite._controllers import (
        SqliteControllerEvents,
        SqliteEffects,
        SqliteReconcileQueue,
        SqliteResources,
        SqliteWorkflowRequests,
    )


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
        super().__init__(SqliteConnector(self._db, self._now))

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

        return SqliteResources(self._db, self._now)

    @part
    def reconcile_queue(self) -> SqliteReconcileQueue:
        from runner.store.sqlite._controllers import SqliteReconcileQueue

        return SqliteReconcileQueue(self._db, self._now)

    @part
    def effects(self) -> SqliteEffects:
        from runner.store.sqlite._controllers import SqliteEffects

        return SqliteEffects(self._db, self._now)

    @part
    def workflow_requests(self) -> SqliteWorkflowRequests:
        from runner.store.sqlite._controllers import SqliteWorkflowRequests

        return SqliteWorkflowRequests(self._db, self._now)

    @part
    def controller_events(self) -> SqliteControllerEvents:
        from runner.store.sqlite._controllers import SqliteControllerEvents

        return SqliteControllerEvents(self._db, self._now)

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
