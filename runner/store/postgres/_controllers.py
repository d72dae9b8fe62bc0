"""The controller tables on Postgres. Their rules and statements are written once in
runner/store/domain/ (controller_queue.py, controller_passes.py,
controller_resources.py, controller_events.py, effects.py, workflow_requests.py);
this binds them to the pool through the Postgres connector, whose dialect locks a
row before every guarded change and lets claims skip rows another host has locked
(`FOR UPDATE SKIP LOCKED`), so hosts sharing a database never wait on each other's
candidates and one key is reconciled by one holder at a time."""

from __future__ import annotations

from runner.store.domain._controller_events import ControllerEventFeed
from runner.store.domain._controller_passes import PassQueue
from runner.store.domain._controller_resources import ResourceTable
from runner.store.domain._effects import EffectLedger
from runner.store.domain._workflow_requests import RequestBook
from runner.store.postgres._connector import PostgresConnector
from runner.store.postgres._db import PostgresDatabase


class PostgresResources(ResourceTable):
    """`Resources` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(PostgresConnector(db))


class PostgresReconcileQueue(PassQueue):
    """`ReconcileQueue` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(PostgresConnector(db))


class PostgresControllerEvents(ControllerEventFeed):
    """`ControllerEvents` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(PostgresConnector(db))


class PostgresEffects(EffectLedger):
    """`Effects` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(PostgresConnector(db))


class PostgresWorkflowRequests(RequestBook):
    """`WorkflowRequests` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(PostgresConnector(db))
