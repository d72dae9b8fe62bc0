"""The input scrub: no stale WAL frame keeps a copy of cleared private input.

A launch's private input is cleared from its row when it goes `running` (or fails,
or is cancelled); `secure_delete` zeroes it in the database file, but the WAL still
holds the frames written before. A TRUNCATE checkpoint folds the WAL into the file
and empties it. One checkpoint per run made every later commit grow the WAL again
(issue 15), so an activation *owes* its scrub and the owed scrubs are paid together:
when the runner finds the queue empty, when a run claimed by id ends, or once
SCRUB_BATCH activations or SCRUB_SECONDS have passed since the first one owed
(checked at each activation, claim and run end, and by the lease keeper's tick while
a run executes). docs/launch.md ("Secrets") has the bound.

SQLite discipline, so it lives beside the SQLite store (huey keeps its own in
`storage.py`); Postgres has no WAL file to scrub and its store hands out `NoScrub`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from runner.store._errors import StoreError

if TYPE_CHECKING:
    import logging


def _log() -> logging.Logger:
    """This module's logger. `logging` loads only when something is logged: the
    SQLite store imports this module on every command (cold start)."""
    import logging

    return logging.getLogger(__name__)


SCRUB_BATCH = 64
SCRUB_SECONDS = 1.0


class BatchedScrub:
    """One runner's owed scrubs over one store file. Thread-safe: the run path and
    the lease keeper's thread both pay it. `monotonic` is the runner's clock."""

    def __init__(self, checkpoint: Callable[[], None], monotonic: Callable[[], float], *,
                 enabled: bool = True, batch: int = SCRUB_BATCH,
                 seconds: float = SCRUB_SECONDS) -> None:
        self._checkpoint = checkpoint
        self._monotonic = monotonic
        self._enabled = enabled  # False: benches compare the cost without it
        self._batch = batch
        self._seconds = seconds
        self._lock = threading.Lock()
        self._owed = 0
        self._since = 0.0

    def cleared(self) -> None:
        """An activation cleared input: owe its scrub; pay now if the batch is due."""
        now = self._monotonic()
        with self._lock:
            if not self._owed:
                self._since = now
            self._owed += 1
        self.tick()

    def tick(self) -> None:
        """Pay the owed scrubs if the batch is due (by count or by age)."""
        now = self._monotonic()
        with self._lock:
            due = self._owed >= self._batch or (
                self._owed > 0 and now - self._since >= self._seconds)
        if due:
            self.now()

    def flush(self) -> None:
        """Pay the owed scrubs, if any (idle, or a run claimed by id ended)."""
        with self._lock:
            owed = self._owed > 0
        if owed:
            self.now()

    def now(self) -> None:
        """Scrub at once (a failed start, a cancel, recovery): this pays what is owed
        too. Best effort: a busy store keeps the frames until the next scrub."""
        with self._lock:
            self._owed = 0
        if not self._enabled:
            return
        try:
            self._checkpoint()
        except StoreError as exc:
            _log().debug("could not checkpoint the store after clearing input: %s", exc.message)
