"""`resources` and `reconcile_queue` on Postgres: the same rules as on SQLite
(runner/store/sqlite/resources.py and queue.py describe them).

Rows are locked (`FOR UPDATE`) before a guarded change; `claim_next` takes the
first ready key with `FOR UPDATE SKIP LOCKED`, so controller hosts sharing a
database never wait on each other's candidates and one key is reconciled by one
holder at a time. Wake-ups of several keys lock them in key order (no deadlock).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping, Sequence

from runner.store.controller_interface import (
    SPEC_MAX_BYTES,
    STATUS_MAX_BYTES,
    QueueItem,
    QueueOutcome,
    Resource,
)
from runner.store.postgres.db import Conn, PostgresDatabase, Row
from runner.store.postgres.feeds import insert_controller_event
from runner.store.records import (
    LostRace,
    bounded_message,
    canonical_json,
    check_id,
    lease_ms,
    new_claim_token,
)
from runner.store.sqlite.effects import event_payload
from runner.store.sqlite.queue import QUEUE_OUTCOMES, EventSpec, delay_ms
from runner.store.sqlite.resources import encode_object
from runner.store.states import CONTROLLER_ERROR_MAX_BYTES

_WAKE = (
    "INSERT INTO reconcile_queue AS q (controller, resource_key, available_at)"
    " VALUES (%s, %s, %s) ON CONFLICT (controller, resource_key) DO UPDATE SET"
    " available_at = CASE WHEN q.claim_token IS NULL"
    " THEN LEAST(q.available_at, excluded.available_at) ELSE q.available_at END,"
    " dirty = CASE WHEN q.claim_token IS NULL THEN 0 ELSE 1 END"
)


def wake(conn: Conn, controller: str, key: str, available_at: int) -> Row:
    row = conn.execute(_WAKE + " RETURNING *", (controller, key, available_at)).fetchone()
    assert row is not None
    return row


def queue_item_from_row(row: Row) -> QueueItem:
    return QueueItem(
        controller=row["controller"], key=row["resource_key"],
        available_at=row["available_at"], dirty=bool(row["dirty"]),
        claim_token=row["claim_token"], claim_expires_at=row["claim_expires_at"],
        epoch=row["epoch"], runner_id=row["runner_id"],
        consecutive_errors=row["consecutive_errors"], last_error=row["last_error"])


def resource_from_row(row: Row) -> Resource:
    return Resource(
        controller=row["controller"], key=row["resource_key"], uid=row["uid"],
        resource_version=row["resource_version"], generation=row["generation"],
        spec=json.loads(row["spec_json"]), status=json.loads(row["status_json"]),
        deletion_timestamp=row["deletion_timestamp"],
        finalizers=tuple(json.loads(row["finalizers_json"])),
        created_at=row["created_at"], updated_at=row["updated_at"])


def _name(controller: str, key: str) -> str:
    return f"{controller}/{key}"


def _finalizers(values: Iterable[str]) -> str:
    if isinstance(values, str | bytes):
        raise ValueError("finalizers must be a list of names, not one string")
    names = [check_id(value, "finalizer") for value in values]
    return canonical_json(list(dict.fromkeys(names)), what="finalizers")


def _load_resource(conn: Conn, controller: str, key: str) -> Row | None:
    return conn.execute(
        "SELECT * FROM resources WHERE controller = %s AND resource_key = %s FOR UPDATE",
        (controller, key)).fetchone()


def _version_guard(row: Row | None, controller: str, key: str,
                   expected_version: int) -> LostRace | None:
    if row is None:
        return LostRace(_name(controller, key), "not_found")
    if row["resource_version"] != expected_version:
        return LostRace(_name(controller, key), "version_mismatch")
    return None


class PostgresResources:
    """`Resources` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    def apply(self, controller: str, key: str, spec: Mapping[str, object],
              initial_status: Mapping[str, object] | None = None) -> Resource:
        check_id(controller, "controller")
        check_id(key, "resource key")
        name = _name(controller, key)
        spec_json = encode_object(spec, what=f"the spec of {name}", max_bytes=SPEC_MAX_BYTES)
        status_json = encode_object({} if initial_status is None else initial_status,
                                    what=f"the initial status of {name}",
                                    max_bytes=STATUS_MAX_BYTES)
        with self._db.write() as conn:
            now = self._db.now_ms(conn)
            # Concurrent first applies of one key: the loser waits on the insert, then
            # updates the winner's row.
            written = conn.execute(
                "INSERT INTO resources AS r (controller, resource_key, uid, resource_version,"
                " generation, spec_json, status_json, created_at, updated_at)"
                " VALUES (%(controller)s, %(key)s, %(uid)s, 1, 1, %(spec)s, %(status)s,"
                " %(now)s, %(now)s) ON CONFLICT (controller, resource_key) DO UPDATE SET"
                " spec_json = excluded.spec_json,"
                " generation = r.generation + (r.spec_json <> excluded.spec_json)::int,"
                " resource_version = r.resource_version + 1, updated_at = excluded.updated_at"
                " RETURNING *",
                {"controller": controller, "key": key, "uid": secrets.token_hex(16),
                 "spec": spec_json, "status": status_json, "now": now}).fetchone()
            wake(conn, controller, key, now)
        assert written is not None
        return resource_from_row(written)

    def get(self, controller: str, key: str) -> Resource | None:
        rows = self._db.read("SELECT * FROM resources WHERE controller = %s"
                             " AND resource_key = %s", (controller, key))
        return resource_from_row(rows[0]) if rows else None

    def get_by_uid(self, uid: str) -> Resource | None:
        rows = self._db.read("SELECT * FROM resources WHERE uid = %s", (uid,))
        return resource_from_row(rows[0]) if rows else None

    def update_status(self, controller: str, key: str, expected_version: int,
                      status: Mapping[str, object]) -> Resource | LostRace:
        status_json = encode_object(status, what=f"the status of {_name(controller, key)}",
                                    max_bytes=STATUS_MAX_BYTES)
        with self._db.write() as conn:
            row = _load_resource(conn, controller, key)
            lost = _version_guard(row, controller, key, expected_version)
            if lost is not None:
                return lost
            assert row is not None
            if row["status_json"] == status_json:
                return resource_from_row(row)
            return self._write(conn, row, "status_json", status_json)

    def set_finalizers(self, controller: str, key: str, expected_version: int,
                       finalizers: Iterable[str]) -> Resource | LostRace:
        names = _finalizers(finalizers)
        with self._db.write() as conn:
            row = _load_resource(conn, controller, key)
            lost = _version_guard(row, controller, key, expected_version)
            if lost is not None:
                return lost
            assert row is not None
            return self._write(conn, row, "finalizers_json", names)

    def _write(self, conn: Conn, row: Row, column: str, value: str) -> Resource:
        assert column in ("status_json", "finalizers_json")
        written = conn.execute(
            f"UPDATE resources SET {column} = %s, resource_version = resource_version + 1,"
            " updated_at = %s WHERE controller = %s AND resource_key = %s"
            " AND resource_version = %s RETURNING *",
            (value, self._db.now_ms(conn), row["controller"], row["resource_key"],
             row["resource_version"])).fetchone()
        assert written is not None, "row changed under its row lock"
        return resource_from_row(written)

    def request_deletion(self, controller: str, key: str) -> Resource | None:
        with self._db.write() as conn:
            now = self._db.now_ms(conn)
            row = _load_resource(conn, controller, key)
            if row is None:
                return None
            if row["deletion_timestamp"] is None:
                row = conn.execute(
                    "UPDATE resources SET deletion_timestamp = %s,"
                    " resource_version = resource_version + 1, updated_at = %s"
                    " WHERE controller = %s AND resource_key = %s AND resource_version = %s"
                    " AND deletion_timestamp IS NULL RETURNING *",
                    (now, now, controller, key, row["resource_version"])).fetchone()
                assert row is not None, "row changed under its row lock"
            wake(conn, controller, key, now)
        return resource_from_row(row)

    def delete(self, controller: str, key: str, expected_version: int) -> bool | LostRace:
        with self._db.write() as conn:
            row = _load_resource(conn, controller, key)
            if row is None:
                return False
            lost = _version_guard(row, controller, key, expected_version)
            if lost is not None:
                return lost
            if row["deletion_timestamp"] is None:
                return LostRace(_name(controller, key), "not_deleting")
            if json.loads(row["finalizers_json"]):
                return LostRace(_name(controller, key), "finalizers_pending")
            conn.execute("DELETE FROM resources WHERE controller = %s AND resource_key = %s"
                         " AND resource_version = %s", (controller, key, expected_version))
            conn.execute("DELETE FROM reconcile_queue WHERE controller = %s"
                         " AND resource_key = %s", (controller, key))
        return True

    def list(self, controller: str | None = None) -> list[Resource]:
        if controller is None:
            rows = self._db.read("SELECT * FROM resources ORDER BY controller, resource_key")
        else:
            rows = self._db.read("SELECT * FROM resources WHERE controller = %s"
                                 " ORDER BY resource_key", (controller,))
        return [resource_from_row(row) for row in rows]


def _load_item(conn: Conn, controller: str, key: str) -> Row | None:
    return conn.execute(
        "SELECT * FROM reconcile_queue WHERE controller = %s AND resource_key = %s FOR UPDATE",
        (controller, key)).fetchone()


def _holder_guard(row: Row | None, controller: str, key: str,
                  claim_token: str) -> LostRace | None:
    if row is None:
        return LostRace(_name(controller, key), "not_found")
    if row["claim_token"] is None or row["claim_token"] != claim_token:
        return LostRace(_name(controller, key), "token_mismatch")
    return None


class PostgresReconcileQueue:
    """`ReconcileQueue` on Postgres."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    def enqueue(self, controller: str, key: str, *, delay: float = 0.0) -> QueueItem:
        check_id(controller, "controller")
        check_id(key, "resource key")
        wait = delay_ms(delay)
        with self._db.write() as conn:
            row = wake(conn, controller, key, self._db.now_ms(conn) + wait)
        return queue_item_from_row(row)

    def enqueue_many(self, items: Iterable[tuple[str, str]], *, delay: float = 0.0) -> int:
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
            at = self._db.now_ms(conn) + wait
            with conn.cursor() as cursor:
                cursor.executemany(_WAKE, [(c, k, at) for c, k in sorted(distinct)])
        return taken

    def claim_next(self, *, runner_id: str, lease_seconds: float,
                   controllers: Iterable[str] | None = None,
                   exclude: Iterable[tuple[str, str]] = (),
                   claim_event: EventSpec | None = None) -> QueueItem | None:
        check_id(runner_id, "runner_id")
        lease = lease_ms(lease_seconds)
        clauses = ["available_at <= %(now)s",
                   "(claim_token IS NULL OR claim_expires_at <= %(now)s)"]
        params: dict[str, object] = {}
        if controllers is not None:
            names = list(dict.fromkeys(controllers))
            if not names:
                return None
            clauses.append("controller = ANY(%(controllers)s)")
            params["controllers"] = names
        skipped = list(dict.fromkeys(exclude))
        if skipped:
            clauses.append("(controller, resource_key) NOT IN (SELECT * FROM"
                           " unnest(%(skip_c)s::text[], %(skip_k)s::text[]))")
            params["skip_c"] = [c for c, _ in skipped]
            params["skip_k"] = [k for _, k in skipped]
        with self._db.write() as conn:
            now = self._db.now_ms(conn)
            row = conn.execute(
                "SELECT controller, resource_key, epoch FROM reconcile_queue"
                f" WHERE {' AND '.join(clauses)}"
                " ORDER BY available_at, controller, resource_key LIMIT 1"
                " FOR UPDATE SKIP LOCKED", {"now": now, **params}).fetchone()
            if row is None:
                return None
            claimed = conn.execute(
                "UPDATE reconcile_queue SET claim_token = %s, claim_expires_at = %s,"
                " available_at = %s, runner_id = %s, epoch = epoch + 1, dirty = 0"
                " WHERE controller = %s AND resource_key = %s AND epoch = %s RETURNING *",
                (new_claim_token(), now + lease, now + lease, runner_id, row["controller"],
                 row["resource_key"], row["epoch"])).fetchone()
            assert claimed is not None, "row changed under its row lock"
            if claim_event is not None:
                etype, epayload, rid = claim_event
                controller, key = row["controller"], row["resource_key"]
                insert_controller_event(
                    conn, now, controller, key, etype,
                    event_payload(controller, key, etype, epayload, rid), rid)
        return queue_item_from_row(claimed)

    def renew(self, controller: str, key: str, claim_token: str, *,
              lease_seconds: float) -> QueueItem | LostRace:
        lease = lease_ms(lease_seconds)
        with self._db.write() as conn:
            now = self._db.now_ms(conn)
            row = _load_item(conn, controller, key)
            lost = _holder_guard(row, controller, key, claim_token)
            if lost is not None:
                return lost
            assert row is not None
            if row["claim_expires_at"] <= now:
                return LostRace(_name(controller, key), "lease_expired")
            renewed = conn.execute(
                "UPDATE reconcile_queue SET claim_expires_at = %s, available_at = %s"
                " WHERE controller = %s AND resource_key = %s AND claim_token = %s"
                " AND epoch = %s RETURNING *",
                (now + lease, now + lease, controller, key, claim_token,
                 row["epoch"])).fetchone()
        assert renewed is not None
        return queue_item_from_row(renewed)

    def complete(self, controller: str, key: str, claim_token: str, *, outcome: QueueOutcome,
                 delay: float = 0.0, error: str | None = None,
                 events: Sequence[EventSpec] = ()) -> QueueItem | LostRace | None:
        texts = [(t, event_payload(controller, key, t, p, r), r) for t, p, r in events]
        if outcome not in QUEUE_OUTCOMES:
            raise ValueError(f"unknown queue outcome {outcome!r}; use one of {QUEUE_OUTCOMES}")
        wait = delay_ms(delay)
        last_error = None if error is None else bounded_message(error,
                                                                CONTROLLER_ERROR_MAX_BYTES)
        with self._db.write() as conn:
            now = self._db.now_ms(conn)
            row = _load_item(conn, controller, key)
            lost = _holder_guard(row, controller, key, claim_token)
            if lost is not None:
                return lost
            assert row is not None
            for etype, etext, rid in texts:
                insert_controller_event(conn, now, controller, key, etype, etext, rid)
            guard = (controller, key, claim_token, row["epoch"])
            dirty = bool(row["dirty"])
            if outcome == "settled" and not dirty:
                conn.execute("DELETE FROM reconcile_queue WHERE controller = %s"
                             " AND resource_key = %s AND claim_token = %s AND epoch = %s",
                             guard)
                return None
            later = outcome in ("requeue_after", "error") and not dirty
            errors = row["consecutive_errors"] + 1 if outcome == "error" else 0
            updated = conn.execute(
                "UPDATE reconcile_queue SET available_at = %s, dirty = 0, claim_token = NULL,"
                " claim_expires_at = NULL, runner_id = NULL, consecutive_errors = %s,"
                " last_error = %s WHERE controller = %s AND resource_key = %s"
                " AND claim_token = %s AND epoch = %s RETURNING *",
                (now + wait if later else now, errors, last_error, *guard)).fetchone()
        assert updated is not None
        return queue_item_from_row(updated)

    def get(self, controller: str, key: str) -> QueueItem | None:
        rows = self._db.read("SELECT * FROM reconcile_queue WHERE controller = %s"
                             " AND resource_key = %s", (controller, key))
        return queue_item_from_row(rows[0]) if rows else None

    def list(self, controller: str | None = None) -> list[QueueItem]:
        if controller is None:
            rows = self._db.read("SELECT * FROM reconcile_queue"
                                 " ORDER BY available_at, controller, resource_key")
        else:
            rows = self._db.read("SELECT * FROM reconcile_queue WHERE controller = %s"
                                 " ORDER BY available_at, resource_key", (controller,))
        return [queue_item_from_row(row) for row in rows]
