"""`wfrun runs`: the run list paged in the store, not a fold of every bundle.

Every run is a launch row, so the list is one SQL page of launch rows, newest
first by launch time, and only the bundles of the rows on that page are read
(through `RunReader`), so the first page costs the same at 200 runs as at
100,000. The rows say what the bundles say (status, times, node), exactly as the
bundle fold did.

Bundle statuses are not launch statuses: `--status` maps each one onto the launch
statuses whose rows can hold such a bundle (`CANDIDATES`, from the coordinator's
ending map), pages those in SQL and checks each bundle. `completed`, `waiting` and
`continued` all end as `done` rows; the row's `ending` (completed or waiting, set
by the transaction that finishes the launch) splits them in SQL too (`ENDINGS`), so
`--status waiting` opens no completed run's bundle. A continued run is a waiting
one that was answered: both page the waiting rows and the bundle tells them apart.

A damaged store cannot page anything, but the bundles do not live in it: the list
then falls back to folding every bundle (slow, and said so on stderr), so the runs
stay visible while the store is restored.

A bundle without a launch row (made by a wfrun before every run was a launch row)
is not listed; `wfrun show RUN` still reads it and `wfrun prune` still sees it. A
row without a readable bundle (queued, failed or cancelled before it started, a
bundle on another host) is not a run yet and is skipped, as the fold skipped it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.engine import RunReader
from runner.errors import WfrunError
from runner.store import LaunchStatus
from runner.store.errors import StoreCorrupt
from runner.store.states import LaunchEnding

from .local import Workspace, open_store, store_choice, store_path
from .views import RunFilter, RunRow, _parse_iso, list_runs, run_row

#: Rows a page shows unless `--limit` says otherwise (more is said, never cut silently).
DEFAULT_LIMIT = 50
#: The first SQL page is this many rows (or limit + 1); each next one doubles, so a
#: long filtered scan costs O(log n) queries and each row is read once.
FIRST_CHUNK = 64

_ACTIVE: tuple[LaunchStatus, ...] = ("starting", "running", "parked")
#: Launch statuses whose rows may hold a bundle in each bundle status. A live row's
#: bundle can be one step ahead of the row (ended, ending not yet recorded), and a
#: parked row's bundle still says running, so the live statuses are in every set.
CANDIDATES: Mapping[str | None, tuple[LaunchStatus, ...]] = {
    None: (*_ACTIVE, "done", "failed", "cancelled"),  # queued rows have no bundle yet
    "running": _ACTIVE,
    "paused": _ACTIVE,
    "completed": (*_ACTIVE, "done"),
    "waiting": (*_ACTIVE, "done"),
    "continued": (*_ACTIVE, "done"),
    "failed": (*_ACTIVE, "failed"),
    "timed_out": (*_ACTIVE, "failed"),
    "cancelled": (*_ACTIVE, "cancelled"),
}


#: The `ending` of the done rows each bundle status can be (`continued`: answered).
ENDINGS: Mapping[str | None, LaunchEnding] = {
    "completed": "completed", "waiting": "waiting", "continued": "waiting"}


@dataclass(frozen=True)
class RunPage:
    rows: list[RunRow]
    more: bool  # more runs match than the page shows
    limit: int
    note: str | None = None  # said on stderr: how the list was made, when not the usual way


def _matches(row: RunRow, where: RunFilter) -> bool:
    if where.status is not None and row.status != where.status:
        return False
    if where.workflow is not None and row.workflow != where.workflow:
        return False
    if where.since is not None:
        started = _parse_iso(row.started_at)
        if started is None or started.timestamp() < where.since:
            return False
    return True


def page_runs(store: Any, reader: RunReader, where: RunFilter) -> RunPage:
    """The newest runs that match `where`, at most `where.limit` (DEFAULT_LIMIT)."""
    limit = where.limit if where.limit is not None else DEFAULT_LIMIT
    statuses = CANDIDATES[where.status]
    # Run ids begin with the workflow name: a primary-key range, checked exactly below.
    prefix = f"{where.workflow}-" if where.workflow is not None else None
    # A bundle started at or after `since` has a row changed at or after it too (the row
    # becomes running after its bundle starts): a superset, checked exactly below.
    changed = int(where.since * 1000) if where.since is not None else None
    rows: list[RunRow] = []
    offset, chunk = 0, max(FIRST_CHUNK, limit + 1)
    while len(rows) <= limit:
        records = store.launches.page(statuses=statuses, run_id_prefix=prefix,
                                      updated_since=changed, limit=chunk, offset=offset,
                                      ending=ENDINGS.get(where.status))
        for record in records:
            row = run_row(reader, record.run_id)
            if row is not None and _matches(row, where):
                rows.append(row)
                if len(rows) > limit:
                    break
        if len(records) < chunk:
            break
        offset += chunk
        chunk *= 2
    return RunPage(rows=rows[:limit], more=len(rows) > limit, limit=limit)


def list_runs_paged(ws: Workspace, where: RunFilter) -> RunPage:
    """`wfrun runs`: a project without a store yet has no runs (nothing is created)."""
    limit = where.limit if where.limit is not None else DEFAULT_LIMIT
    if store_choice(ws).url is None and not store_path(ws).is_file():
        return RunPage(rows=[], more=False, limit=limit)
    reader = RunReader(ws.runs_dir)
    try:
        store = open_store(ws, read_only=True)
        try:
            return page_runs(store, ws.reader(store), where)
        finally:
            store.close()
    except (StoreCorrupt, WfrunError) as exc:
        damaged = exc if isinstance(exc, StoreCorrupt) else exc.__cause__
        if not isinstance(damaged, StoreCorrupt):
            raise
        rows = list_runs(reader, where=RunFilter(status=where.status, workflow=where.workflow,
                                                 since=where.since, limit=limit + 1))
        return RunPage(rows=rows[:limit], more=len(rows) > limit, limit=limit,
                       note="the store is damaged (`wfrun store check` says how to restore "
                            "it); these runs were read from their bundles")
