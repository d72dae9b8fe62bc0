"""The launch half of a `Store`, the same on every backend: built from its connector.

`SqliteStore` and `PostgresStore` inherit this and add only what is theirs (the
file's checkpoint and integrity check; the URL, wake-ups and bundle rows).
"""

from __future__ import annotations

from collections.abc import Mapping

from runner.store.connector import Connector
from runner.store.domain.events import RunEvents
from runner.store.domain.fanout import FanoutItems
from runner.store.domain.intents import TurnIntents
from runner.store.domain.launches import LaunchQueue
from runner.store.domain.notifications import Notifications
from runner.store.domain.retention import Retention


class LaunchSide:
    """`launches`, `turn_intents`, `notifications`, `run_events`, `retention` and
    `fanout`.
    `overrides` are the backend's named queries per domain module (`"events"`,
    `"launches"`, `"pages"`, `"intents"`, `"notifications"`)."""

    def __init__(self, connector: Connector,
                 overrides: Mapping[str, Mapping[str, str]] | None = None) -> None:
        mine = overrides or {}
        self._run_events = RunEvents(connector, mine.get("events"))
        self._launches = LaunchQueue(connector, self._run_events, mine)
        self._turn_intents = TurnIntents(connector, mine.get("intents"))
        self._notifications = Notifications(connector, mine.get("notifications"))
        self._retention = Retention(connector)
        self._fanout = FanoutItems(connector)

    @property
    def launches(self) -> LaunchQueue:
        return self._launches

    @property
    def turn_intents(self) -> TurnIntents:
        return self._turn_intents

    @property
    def notifications(self) -> Notifications:
        return self._notifications

    @property
    def run_events(self) -> RunEvents:
        return self._run_events

    @property
    def retention(self) -> Retention:
        """Forgetting pruned runs and trimming history (`wfrun prune`)."""
        return self._retention

    @property
    def fanout(self) -> FanoutItems:
        """The branches and items of `parallel` and `map` nodes (ADR 0008)."""
        return self._fanout
