"""`reconcile_queue` on SQLite: the controller runtime's durable keyed queue.

One row per (controller, key), in the manner of client-go's workqueue:

- a wake-up for an unclaimed key keeps the sooner `available_at` (dedupe, and
  "sooner wins" for delayed wake-ups);
- a wake-up for a claimed key sets `dirty`: exactly one more pass after the
  holder completes (a dirty row becomes available at once);
- `claim_next` takes the oldest available row (`available_at <= now`, unclaimed
  or with an expired claim), installs a fresh token, runner id and lease, bumps
  `epoch` and clears `dirty` (the new pass will read current state);
- while a row is claimed its `available_at` is the lease expiry (claim and
  renew set it), i.e. when a claimer may take it again; that keeps held rows
  out of the front of the ready index, so a claim never scans past them;
- `renew` needs the token and an unexpired lease; `complete` needs the token.
  A reclaim replaces the token, so a zombie holder loses every later write.

Every write is one `BEGIN IMMEDIATE` transaction; guarded UPDATEs carry the token
and the epoch read in the same transaction. A lost race returns `LostRace`.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import get_args

from runner.store.controller_interface import QueueItem, QueueOutcome
from runner.store.records import LostRace, bounded_message, check_id, lease_ms, new_claim_token
from runner.store.sqlite.db import SqliteDatabase
from runner.store.sqlite.effects import event_payload, insert_event
from runner.store.states import CONTROLLER_ERROR_MAX_BYTES

#: (event type, payload, reconcile id) of a controller event written with a queue change.
EventSpec = tuple[str, Mapping[str, object], str | None]

QUEUE_OUTCOMES: tuple[QueueOutcome, ...] = get_args(QueueOutcome)

# The upsert every wake-up goes through (enqueue, enqueue_many, apply,
# request_deletion). Unqualified columns in DO UPDATE are the existing row's.
_WAKE = (
    "INSERT INTO reconcile_queue (controller, resource_key, available_at) VALUES (?, ?, ?)"
    " ON CONFLICT (controller, resource_key) DO UPDATE SET"
    " available_at = CASE WHEN claim_token IS NULL"
    " THEN min(available_at, excluded.available_at) ELSE available_at END,"
    " dirty = CASE WHEN claim_token IS NULL THEN 0 ELSE 1 END"
)


def delay_ms(delay: float, what: str = "delay") -> int:
    """A non-negative delay in seconds as whole milliseconds."""
    if not isinstance(delay, int | float) or not math.isfinite(delay) or delay < 0:
        raise ValueError(f"{what} must be a finite number of seconds >= 0, got {delay!r}")
    return round(delay * 1000)


def queue_item_from_row(row: sqlite3.Row) -> QueueItem:
    return QueueItem(
        controller=row["controller"],
        key=row["resource_key"],
        available_at=row["available_at"],
        dirty=bool(row["dirty"]),
        claim_token=row["claim_token"],
        claim_expires_at=row["claim_expires_at"],
        epoch=row["epoch"],
        runner_id=row["runner_id"],
        consecutive_errors=row["consecutive_errors"],
        last_error=row["last_error"],
    )


def wake(conn: sqlite3.Connection, controller: str, key: str, available_at: int) -> sqlite3.Row:
    """Enqueue one key inside the caller's transaction; returns the row."""
    row: sqlite3.Row = conn.execute(
        _WAKE + " RETURNING *", (controller, key, available_at)
    ).fetchone()
    return row


def _load(conn: sqlite3.Connection, controller: str, key: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM reconcile_queue WHERE controller = ? AND resource_key = ?",
        (controller, key),
    ).fetchone()
    return row


def _name(controller: str, key: str) -> str:
    return f"{controller}/{key}"


class SqliteReconcileQueue:
    """`ReconcileQueue` on SQLite."""

    def __init__(self, db: SqliteDatabase, now_ms: Callable[[], int]) -> None:
        self._db = db
        self._now_ms = now_ms

    # --- wake-ups ----------------------------------------------------------------

    def enqueue(self, controller: str, key: str, *, delay: float = 0.0) -> QueueItem:
        check_id(controller, "controller")
        check_id(key, "resource key")
        wait = delay_ms(delay)
        with self._db.write() as conn:
            row = wake(conn, controller, key, self._now_ms() + wait)
        return queue_item_from_row(row)

    def enqueue_many(self, items: Iterable[tuple[str, str]], *, delay: float = 0.0) -> int:
        """Enqueue every (controller, key) in one transaction; returns how many
        wake-ups were taken (duplicates included: they collapse onto one row)."""
        wait = delay_ms(delay)
        taken = 0
        distinct: dict[tuple[str, str], None] = {}
        for controller, key in items:
            taken += 1
            if (controller, key) not in distinct:
                check_id(controller, "controller")
                check_id(key, "resource key")
                distinct[(controller, key)] = None
        if not distinct:
            return 0
        with self._db.write() as conn:
            at = self._now_ms() + wait
            conn.executemany(_WAKE, ((c, k, at) for c, k in distinct))
        return taken

    # --- claims --------------------------------------------------------------------

    def claim_next(
        self,
        *,
        runner_id: str,
        lease_seconds: float,
        controllers: Iterable[str] | None = None,
        exclude: Iterable[tuple[str, str]] = (),
        claim_event: EventSpec | None = None,
    ) -> QueueItem | None:
        check_id(runner_id, "runner_id")
        lease = lease_ms(lease_seconds)
        clauses = ["available_at <= ?", "(claim_token IS NULL OR claim_expires_at <= ?)"]
        params: list[object] = []
        if controllers is not None:
            names = list(dict.fromkeys(controllers))
            if not names:
                return None
            clauses.append(f"controller IN ({', '.join('?' for _ in names)})")
            params.extend(names)
        skipped = list(dict.fromkeys(exclude))
        if skipped:
            pairs = ", ".join("(?, ?)" for _ in skipped)
            clauses.append(f"(controller, resource_key) NOT IN (VALUES {pairs})")
            params.extend(part for pair in skipped for part in pair)
        with self._db.write() as conn:
            now = self._now_ms()
            row = conn.execute(
                "SELECT controller, resource_key, epoch FROM reconcile_queue"
                f" WHERE {' AND '.join(clauses)}"
                " ORDER BY available_at, controller, resource_key LIMIT 1",
                (now, now, *params),
            ).fetchone()
            if row is None:
                return None
            claimed = conn.execute(
                "UPDATE reconcile_queue SET claim_token = ?, claim_expires_at = ?,"
                " available_at = ?, runner_id = ?, epoch = epoch + 1, dirty = 0"
                " WHERE controller = ? AND resource_key = ? AND epoch = ? RETURNING *",
                (new_claim_token(), now + lease, now + lease, runner_id, *row),
            ).fetchone()
            assert claimed is not None, "row changed inside an immediate transaction"
            if claim_event is not None:
                # Recorded in the claim's own transaction: one commit, not two.
                etype, epayload, rid = claim_event
                insert_event(conn, now, row[0], row[1], etype,
                             event_payload(row[0], row[1], etype, epayload, rid), rid)
        return queue_item_from_row(claimed)

    def renew(
        self, controller: str, key: str, claim_token: str, *, lease_seconds: float
    ) -> QueueItem | LostRace:
        lease = lease_ms(lease_seconds)
        with self._db.write() as conn:
            now = self._now_ms()
            row = _load(conn, controller, key)
            lost = _holder_guard(row, controller, key, claim_token)
            if lost is not None:
                return lost
            assert row is not None
            if row["claim_expires_at"] <= now:
                return LostRace(_name(controller, key), "lease_expired")
            renewed = conn.execute(
                "UPDATE reconcile_queue SET claim_expires_at = ?, available_at = ?"
                " WHERE controller = ? AND resource_key = ? AND claim_token = ? AND epoch = ?"
                " RETURNING *",
                (now + lease, now + lease, controller, key, claim_token, row["epoch"]),
            ).fetchone()
        return queue_item_from_row(renewed)

    def complete(
        self,
        controller: str,
        key: str,
        claim_token: str,
        *,
        outcome: QueueOutcome,
        delay: float = 0.0,
        error: str | None = None,
        events: Sequence[EventSpec] = (),
    ) -> QueueItem | LostRace | None:
        """End a claimed pass (see the interface). The token must still be installed;
        a lease that ran out is accepted as long as nobody reclaimed the row. `events`
        are recorded in the same transaction, only if the pass still holds the claim."""
        texts = [(t, event_payload(controller, key, t, p, r), r) for t, p, r in events]
        if outcome not in QUEUE_OUTCOMES:
            raise ValueError(f"unknown queue outcome {outcome!r}; use one of {QUEUE_OUTCOMES}")
        wait = delay_ms(delay)
        last_error = (
            None if error is None else bounded_message(error, CONTROLLER_ERROR_MAX_BYTES)
        )
        with self._db.write() as conn:
            now = self._now_ms()
            row = _load(conn, controller, key)
            lost = _holder_guard(row, controller, key, claim_token)
            if lost is not None:
                return lost
            assert row is not None
            for etype, etext, rid in texts:
                insert_event(conn, now, controller, key, etype, etext, rid)
            guard = (controller, key, claim_token, row["epoch"])
            dirty = bool(row["dirty"])
            if outcome == "settled" and not dirty:
                conn.execute(
                    "DELETE FROM reconcile_queue WHERE controller = ? AND resource_key = ?"
                    " AND claim_token = ? AND epoch = ?",
                    guard,
                )
                return None
            later = outcome in ("requeue_after", "error") and not dirty
            errors = row["consecutive_errors"] + 1 if outcome == "error" else 0
            updated = conn.execute(
                "UPDATE reconcile_queue SET available_at = ?, dirty = 0, claim_token = NULL,"
                " claim_expires_at = NULL, runner_id = NULL, consecutive_errors = ?,"
                " last_error = ?"
                " WHERE controller = ? AND resource_key = ? AND claim_token = ? AND epoch = ?"
                " RETURNING *",
                (now + wait if later else now, errors, last_error, *guard),
            ).fetchone()
        return queue_item_from_row(updated)

    # --- reads -----------------------------------------------------------------------

    def get(self, controller: str, key: str) -> QueueItem | None:
        rows = self._db.read(
            "SELECT * FROM reconcile_queue WHERE controller = ? AND resource_key = ?",
            (controller, key),
        )
        return queue_item_from_row(rows[0]) if rows else None

    def list(self, controller: str | None = None) -> list[QueueItem]:
        """Every row, soonest first (claimed rows included)."""
        if controller is None:
            rows = self._db.read(
                "SELECT * FROM reconcile_queue ORDER BY available_at, controller, resource_key"
            )
        else:
            rows = self._db.read(
                "SELECT * FROM reconcile_queue WHERE controller = ?"
                " ORDER BY available_at, resource_key",
                (controller,),
            )
        return [queue_item_from_row(row) for row in rows]


def _holder_guard(
    row: sqlite3.Row | None, controller: str, key: str, claim_token: str
) -> LostRace | None:
    if row is None:
        return LostRace(_name(controller, key), "not_found")
    if row["claim_token"] is None or row["claim_token"] != claim_token:
        return LostRace(_name(controller, key), "token_mismatch")
    return None
