"""`effects`, `workflow_requests` and `controller_events` on Postgres. Their rules
and statements are written once in runner/store/domain/ (effects.py,
workflow_requests.py, controller_events.py); this binds them to the pool through
the Postgres connector (row locks before every guarded change)."""

from __future__ import annotations

from runner.store.domain.controller_events import ControllerEventFeed
from runner.store.domain.effects import EffectLedger
from runner.store.domain.workflow_requests import RequestBook
from runner.store.postgres.connector import PostgresConnector
from runner.store.postgres.db import PostgresDatabase


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
