"""The controller tables on SQLite. Their rules and statements are written once in
runner/store/domain/ (controller_queue.py, controller_resources.py,
controller_events.py, effects.py, workflow_requests.py); this binds them to a
store file through the SQLite connector (no statement differs on SQLite)."""

from __future__ import annotations

from collections.abc import Callable

from runner.store.domain._controller_events import ControllerEventFeed
from runner.store.domain._controller_passes import PassQueue
from runner.store.domain._controller_resources import ResourceTable
from runner.store.domain._effects import EffectLedger
from runner.store.domain._workflow_requests import RequestBook
from runner.store.sqlite._connector import SqliteConnector
from runner.store.sqlite._db import SqliteDatabase


class SqliteReconcileQueue(PassQueue):
    """`ReconcileQueue` on SQLite."""

    def __init__(self, db: SqliteDatabase, clock: Callable[[], float]) -> None:
        super().__init__(SqliteConnector(db, clock))


class SqliteResources(ResourceTable):
    """`Resources` on SQLite."""

    def __init__(self, db: SqliteDatabase, clock: Callable[[], float]) -> None:
        super().__init__(SqliteConnector(db, clock))


class SqliteControllerEvents(ControllerEventFeed):
    """`ControllerEvents` on SQLite."""

    def __init__(self, db: SqliteDatabase, clock: Callable[[], float]) -> None:
        super().__init__(SqliteConnector(db, clock))


class SqliteEffects(EffectLedger):
    """`Effects` on SQLite."""

    def __init__(self, db: SqliteDatabase, clock: Callable[[], float]) -> None:
        super().__init__(SqliteConnector(db, clock))


class SqliteWorkflowRequests(RequestBook):
    """`WorkflowRequests` on SQLite."""

    def __init__(self, db: SqliteDatabase, clock: Callable[[], float]) -> None:
        super().__init__(SqliteConnector(db, clock))
