"""The launch half of a `Store`, the same on every backend: built from its connector.

`SqliteStore` and `PostgresStore` inherit this and add only what is theirs (the
file's checkpoint and integrity check; the URL, wake-ups and bundle rows).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from runner.store.connector import Connector
from runner.store.domain.events import RunEvents
from runner.store.domain.intents import TurnIntents
from runner.store.domain.launches import LaunchQueue
from runner.store.domain.notifications import Notifications
from runner.store.domain.retention import Retention
from runner.store.interface import InputScrub, NoScrub


class LaunchSide:
    """`launches`, `turn_intents`, `notifications`, `run_events` and `retention`.
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

    def input_scrub(self, monotonic: Callable[[], float], *,
                    enabled: bool = True) -> InputScrub:
        """Nothing to scrub by default: a backend whose files keep stale copies of
        cleared input (SQLite's WAL) overrides this."""
        return NoScrub()
