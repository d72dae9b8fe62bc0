"""The host's watch on the sources of its queued detached launches: while launches wait
for a slot, an edit of their workflow source is logged once per source identity
(activation's digest check still decides; this only says it early).

The source watch's query groups the queued launches by source identity in the
database (one row per distinct source, never one per launch: a host's memory stays
flat in the queue's length), still a scan of the queue: it runs at most once per
poll interval, and at most every WATCH_SHARE times its own last duration, so a long
queue costs the loop at most ~1/WATCH_SHARE of its time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from runner.clock import Clock
from runner.store import LaunchBook, StoreError
from runner.store import QueuedSources as QueuedSourceRow

from .runtime._local import Workspace
from .runtime._watch import Drift, Sourced, SourceWatch

log = logging.getLogger(__name__)
WATCH_SHARE = 20
WATCH_SOURCES = 1000  # distinct source identities watched at most (the oldest first)


@dataclass(frozen=True, slots=True)
class SourceGroup:
    """The queued detached launches of one source identity, as the watch sees them:
    `run_id` is the group's key (drift is a property of the files, not of a launch)."""

    run_id: str
    source: dict[str, object]
    launches: int
    first_run_id: str

    @staticmethod
    def of(row: QueuedSourceRow) -> SourceGroup | None:
        try:
            source = json.loads(row.source_json)
        except ValueError:
            return None
        if not isinstance(source, dict):
            return None
        key = "sources-" + hashlib.sha256(row.source_json.encode()).hexdigest()[:16]
        return SourceGroup(key, source, row.launches, row.first_run_id)

    def named(self) -> str:
        if self.launches == 1:
            return f"queued launch {self.first_run_id}"
        return f"{self.launches} queued launches ({self.first_run_id}, ...)"


class QueuedSourceWatch:
    """Groups the queued launches by source identity and watches each group's files."""

    def __init__(self, ws: Workspace, book: LaunchBook, poll: float) -> None:
        self.book = book
        self.clock: Clock = ws.clock
        self.project_root: Path | None = ws.project_root
        self.poll = poll
        self.watch = SourceWatch(self._drifted, on_clear=self._restored, clock=ws.clock)
        self._lock = threading.Lock()
        self._watched_at: float | None = None
        self._watch_every = poll  # seconds between two looks at the queue (WATCH_SHARE)
        self._drift_logged: set[str] = set()  # one log line per drifted source group
        self.groups: dict[str, SourceGroup] = {}  # the watched groups, by key

    def look(self) -> None:
        """Watch the sources of the detached launches still queued: one query, at most
        once per poll interval (a busy host wakes on every run that ends), and less often
        when the queue is so long that the query itself takes a while (WATCH_SHARE)."""
        now = self.clock.monotonic()
        if self._watched_at is not None and now - self._watched_at < self._watch_every:
            return
        self._watched_at = now
        try:
            rows = self.book.queued_sources(limit=WATCH_SOURCES)
        except StoreError as exc:
            log.debug("source watch: cannot list queued launches: %s", exc.message)
            return
        finally:
            took = self.clock.monotonic() - now
            self._watch_every = max(self.poll, WATCH_SHARE * took)
        groups = [g for g in map(SourceGroup.of, rows) if g is not None]
        with self._lock:
            self.groups = {g.run_id: g for g in groups}
            self._drift_logged &= set(self.groups)
        self.watch.update(groups)

    def _drifted(self, watched: Sourced, drift: Drift) -> None:
        with self._lock:
            group = self.groups.get(watched.run_id)
            if group is None or watched.run_id in self._drift_logged:
                return
            self._drift_logged.add(watched.run_id)
        log.warning("wfrun host: %s: its workflow source %s was %s; activation re-checks it "
                    "and refuses a changed definition (source_changed)", group.named(),
                    drift.display(self.project_root), drift.detail)

    def _restored(self, watched: Sourced) -> None:
        with self._lock:
            self._drift_logged.discard(watched.run_id)  # a later change is news again
