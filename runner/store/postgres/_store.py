"""`PostgresStore`: the store (launch and controller sides) on one Postgres database.

    store = PostgresStore("postgresql://wfrun@db.internal/wfrun")   # opens or creates
    PostgresStore.reset(url)            # `wfrun store reset`: wfrun's tables only

The tables live in the first schema of the URL's search_path (`?options=-csearch_path%3Dx`
picks another), so several projects or tests can share one database. Leases and
delays use the database clock unless a Clock is injected (`clock=`, for tests).

Run bundles live in the same database (`bundles`, postgres/_bundles.py: the engine's
rows protocol), so any host on it can resume any run; see docs/store.md.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from runner.clock import Clock
from runner.store._layout import SCHEMA_ID
from runner.store._parts import part
from runner.store._urls import mask_url
from runner.store.domain._launch_side import LaunchSide
from runner.store.postgres._bundles import PostgresBundleRows
from runner.store.postgres._connector import PostgresConnector
from runner.store.postgres._db import (
    CONNECT_TIMEOUT_SECONDS,
    DEFAULT_POOL_SIZE,
    PostgresDatabase,
)
from runner.store.postgres._queries import LAUNCH_SIDE
from runner.store.postgres._schema import open_schema, reset_schema
from runner.store.postgres._wakeups import LaunchWakeups

if TYPE_CHECKING:
    from runner.store._controller_interface import ControllerStore
    from runner.store._interface import Store
    from runner.store.postgres._controllers import (
        PostgresControllerEvents,
        PostgresEffects,
        PostgresReconcileQueue,
        PostgresResources,
        PostgresWorkflowRequests,
    )


class PostgresStore(LaunchSide):
    """The durable store on Postgres; safe to share between threads
    (a connection pool) and between processes and machines (row locks)."""

    def __init__(self, url: str, *, clock: Clock | None = None,
                 pool_size: int = DEFAULT_POOL_SIZE,
                 connect_timeout: float = CONNECT_TIMEOUT_SECONDS, _reset: bool = False) -> None:
        self._url = url
        self._db = PostgresDatabase(url, now=clock.now if clock is not None else None,
                                    pool_size=pool_size,
                                    connect_timeout=connect_timeout)
        try:
            if _reset:
                reset_schema(self._db)
            else:
                open_schema(self._db)
        except BaseException:
            self._db.close()
            raise
        # The launch side is the backend-neutral domain over this database's connector.
        connector = PostgresConnector(self._db)
        super().__init__(connector, LAUNCH_SIDE)
        self._bundles = PostgresBundleRows(self._db)

    @classmethod
    def reset(cls, url: str, *, clock: Clock | None = None) -> PostgresStore:
        """Drop wfrun's tables in the URL's schema (nothing else) and create them again.
        The run bundle tables are kept. Stop every host using the store first."""
        return cls(url, clock=clock, _reset=True)

    @property
    def location(self) -> str:
        """The URL with its password masked: safe to print."""
        return mask_url(self._url)

    @property
    def schema_id(self) -> str:
        return SCHEMA_ID

    @property
    def bundles(self) -> PostgresBundleRows:
        """Run bundles as rows (the engine's `BundleRows`, wired in by the host)."""
        return self._bundles

    # --- controller side (ControllerStore) ---------------------------------------

    @part
    def resources(self) -> PostgresResources:
        from runner.store.postgres._controllers import PostgresResources

        return PostgresResources(self._db)

    @part
    def reconcile_queue(self) -> PostgresReconcileQueue:
        from runner.store.postgres._controllers import PostgresReconcileQueue

        return PostgresReconcileQueue(self._db)

    @part
    def effects(self) -> PostgresEffects:
        from runner.store.postgres._controllers import PostgresEffects

        return PostgresEffects(self._db)

    @part
    def workflow_requests(self) -> PostgresWorkflowRequests:
        from runner.store.postgres._controllers import PostgresWorkflowRequests

        return PostgresWorkflowRequests(self._db)

    @part
    def controller_events(self) -> PostgresControllerEvents:
        from runner.store.postgres._controllers import PostgresControllerEvents

        return PostgresControllerEvents(self._db)

    def launch_wakeups(self) -> LaunchWakeups:
        """A listener for detached launches becoming claimable (ids only)."""
        return LaunchWakeups(self._url)

    def now_ms(self) -> int:
        return self._db.now_ms()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r})"


if TYPE_CHECKING:
    _conforms: type[Store] = PostgresStore
    _conforms_controller: type[ControllerStore] = PostgresStore
