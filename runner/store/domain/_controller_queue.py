"""`reconcile_queue`, backend-neutral: the controller runtime's durable keyed queue.

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

Every write is one transaction; the row is read (and on Postgres locked) before a
guarded UPDATE that carries the token and the epoch it read. Candidates for a
claim skip rows other hosts have locked (Postgres). A lost race returns `LostRace`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import get_args

from runner.store._connector import Connector, Row, in_params
from runner.store._connector import Transaction as Tx
from runner.store._controller_interface import EventSpec, QueueItem, QueueOutcome
from runner.store._records import LostRace, bounded_message, check_id, lease_ms, new_claim_token
from runner.store._states import CONTROLLER_ERROR_MAX_BYTES
from runner.store.domain._controller_events import (
    event_params,
    event_payload,
    insert_events,
    read_all,
)

QUEUE_OUTCOMES: tuple[QueueOutcome, ...] = get_args(QueueOutcome)

# The upsert every wake-up goes through (enqueue, enqueue_many, apply,
# request_deletion, a child's ending).
WAKE = (
    "INSERT INTO reconcile_queue AS q (controller, resource_key, available_at)"
    " VALUES (:controller, :key, :at) ON CONFLICT (controller, resource_key) DO UPDATE SET"
    " available_at = CASE WHEN q.claim_token IS NULL AND excluded.available_at < q.available_at"
    " THEN excluded.available_at ELSE q.available_at END,"
    " dirty = CASE WHEN q.claim_token IS NULL THEN 0 ELSE 1 END"
)
_LOAD = "SELECT * FROM reconcile_queue WHERE controller = :controller AND resource_key = :key"
_GUARD = ("controller = :controller AND resource_key = :key AND claim_token = :token"
          " AND epoch = :epoch")


def delay_ms(delay: float, what: str = "delay") -> int:
    """A non-negative delay in seconds as whole milliseconds."""
    if not isinstance(delay, int | float) or not math.isfinite(delay) or delay < 0:
        raise ValueError(f"{what} must be a finite number of seconds >= 0, got {delay!r}")
    return round(delay * 1000)


def queue_item_from_row(row: Row) -> QueueItem:
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


def wake(tx: Tx, controller: str, key: str, available_at: int) -> Row:
    """Enqueue one key inside the caller's transaction; returns the row."""
    row = tx.one(WAKE + " RETURNING *", {"controller": controller, "key": key,
                                         "at": available_at})
    assert row is not None
    return row


def keys_clause(prefix: str, keys: Iterable[tuple[str, str]]) -> tuple[str, dict[str, object]]:
    """`((controller = :p0c AND resource_key = :p0k) OR ...)` and its parameters: an OR
    of primary-key lookups (SQLite scans the table for a row-value IN (VALUES ...))."""
    terms: list[str] = []
    params: dict[str, object] = {}
    for i, (controller, key) in enumerate(keys):
        terms.append(f"(controller = :{prefix}{i}c AND resource_key = :{prefix}{i}k)")
        params[f"{prefix}{i}c"], params[f"{prefix}{i}k"] = controller, key
    return f"({' OR '.join(terms) or '1 = 0'})", params


def name_of(controller: str, key: str) -> str:
    return f"{controller}/{key}"


def load_item(tx: Tx, controller: str, key: str) -> Row | None:
    return tx.one(_LOAD + tx.dialect.lock, {"controller": controller, "key": key})


def holder_guard(row: Row | None, controller: str, key: str,
                 claim_token: str) -> LostRace | None:
    if row is None:
        return LostRace(name_of(controller, key), "not_found")
    if row["claim_token"] is None or row["claim_token"] != claim_token:
        return LostRace(name_of(controller, key), "token_mismatch")
    return None


def checked_outcome(outcome: QueueOutcome) -> QueueOutcome:
    if outcome not in QUEUE_OUTCOMES:
        raise ValueError(f"unknown queue outcome {outcome!r}; use one of {QUEUE_OUTCOMES}")
    return outcome


def bounded_error(error: str | None) -> str | None:
    return None if error is None else bounded_message(error, CONTROLLER_ERROR_MAX_BYTES)


def end_claim(tx: Tx, row: Row, claim_token: str, outcome: QueueOutcome, wait: int,
              last_error: str | None) -> Row | None:
    """End the claim `row` (read under the holder guard) as `outcome`: the row
    deleted (None) or released; a dirty row is available at once."""
    guard = {"controller": row["controller"], "key": row["resource_key"],
             "token": claim_token, "epoch": row["epoch"]}
    dirty = bool(row["dirty"])
    if outcome == "settled" and not dirty:
        tx.run(f"DELETE FROM reconcile_queue WHERE {_GUARD}", guard)
        return None
    later = outcome in ("requeue_after", "error") and not dirty
    now = tx.now_ms()
    updated = tx.one(
        "UPDATE reconcile_queue SET available_at = :at, dirty = 0, claim_token = NULL,"
        " claim_expires_at = NULL, runner_id = NULL, consecutive_errors = :errors,"
        f" last_error = :error WHERE {_GUARD} RETURNING *",
        {**guard, "at": now + wait if later else now,
         "errors": row["consecutive_errors"] + 1 if outcome == "error" else 0,
         "error": last_error})
    assert updated is not None, "row changed under its lock"
    return updated


def _candidates(controllers: Iterable[str] | None,
                exclude: Iterable[tuple[str, str]]) -> tuple[list[str], dict[str, object]] | None:
    """The claim's WHERE clauses and parameters; None when no controller may be claimed."""
    clauses = ["available_at <= :now", "(claim_token IS NULL OR claim_expires_at <= :now)"]
    params: dict[str, object] = {}
    if controllers is not None:
        names = list(dict.fromkeys(controllers))
        if not names:
            return None
        marks, more = in_params("c", names)
        clauses.append(f"controller IN {marks}")
        params.update(more)
    skipped = list(dict.fromkeys(exclude))
    if skipped:
        pairs = ", ".join(f"(:xc{i}, :xk{i})" for i in range(len(skipped)))
        clauses.append(f"(controller, resource_key) NOT IN (VALUES {pairs})")
        for i, (c, k) in enumerate(skipped):
            params[f"xc{i}"], params[f"xk{i}"] = c, k
    return clauses, params


def claim_rows(tx: Tx, *, runner_id: str, lease: int, limit: int,
               controllers: Iterable[str] | None, exclude: Iterable[tuple[str, str]]
               ) -> list[Row]:
    """Claim up to `limit` of the oldest available rows inside `tx`."""
    where = _candidates(controllers, exclude)
    if where is None:
        return []
    clauses, params = where
    now = tx.now_ms()
    found = tx.all(
        "SELECT controller, resource_key, epoch FROM reconcile_queue"
        f" WHERE {' AND '.join(clauses)}"
        " ORDER BY available_at, controller, resource_key LIMIT :limit" + tx.dialect.skip_locked,
        {"now": now, "limit": limit, **params})
    if not found:
        return []
    # One UPDATE for the whole batch, with one fresh token: a token only ever guards
    # together with its (controller, key) and epoch, so keys claimed together may share
    # it, and a reclaim of any of them installs another.
    which, keys = keys_clause("u", ((r["controller"], r["resource_key"]) for r in found))
    got = {(r["controller"], r["resource_key"]): r for r in tx.all(
        "UPDATE reconcile_queue SET claim_token = :token, claim_expires_at = :until,"
        " available_at = :until, runner_id = :runner, epoch = epoch + 1, dirty = 0"
        f" WHERE {which} RETURNING *",
        {"token": new_claim_token(), "until": now + lease, "runner": runner_id, **keys})}
    claimed = [got[(row["controller"], row["resource_key"])] for row in found]
    assert all(c["epoch"] == row["epoch"] + 1 for c, row in zip(claimed, found, strict=True)), \
        "row changed under its lock"
    return claimed


def event_rows(tx: Tx, controller: str, key: str,
               events: Sequence[tuple[str, str, str | None]]) -> list[dict[str, object]]:
    now = tx.now_ms()
    return [event_params(now, controller, key, t, text, rid) for t, text, rid in events]


def event_texts(controller: str, key: str, events: Sequence[EventSpec]
                ) -> list[tuple[str, str, str | None]]:
    """Each event's checked, bounded payload (before any transaction opens)."""
    return [(t, event_payload(controller, key, t, p, r), r) for t, p, r in events]


class KeyedQueue:
    """`ReconcileQueue` on any backend."""

    def __init__(self, connector: Connector) -> None:
        self._c = connector

    # --- wake-ups ----------------------------------------------------------------

    def enqueue(self, controller: str, key: str, *, delay: float = 0.0) -> QueueItem:
        check_id(controller, "controller")
        check_id(key, "resource key")
        wait = delay_ms(delay)
        with self._c.write() as tx:
            row = wake(tx, controller, key, tx.now_ms() + wait)
        return queue_item_from_row(row)

    def enqueue_many(self, items: Iterable[tuple[str, str]], *, delay: float = 0.0) -> int:
        """Enqueue every (controller, key) in one transaction; returns how many
        wake-ups were taken (duplicates included: they collapse onto one row).
        Keys are written in key order, so concurrent batches never deadlock."""
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
        with self._c.write() as tx:
            at = tx.now_ms() + wait
            tx.many(WAKE, [{"controller": c, "key": k, "at": at} for c, k in sorted(distinct)])
        return taken

    # --- claims --------------------------------------------------------------------

    def claim_next(self, *, runner_id: str, lease_seconds: float,
                   controllers: Iterable[str] | None = None,
                   exclude: Iterable[tuple[str, str]] = (),
                   claim_event: EventSpec | None = None) -> QueueItem | None:
        check_id(runner_id, "runner_id")
        lease = lease_ms(lease_seconds)
        with self._c.write() as tx:
            rows = claim_rows(tx, runner_id=runner_id, lease=lease, limit=1,
                              controllers=controllers, exclude=exclude)
            if not rows:
                return None
            row = rows[0]
            if claim_event is not None:
                # Recorded in the claim's own transaction: one commit, not two.
                c, k = row["controller"], row["resource_key"]
                insert_events(tx, event_rows(tx, c, k, event_texts(c, k, [claim_event])))
        return queue_item_from_row(row)

    def renew(self, controller: str, key: str, claim_token: str, *,
              lease_seconds: float) -> QueueItem | LostRace:
        lease = lease_ms(lease_seconds)
        with self._c.write() as tx:
            now = tx.now_ms()
            row = load_item(tx, controller, key)
            lost = holder_guard(row, controller, key, claim_token)
            if lost is not None:
                return lost
            assert row is not None
            if row["claim_expires_at"] <= now:
                return LostRace(name_of(controller, key), "lease_expired")
            renewed = tx.one(
                f"UPDATE reconcile_queue SET claim_expires_at = :until, available_at = :until"
                f" WHERE {_GUARD} RETURNING *",
                {"until": now + lease, "controller": controller, "key": key,
                 "token": claim_token, "epoch": row["epoch"]})
        assert renewed is not None
        return queue_item_from_row(renewed)

    def complete(self, controller: str, key: str, claim_token: str, *,
                 outcome: QueueOutcome, delay: float = 0.0, error: str | None = None,
                 events: Sequence[EventSpec] = ()) -> QueueItem | LostRace | None:
        """End a claimed pass (see the interface). The token must still be installed;
        a lease that ran out is accepted as long as nobody reclaimed the row. `events`
        are recorded in the same transaction, only if the pass still holds the claim."""
        texts = event_texts(controller, key, events)
        checked_outcome(outcome)
        wait = delay_ms(delay)
        last_error = bounded_error(error)
        with self._c.write() as tx:
            row = load_item(tx, controller, key)
            lost = holder_guard(row, controller, key, claim_token)
            if lost is not None:
                return lost
            assert row is not None
            insert_events(tx, event_rows(tx, controller, key, texts))
            left = end_claim(tx, row, claim_token, outcome, wait, last_error)
        return None if left is None else queue_item_from_row(left)

    # --- reads -----------------------------------------------------------------------

    def get(self, controller: str, key: str) -> QueueItem | None:
        rows = read_all(self._c, _LOAD, {"controller": controller, "key": key})
        return queue_item_from_row(rows[0]) if rows else None

    def list(self, controller: str | None = None) -> list[QueueItem]:
        """Every row, soonest first (claimed rows included)."""
        if controller is None:
            rows = read_all(self._c,
                "SELECT * FROM reconcile_queue ORDER BY available_at, controller, resource_key")
        else:
            rows = read_all(self._c,
                "SELECT * FROM reconcile_queue WHERE controller = :controller"
                " ORDER BY available_at, resource_key", {"controller": controller})
        return [queue_item_from_row(row) for row in rows]
