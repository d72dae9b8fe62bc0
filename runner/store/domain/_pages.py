"""Reads of `workflow_run_queue` for list views (`wfrun ui`'s run list, `wfrun runs`).

Every run is a launch row, so a list view pages here, in SQL, instead of folding
every run bundle. Reads only, each statement in its own snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from runner.store._connector import Connector, in_params
from runner.store._records import LaunchRecord
from runner.store._states import (
    LAUNCH_ENDINGS,
    LAUNCH_STATUSES,
    LaunchEnding,
    LaunchStatus,
)
from runner.store.domain._launch_queries import launch_from_row

SQL: Mapping[str, str] = {
    # A range on the primary key (binary collation), not a LIKE that scans. Postgres
    # overrides it: its text order follows the database's collation.
    "prefix": "run_id >= :prefix AND run_id < :prefix_end",
}


def prefix_end(prefix: str) -> str:
    """The least string greater than every string that starts with `prefix`."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def status_clause(statuses: Iterable[LaunchStatus], params: dict[str, object]) -> str:
    """`status IN (...)` for `statuses` (added to `params`); an unknown status is a
    programming error, and no statuses match nothing."""
    wanted = list(statuses)
    unknown = [s for s in wanted if s not in LAUNCH_STATUSES]
    if unknown:
        raise ValueError(f"unknown launch status(es) {unknown}")
    marks, named = in_params("status", wanted)
    params.update(named)
    return f"status IN {marks}"


def _created(created_from: int | None, created_to: int | None,
             params: dict[str, object]) -> list[str]:
    """The creation-time bounds as clauses (their values added to `params`)."""
    clauses = []
    if created_from is not None:
        clauses.append("created_at >= :created_from")
        params["created_from"] = created_from
    if created_to is not None:
        clauses.append("created_at < :created_to")
        params["created_to"] = created_to
    return clauses


class LaunchPages:
    """The paged, read-only side of `LaunchQueue` (a base of `domain.launches.LaunchQueue`)."""

    def __init__(self, connector: Connector, sql: Mapping[str, str]) -> None:
        self._connector = connector
        self._pages_sql = sql

    def page(self, *, statuses: Iterable[LaunchStatus] | None = None,
             workflow_ref: str | None = None, run_id_prefix: str | None = None,
             updated_since: int | None = None, newest_first: bool = True, limit: int = 50,
             offset: int = 0, ending: LaunchEnding | None = None,
             created_from: int | None = None, created_to: int | None = None
             ) -> list[LaunchRecord]:
        """A page in creation order; `created_from` and `created_to` (ms, inclusive,
        exclusive) bound the creation time."""
        if ending is not None and ending not in LAUNCH_ENDINGS:
            raise ValueError(f"unknown launch ending {ending!r}")
        if workflow_ref is None and not run_id_prefix and updated_since is None \
                and created_from is None and created_to is None:
            return self._page_by_status(statuses, newest_first, max(limit, 0),
                                        max(offset, 0), ending)
        clauses: list[str] = []
        params: dict[str, object] = {"limit": max(limit, 0), "offset": max(offset, 0)}
        if statuses is not None:
            clauses.append(status_clause(statuses, params))
        if workflow_ref is not None:
            clauses.append("workflow_ref = :workflow_ref")
            params["workflow_ref"] = workflow_ref
        if run_id_prefix:
            clauses.append(self._pages_sql["prefix"])
            params.update(prefix=run_id_prefix, prefix_end=prefix_end(run_id_prefix))
        if updated_since is not None:
            clauses.append("updated_at >= :updated_since")
            params["updated_since"] = updated_since
        if ending is not None:
            clauses.append("(status <> 'done' OR ending = :ending)")
            params["ending"] = ending
        clauses.extend(_created(created_from, created_to, params))
        where = " AND ".join(clauses) or "1 = 1"
        order = "DESC" if newest_first else "ASC"
        # With a workflow or time filter the rows that match are sorted: the sort runs
        # over run ids only and the page's whole rows are fetched by primary key, ~3x
        # less work at 100,000 rows than sorting whole rows (SQLite).
        return self._fetch(f"workflow_run_queue WHERE {where}", order, params)

    def _fetch(self, source: str, order: str, params: dict[str, object]) -> list[LaunchRecord]:
        """The page of `source` (rows with run_id and created_at) in run-list order: its
        run ids sorted, then the page's whole rows fetched by primary key."""
        sort = f"created_at {order}, run_id {order}"
        with self._connector.read() as tx:
            rows = tx.all(
                "SELECT * FROM workflow_run_queue WHERE run_id IN"
                f" (SELECT run_id FROM {source} ORDER BY {sort}"
                f" LIMIT :limit OFFSET :offset) ORDER BY {sort}", params)
        return [launch_from_row(row) for row in rows]

    def _page_by_status(self, statuses: Iterable[LaunchStatus] | None, newest_first: bool,
                        limit: int, offset: int,
                        ending: LaunchEnding | None) -> list[LaunchRecord]:
        """A page over statuses (and the `done` rows' ending) alone: one range per
        status, each read in order for at most `limit + offset` entries, then merged.
        The `done` rows, the bulk of a store, are one range of `workflow_run_queue_ended`
        (ending, created_at, run_id) per ending, so the first page stays flat however
        many runs finished; the other statuses go through the status index and sort
        what they match (the live launches are few; failed and cancelled runs are
        sorted, their run ids only)."""
        wanted = list(dict.fromkeys(LAUNCH_STATUSES if statuses is None else statuses))
        status_clause(wanted, {})  # refuses an unknown status
        params: dict[str, object] = {"n": limit + offset, "limit": limit, "offset": offset}
        order = "DESC" if newest_first else "ASC"
        sort = f"created_at {order}, run_id {order}"
        branches: list[str] = []
        for i, status in enumerate(wanted):
            params[f"s{i}"] = status
            if status != "done":
                branches.append(f"status = :s{i}")
                continue
            # A row has an ending exactly when it is `done` (a CHECK of the table).
            for j, end in enumerate((ending,) if ending is not None else LAUNCH_ENDINGS):
                params[f"e{j}"] = end
                branches.append(f"ending = :e{j}")
        union = " UNION ALL ".join(
            f"SELECT * FROM (SELECT run_id, created_at FROM workflow_run_queue WHERE {where}"
            f" ORDER BY {sort} LIMIT :n) AS b{k}" for k, where in enumerate(branches))
        return self._fetch(f"({union}) AS u", order, params) if union else []

    def counts(self, *, workflow_ref: str | None = None) -> dict[str, int]:
        where = "workflow_ref = :ref" if workflow_ref else "1 = 1"
        with self._connector.read() as tx:
            rows = tx.all(f"SELECT status, COUNT(*) AS n FROM workflow_run_queue WHERE {where}"
                          " GROUP BY status", {"ref": workflow_ref})
        return {str(row["status"]): int(row["n"]) for row in rows}

    def ending_counts(self, *, workflow_ref: str | None = None,
                      created_from: int | None = None, created_to: int | None = None
                      ) -> dict[tuple[str, str | None], int]:
        params: dict[str, object] = {"ref": workflow_ref}
        clauses = ["workflow_ref = :ref"] if workflow_ref else []
        clauses.extend(_created(created_from, created_to, params))
        where = " AND ".join(clauses) or "1 = 1"
        with self._connector.read() as tx:
            rows = tx.all("SELECT status, ending, COUNT(*) AS n FROM workflow_run_queue"
                          f" WHERE {where} GROUP BY status, ending", params)
        return {(str(row["status"]), None if row["ending"] is None else str(row["ending"])):
                int(row["n"]) for row in rows}

    def workflow_counts(self) -> dict[str, int]:
        with self._connector.read() as tx:
            rows = tx.all("SELECT workflow_ref, COUNT(*) AS n FROM workflow_run_queue"
                          " GROUP BY workflow_ref ORDER BY workflow_ref")
        return {str(row["workflow_ref"]): int(row["n"]) for row in rows}
