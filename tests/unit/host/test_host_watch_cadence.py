"""How often `wfrun host` looks at its queue for the source watch: once per poll
interval, and never more than 1/WATCH_SHARE of its time when the query is slow (a long
queue). A real SQLite store; the host's clock is a FakeClock that the store's query
moves forward, as a slow query would take time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.clock import FakeClock
from runner.compiler import build_catalog
from runner.host._daemon import StandaloneHost
from runner.host._queuewatch import WATCH_SHARE
from runner.host.runtime._local import Workspace
from runner.store import SqliteStore


class _TimedQueries:
    """The launch queue, except that each query takes `took` seconds on the clock."""

    def __init__(self, inner: Any, clock: FakeClock) -> None:
        self.inner, self.clock, self.took, self.queries = inner, clock, 0.0, 0

    def queued_sources(self, **kwargs: Any) -> Any:
        self.queries += 1
        self.clock.advance(self.took)
        return self.inner.queued_sources(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Store:
    def __init__(self, inner: SqliteStore, launches: Any) -> None:
        self._inner, self.launches = inner, launches

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_slow_queue_query_spaces_the_next_ones_out(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    clock = FakeClock()
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun", clock=clock)
    inner = SqliteStore(root / ".wfrun" / "state" / "store.sqlite3")
    try:
        launches = _TimedQueries(inner.launches, clock)
        host = StandaloneHost(ws, _Store(inner, launches), poll=0.5)  # type: ignore[arg-type]

        # A quick query: the queue is looked at once per poll interval.
        host.sources.look()
        host.sources.look()
        assert launches.queries == 1
        clock.advance(0.5)
        host.sources.look()
        assert launches.queries == 2

        # A query that took 1 s: the next one waits WATCH_SHARE seconds from its start.
        launches.took = 1.0
        clock.advance(0.5)
        host.sources.look()
        assert launches.queries == 3
        clock.advance(WATCH_SHARE - 1.0 - 0.1)
        host.sources.look()
        assert launches.queries == 3
        clock.advance(0.1)
        launches.took = 0.0
        host.sources.look()
        assert launches.queries == 4

        # Quick again: back to once per poll interval.
        clock.advance(0.5)
        host.sources.look()
        assert launches.queries == 5
    finally:
        inner.close()
