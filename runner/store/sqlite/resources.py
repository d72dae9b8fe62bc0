"""`resources` on SQLite: desired state (`spec`) and observed state (`status`).

Rules (DESIGN §7, Kubernetes API conventions):

- `resource_version` is the compare-and-swap token: every write bumps it, and
  every conditional write names the version it read (`version_mismatch` if it
  moved). A status write whose status is byte-identical (canonical JSON) to the
  stored one is skipped and returns the resource unchanged.
- `generation` counts spec changes only: `apply` bumps it when the canonical
  spec differs; status and finalizer writes never do.
- `apply` and `request_deletion` enqueue the key in the same transaction.
- `deletion_timestamp` is set once; `delete` needs it and an empty finalizer
  list, and removes the key's queue row with the resource (a holder's later
  `complete` then loses with `not_found`).

Queue rows do not reference resources (no foreign key): a wake-up for a key
with no resource is kept, and the pass that claims it finds nothing to do.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Callable, Iterable, Mapping

from runner.store.controller_interface import SPEC_MAX_BYTES, STATUS_MAX_BYTES, Resource
from runner.store.records import LostRace, canonical_json, check_id
from runner.store.sqlite.db import SqliteDatabase
from runner.store.sqlite.queue import wake


def resource_from_row(row: sqlite3.Row) -> Resource:
    return Resource(
        controller=row["controller"],
        key=row["resource_key"],
        uid=row["uid"],
        resource_version=row["resource_version"],
        generation=row["generation"],
        spec=json.loads(row["spec_json"]),
        status=json.loads(row["status_json"]),
        deletion_timestamp=row["deletion_timestamp"],
        finalizers=tuple(json.loads(row["finalizers_json"])),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def encode_object(value: object, *, what: str, max_bytes: int) -> str:
    """Canonical JSON of a mapping, refused with a clear message over `max_bytes`."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a JSON object, got {type(value).__name__}")
    text = canonical_json(value, what=what, max_bytes=1 << 62)
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise ValueError(
            f"{what} is {size} bytes as canonical JSON; the limit is {max_bytes} bytes "
            f"({max_bytes // 1024} KiB)"
        )
    return text


def _finalizers(values: Iterable[str]) -> str:
    if isinstance(values, str | bytes):
        raise ValueError("finalizers must be a list of names, not one string")
    names = [check_id(value, "finalizer") for value in values]
    return canonical_json(list(dict.fromkeys(names)), what="finalizers")


def _load(conn: sqlite3.Connection, controller: str, key: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM resources WHERE controller = ? AND resource_key = ?", (controller, key)
    ).fetchone()
    return row


def _name(controller: str, key: str) -> str:
    return f"{controller}/{key}"


def _checked(controller: str, key: str) -> None:
    check_id(controller, "controller")
    check_id(key, "resource key")


class SqliteResources:
    """`Resources` on SQLite."""

    def __init__(self, db: SqliteDatabase, now_ms: Callable[[], int]) -> None:
        self._db = db
        self._now_ms = now_ms

    def apply(
        self,
        controller: str,
        key: str,
        spec: Mapping[str, object],
        initial_status: Mapping[str, object] | None = None,
    ) -> Resource:
        _checked(controller, key)
        name = _name(controller, key)
        spec_json = encode_object(spec, what=f"the spec of {name}", max_bytes=SPEC_MAX_BYTES)
        status_json = encode_object(
            {} if initial_status is None else initial_status,
            what=f"the initial status of {name}",
            max_bytes=STATUS_MAX_BYTES,
        )
        with self._db.write() as conn:
            now = self._now_ms()
            row = _load(conn, controller, key)
            if row is None:
                written = conn.execute(
                    "INSERT INTO resources (controller, resource_key, uid, resource_version,"
                    " generation, spec_json, status_json, created_at, updated_at)"
                    " VALUES (?, ?, ?, 1, 1, ?, ?, ?, ?) RETURNING *",
                    (controller, key, secrets.token_hex(16), spec_json, status_json, now, now),
                ).fetchone()
            else:
                written = conn.execute(
                    "UPDATE resources SET spec_json = :spec,"
                    " generation = generation + (spec_json <> :spec),"
                    " resource_version = resource_version + 1, updated_at = :now"
                    " WHERE controller = :controller AND resource_key = :key"
                    " AND resource_version = :version RETURNING *",
                    {
                        "spec": spec_json,
                        "now": now,
                        "controller": controller,
                        "key": key,
                        "version": row["resource_version"],
                    },
                ).fetchone()
            wake(conn, controller, key, now)
        assert written is not None, "row changed inside an immediate transaction"
        return resource_from_row(written)

    def get(self, controller: str, key: str) -> Resource | None:
        rows = self._db.read(
            "SELECT * FROM resources WHERE controller = ? AND resource_key = ?", (controller, key)
        )
        return resource_from_row(rows[0]) if rows else None

    def get_by_uid(self, uid: str) -> Resource | None:
        rows = self._db.read("SELECT * FROM resources WHERE uid = ?", (uid,))
        return resource_from_row(rows[0]) if rows else None

    def update_status(
        self,
        controller: str,
        key: str,
        expected_version: int,
        status: Mapping[str, object],
    ) -> Resource | LostRace:
        status_json = encode_object(
            status, what=f"the status of {_name(controller, key)}", max_bytes=STATUS_MAX_BYTES
        )
        with self._db.write() as conn:
            row = _load(conn, controller, key)
            lost = _version_guard(row, controller, key, expected_version)
            if lost is not None:
                return lost
            assert row is not None
            if row["status_json"] == status_json:
                return resource_from_row(row)
            return self._write(conn, row, "status_json = ?", status_json)

    def set_finalizers(
        self, controller: str, key: str, expected_version: int, finalizers: Iterable[str]
    ) -> Resource | LostRace:
        names = _finalizers(finalizers)
        with self._db.write() as conn:
            row = _load(conn, controller, key)
            lost = _version_guard(row, controller, key, expected_version)
            if lost is not None:
                return lost
            assert row is not None
            return self._write(conn, row, "finalizers_json = ?", names)

    def _write(
        self, conn: sqlite3.Connection, row: sqlite3.Row, assignment: str, value: str
    ) -> Resource:
        """One CAS write of a non-spec column (generation untouched)."""
        written = conn.execute(
            f"UPDATE resources SET {assignment}, resource_version = resource_version + 1,"
            " updated_at = ? WHERE controller = ? AND resource_key = ? AND resource_version = ?"
            " RETURNING *",
            (value, self._now_ms(), row["controller"], row["resource_key"],
             row["resource_version"]),
        ).fetchone()
        assert written is not None, "row changed inside an immediate transaction"
        return resource_from_row(written)

    def request_deletion(self, controller: str, key: str) -> Resource | None:
        with self._db.write() as conn:
            now = self._now_ms()
            row = _load(conn, controller, key)
            if row is None:
                return None
            if row["deletion_timestamp"] is None:
                row = conn.execute(
                    "UPDATE resources SET deletion_timestamp = ?,"
                    " resource_version = resource_version + 1, updated_at = ?"
                    " WHERE controller = ? AND resource_key = ? AND resource_version = ?"
                    " AND deletion_timestamp IS NULL RETURNING *",
                    (now, now, controller, key, row["resource_version"]),
                ).fetchone()
                assert row is not None, "row changed inside an immediate transaction"
            wake(conn, controller, key, now)
        return resource_from_row(row)

    def delete(self, controller: str, key: str, expected_version: int) -> bool | LostRace:
        """True when removed, False when there was no such resource."""
        with self._db.write() as conn:
            row = _load(conn, controller, key)
            if row is None:
                return False
            lost = _version_guard(row, controller, key, expected_version)
            if lost is not None:
                return lost
            if row["deletion_timestamp"] is None:
                return LostRace(_name(controller, key), "not_deleting")
            if json.loads(row["finalizers_json"]):
                return LostRace(_name(controller, key), "finalizers_pending")
            conn.execute(
                "DELETE FROM resources WHERE controller = ? AND resource_key = ?"
                " AND resource_version = ?",
                (controller, key, expected_version),
            )
            conn.execute(
                "DELETE FROM reconcile_queue WHERE controller = ? AND resource_key = ?",
                (controller, key),
            )
        return True

    def list(self, controller: str | None = None) -> list[Resource]:
        if controller is None:
            rows = self._db.read("SELECT * FROM resources ORDER BY controller, resource_key")
        else:
            rows = self._db.read(
                "SELECT * FROM resources WHERE controller = ? ORDER BY resource_key",
                (controller,),
            )
        return [resource_from_row(row) for row in rows]


def _version_guard(
    row: sqlite3.Row | None, controller: str, key: str, expected_version: int
) -> LostRace | None:
    if row is None:
        return LostRace(_name(controller, key), "not_found")
    if row["resource_version"] != expected_version:
        return LostRace(_name(controller, key), "version_mismatch")
    return None
