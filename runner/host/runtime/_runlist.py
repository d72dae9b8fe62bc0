"""`wfrun runs`: the run list paged in the store, not a fold of every bundle.

Every run is a launch row, so the list is one SQL page of launch rows, newest
first by launch time, and only the bundles of the rows on that page are read
(through `RunReader`), so the first page costs the same at 200 runs as at
100,000. Each row's status is `run_state` (runstate.py): the name `status`, `why`,
`show`, the HTTP API and the web view give the same run.

Launch statuses are not run states: `--status` maps each state onto the launch rows
that can hold it (`rows_for`), pages those in SQL and checks each row with its
bundle. `completed`, `waiting` and `continued` all end as `done` rows; the row's
`ending` (completed or waiting, set by the transaction that finishes the launch)
splits them in SQL too, so `--status waiting` opens no completed run's bundle. A
continued run is a waiting one that was answered: both page the waiting rows and
the bundle tells them apart.

A damaged store cannot page anything, but the bundles do not live in it: the list
then falls back to folding every bundle (slow, and said so on stderr), so the runs
stay visible while the store is restored.

A launch row without a readable bundle (queued, failed or cancelled before it
started) is listed from the row alone. A bundle without a launch row (made by a
wfrun before every run was a launch row) is not listed; `wfrun show RUN` still reads
it and `wfrun prune` still sees it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from runner.engine import RunReader
from runner.errors import WfrunError
from runner.store._errors import StoreCorrupt

from ._launches import book
from ._local import Workspace, open_store, store_choice, store_path
from ._runstate import rows_for
from ._views import RunFilter, RunRow, _parse_iso, launch_row, list_runs

if TYPE_CHECKING:
    from runner.store import Store

#: Rows a page shows unless `--limit` says otherwise (more is said, never cut silently).
DEFAULT_LIMIT = 50
#: The first SQL page is this many rows (or limit + 1); each next one doubles, so a
#: long filtered scan costs O(log n) queries and each row is read once.
FIRST_CHUNK = 64

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
        started = _parse_iso(row.started_at or row.created_at)
        if started is None or started.timestamp() < where.since:
            return False
    return True


def page_runs(store: Store, reader: RunReader, where: RunFilter) -> RunPage:
    """The newest runs that match `where`, at most `where.limit` (DEFAULT_LIMIT)."""
    limit = where.limit if where.limit is not None else DEFAULT_LIMIT
    rows_filter = rows_for(where.status)
    # Run ids begin with the workflow name: a primary-key range, checked exactly below.
    prefix = f"{where.workflow}-" if where.workflow is not None else None
    # A bundle started at or after `since` has a row changed at or after it too (the row
    # becomes running after its bundle starts): a superset, checked exactly below.
    changed = int(where.since * 1000) if where.since is not None else None
    rows: list[RunRow] = []
    offset, chunk = 0, max(FIRST_CHUNK, limit + 1)
    while len(rows) <= limit:
        records = book(store).page(statuses=rows_filter.statuses, run_id_prefix=prefix,
                                      updated_since=changed, limit=chunk, offset=offset,
                                      ending=rows_filter.ending)
        batch = reader.preloaded(r.run_id for r in records)
        for record in records:
            row = launch_row(batch, record)
            if _matches(row, where):
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
    except WfrunError as exc:  # a damaged store (StoreCorrupt) among them
        damaged = exc if isinstance(exc, StoreCorrupt) else exc.__cause__
        if not isinstance(damaged, StoreCorrupt):
            raise
        rows = list_runs(reader, where=RunFilter(status=where.status, workflow=where.workflow,
                                                 since=where.since, limit=limit + 1))
        return RunPage(rows=rows[:limit], more=len(rows) > limit, limit=limit,
                       note="the store is damaged (`wfrun store check` says how to restore "
                            "it); these runs were read from their bundles")
