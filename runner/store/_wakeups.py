"""The store's wake-up source, backend-neutral: how a host learns of new work.

A backend that can push notices (Postgres: LISTEN/NOTIFY) offers `launch_wakeups()`,
a `Wakeups` whose `wait(timeout)` blocks until detached launches become claimable
(their ids) or the timeout passes (no ids). A backend without one (SQLite: other
processes' commits are not announced) offers nothing, and its hosts poll. Either
way polling stays the fallback: a notice is a hint to claim now, never the only
path to a launch.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


class Wakeups(Protocol):
    """One listening connection."""

    def wait(self, timeout: float) -> list[str]:
        """Block up to `timeout` seconds; the ids announced (maybe none). Raises
        `StoreError` when the connection is lost (the next call reconnects)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class WakeupSource(Protocol):
    def launch_wakeups(self) -> Wakeups: ...


def launch_wakeups(store: object) -> Wakeups | None:
    """A listener for `store`'s claimable detached launches, or None: poll."""
    if isinstance(store, WakeupSource):
        return store.launch_wakeups()
    return None
