"""The launch half of a `Store`, the same on every backend: built from its connector.

`SqliteStore` and `PostgresStore` inherit this and add only what is theirs (the
file's checkpoint and integrity check; the URL, wake-ups and bundle rows).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from runner.store._connector import Connector
from runner.store._interface import InputScrub, NoScrub
from runner.store.domain._audit import AuditLog
from runner.store.domain._deliveries import NotificationDeliveries
from runner.store.domain._events import RunEvents
from runner.store.domain._fanout import FanoutItems
from runner.store.domain._intents import TurnIntents
from runner.store.domain._launches import LaunchQueue
from runner.store.domain._notifications import Notifications
from runner.store.domain._operations import Pauses, Reruns, StepCache
from runner.store.domain._retention import Retention
from runner.store.domain._triggers import TriggerLedger


class LaunchSide:
    """`launches`, `turn_intents`, `notifications`, `run_events`, `retention` and
    `triggers`, `fanout`.
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
        self._reruns = Reruns(connector)
        self._pauses = Pauses(connector, self._run_events)
        self._step_cache = StepCache(connector)
        self._audit = AuditLog(connector, mine.get("audit"))
        self._deliveries = NotificationDeliveries(connector, mine.get("deliveries"))
        self._triggers = TriggerLedger(connector, self._launches)
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
    def deliveries(self) -> NotificationDeliveries:
        """The channel outbox: `notify` messages on their way to webhooks and Slack."""
        return self._deliveries

    @property
    def audit(self) -> AuditLog:
        """What operators did through the HTTP API (`wfrun audit`)."""
        return self._audit

    @property
    def retention(self) -> Retention:
        """Forgetting pruned runs and trimming history (`wfrun prune`)."""
        return self._retention

    def input_scrub(self, monotonic: Callable[[], float], *,
                    enabled: bool = True) -> InputScrub:
        """Nothing to scrub by default: a backend whose files keep stale copies of
        cleared input (SQLite's WAL) overrides this."""
        return NoScrub()

    @property
    def reruns(self) -> Reruns:
        """Rerun links (`wfrun rerun`): `rerun_of` and `rerun_by`."""
        return self._reruns

    @property
    def pauses(self) -> Pauses:
        """Pausing and unpausing parked launches (`wfrun pause|unpause`)."""
        return self._pauses

    @property
    def step_cache(self) -> StepCache:
        """Kept ok node outputs (`cache:`), `wfrun cache list|clear`."""
        return self._step_cache

    @property
    def triggers(self) -> TriggerLedger:
        """Trigger states and firings (DESIGN §10)."""
        return self._triggers

    @property
    def fanout(self) -> FanoutItems:
        """The branches and items of `parallel` and `map` nodes (ADR 0008)."""
        return self._fanout
