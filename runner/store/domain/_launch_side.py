"""The launch half of a `Store`, the same on every backend: built from its connector.

`SqliteStore` and `PostgresStore` inherit this and add only what is theirs (the
file's checkpoint and integrity check; the URL, wake-ups and bundle rows).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from runner.store._connector import Connector
from runner.store._interface import InputScrub, NoScrub
from runner.store._parts import part
from runner.store.domain._launch_queries import RunEvents
from runner.store.domain._launches import LaunchQueue

if TYPE_CHECKING:
    from runner.store.domain._audit import AuditLog
    from runner.store.domain._deliveries import NotificationDeliveries
    from runner.store.domain._fanout import FanoutItems
    from runner.store.domain._intents import TurnIntents
    from runner.store.domain._notifications import Notifications
    from runner.store.domain._operations import Pauses, Reruns, StepCache
    from runner.store.domain._retention import Retention
    from runner.store.domain._triggers import TriggerLedger


class LaunchSide:
    """`launches`, `turn_intents`, `notifications`, `run_events`, `retention` and
    `triggers`, `fanout`.
    `overrides` are the backend's named queries per domain module (`"events"`,
    `"launches"`, `"pages"`, `"intents"`, `"notifications"`).

    The launch queue and its event log are built with the store; every other part on
    first use, so a command that reads the queue (`wfrun status`) imports none of
    their modules (issue 34 item 11, cold start)."""

    def __init__(self, connector: Connector,
                 overrides: Mapping[str, Mapping[str, str]] | None = None) -> None:
        mine = overrides or {}
        self._connector = connector
        self._overrides = mine
        self._run_events = RunEvents(connector, mine.get("events"))
        self._launches = LaunchQueue(connector, self._run_events, mine)

    @property
    def launches(self) -> LaunchQueue:
        return self._launches

    @part
    def turn_intents(self) -> TurnIntents:
        from runner.store.domain._intents import TurnIntents

        return TurnIntents(self._connector, self._overrides.get("intents"))

    @part
    def notifications(self) -> Notifications:
        from runner.store.domain._notifications import Notifications

        return Notifications(self._connector, self._overrides.get("notifications"))

    @property
    def run_events(self) -> RunEvents:
        return self._run_events

    @part
    def deliveries(self) -> NotificationDeliveries:
        """The channel outbox: `notify` messages on their way to webhooks and Slack."""
        from runner.store.domain._deliveries import NotificationDeliveries

        return NotificationDeliveries(self._connector, self._overrides.get("deliveries"))

    @part
    def audit(self) -> AuditLog:
        """What operators did through the HTTP API (`wfrun audit`)."""
        from runner.store.domain._audit import AuditLog

        return AuditLog(self._connector, self._overrides.get("audit"))

    @part
    def retention(self) -> Retention:
        """Forgetting pruned runs and trimming history (`wfrun prune`)."""
        from runner.store.domain._retention import Retention

        return Retention(self._connector)

    def input_scrub(self, monotonic: Callable[[], float], *,
                    enabled: bool = True) -> InputScrub:
        """Nothing to scrub by default: a backend whose files keep stale copies of
        cleared input (SQLite's WAL) overrides this."""
        return NoScrub()

    @part
    def reruns(self) -> Reruns:
        """Rerun links (`wfrun rerun`): `rerun_of` and `rerun_by`."""
        from runner.store.domain._operations import Reruns

        return Reruns(self._connector)

    @part
    def pauses(self) -> Pauses:
        """Pausing and unpausing parked launches (`wfrun pause|unpause`)."""
        from runner.store.domain._operations import Pauses

        return Pauses(self._connector, self._run_events)

    @part
    def step_cache(self) -> StepCache:
        """Kept ok node outputs (`cache:`), `wfrun cache list|clear`."""
        from runner.store.domain._operations import StepCache

        return StepCache(self._connector)

    @part
    def triggers(self) -> TriggerLedger:
        """Trigger states and firings (DESIGN §10)."""
        from runner.store.domain._triggers import TriggerLedger

        return TriggerLedger(self._connector, self._launches)

    @part
    def fanout(self) -> FanoutItems:
        """The branches and items of `parallel` and `map` nodes (ADR 0008)."""
        from runner.store.domain._fanout import FanoutItems

        return FanoutItems(self._connector)
