"""`resources`, backend-neutral: desired state (`spec`) and observed state (`status`).

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
from collections.abc import Iterable, Mapping

from runner.store._connector import Connector, Row
from runner.store._connector import Transaction as Tx
from runner.store._controller_interface import SPEC_MAX_BYTES, STATUS_MAX_BYTES, Resource
from runner.store._records import LostRace, canonical_json, check_id
from runner.store.domain._controller_events import read_all
from runner.store.domain._controller_queue import name_of, wake

_LOAD = "SELECT * FROM resources WHERE controller = :controller AND resource_key = :key"
# Concurrent first applies of one key: on Postgres the loser waits on the insert, then
# updates the winner's row (uid and status are the first apply's).
_APPLY = (
    "INSERT INTO resources AS r (controller, resource_key, uid, resource_version,"
    " generation, spec_json, status_json, created_at, updated_at)"
    " VALUES (:controller, :key, :uid, 1, 1, :spec, :status, :now, :now)"
    " ON CONFLICT (controller, resource_key) DO UPDATE SET spec_json = excluded.spec_json,"
    " generation = r.generation + CASE WHEN r.spec_json <> excluded.spec_json THEN 1 ELSE 0 END,"
    " resource_version = r.resource_version + 1, updated_at = excluded.updated_at"
    " RETURNING *"
)
#: A CAS write of one non-spec column (generation untouched).
_CAS = {
    column: f"UPDATE resources SET {column} = :value, resource_version = resource_version + 1,"
            " updated_at = :now WHERE controller = :controller AND resource_key = :key"
            " AND resource_version = :version RETURNING *"
    for column in ("status_json", "finalizers_json")
}


_SWAP = ("UPDATE resources SET status_json = :value, resource_version = resource_version + 1,"
         " updated_at = :now WHERE controller = :controller AND resource_key = :key"
         " AND resource_version = :version AND status_json <> :value")


def resource_from_row(row: Row) -> Resource:
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


def encode_status(controller: str, key: str, status: Mapping[str, object]) -> str:
    return encode_object(status, what=f"the status of {name_of(controller, key)}",
                         max_bytes=STATUS_MAX_BYTES)


def _finalizers(values: Iterable[str]) -> str:
    if isinstance(values, str | bytes):
        raise ValueError("finalizers must be a list of names, not one string")
    names = [check_id(value, "finalizer") for value in values]
    return canonical_json(list(dict.fromkeys(names)), what="finalizers")


def load_resource(tx: Tx, controller: str, key: str) -> Row | None:
    return tx.one(_LOAD + tx.dialect.lock, {"controller": controller, "key": key})


def version_guard(row: Row | None, controller: str, key: str,
                  expected_version: int) -> LostRace | None:
    if row is None:
        return LostRace(name_of(controller, key), "not_found")
    if row["resource_version"] != expected_version:
        return LostRace(name_of(controller, key), "version_mismatch")
    return None


def cas_write(tx: Tx, row: Row, column: str, value: str) -> Row:
    """One CAS write of `column` over `row`, read (and locked) in this transaction."""
    written = tx.one(_CAS[column], {
        "value": value, "now": tx.now_ms(), "controller": row["controller"],
        "key": row["resource_key"], "version": row["resource_version"]})
    assert written is not None, "row changed under its lock"
    return written


def write_status(tx: Tx, controller: str, key: str, expected_version: int,
                 status_json: str) -> Row | LostRace:
    """The status CAS inside `tx`: the row as it now is, or the lost race."""
    row = load_resource(tx, controller, key)
    lost = version_guard(row, controller, key, expected_version)
    if lost is not None:
        return lost
    assert row is not None
    if row["status_json"] == status_json:
        return row
    return cas_write(tx, row, "status_json", status_json)


def swap_status(tx: Tx, controller: str, key: str, expected_version: int,
                status_json: str) -> bool | LostRace:
    """The status CAS of a pass, in one guarded UPDATE when it succeeds (the common
    case): True when written or already equal, else the lost race."""
    params = {"value": status_json, "now": tx.now_ms(), "controller": controller,
              "key": key, "version": expected_version}
    if tx.run(_SWAP, params):
        return True
    row = tx.one("SELECT resource_version, status_json FROM resources"
                 " WHERE controller = :controller AND resource_key = :key", params)
    lost = version_guard(row, controller, key, expected_version)
    return True if lost is None else lost


class ResourceTable:
    """`Resources` on any backend."""

    def __init__(self, connector: Connector) -> None:
        self._c = connector

    def apply(self, controller: str, key: str, spec: Mapping[str, object],
              initial_status: Mapping[str, object] | None = None) -> Resource:
        check_id(controller, "controller")
        check_id(key, "resource key")
        name = name_of(controller, key)
        spec_json = encode_object(spec, what=f"the spec of {name}", max_bytes=SPEC_MAX_BYTES)
        status_json = encode_object({} if initial_status is None else initial_status,
                                    what=f"the initial status of {name}",
                                    max_bytes=STATUS_MAX_BYTES)
        with self._c.write() as tx:
            now = tx.now_ms()
            written = tx.one(_APPLY, {"controller": controller, "key": key,
                                      "uid": secrets.token_hex(16), "spec": spec_json,
                                      "status": status_json, "now": now})
            wake(tx, controller, key, now)
        assert written is not None
        return resource_from_row(written)

    def get(self, controller: str, key: str) -> Resource | None:
        rows = read_all(self._c, _LOAD, {"controller": controller, "key": key})
        return resource_from_row(rows[0]) if rows else None

    def get_by_uid(self, uid: str) -> Resource | None:
        rows = read_all(self._c, "SELECT * FROM resources WHERE uid = :uid", {"uid": uid})
        return resource_from_row(rows[0]) if rows else None

    def update_status(self, controller: str, key: str, expected_version: int,
                      status: Mapping[str, object]) -> Resource | LostRace:
        status_json = encode_status(controller, key, status)
        with self._c.write() as tx:
            written = write_status(tx, controller, key, expected_version, status_json)
        return written if isinstance(written, LostRace) else resource_from_row(written)

    def set_finalizers(self, controller: str, key: str, expected_version: int,
                       finalizers: Iterable[str]) -> Resource | LostRace:
        names = _finalizers(finalizers)
        with self._c.write() as tx:
            row = load_resource(tx, controller, key)
            lost = version_guard(row, controller, key, expected_version)
            if lost is not None:
                return lost
            assert row is not None
            return resource_from_row(cas_write(tx, row, "finalizers_json", names))

    def request_deletion(self, controller: str, key: str) -> Resource | None:
        with self._c.write() as tx:
            now = tx.now_ms()
            row = load_resource(tx, controller, key)
            if row is None:
                return None
            if row["deletion_timestamp"] is None:
                row = tx.one(
                    "UPDATE resources SET deletion_timestamp = :now,"
                    " resource_version = resource_version + 1, updated_at = :now"
                    " WHERE controller = :controller AND resource_key = :key"
                    " AND resource_version = :version AND deletion_timestamp IS NULL"
                    " RETURNING *",
                    {"now": now, "controller": controller, "key": key,
                     "version": row["resource_version"]})
                assert row is not None, "row changed under its lock"
            wake(tx, controller, key, now)
        return resource_from_row(row)

    def delete(self, controller: str, key: str, expected_version: int) -> bool | LostRace:
        """True when removed, False when there was no such resource."""
        params = {"controller": controller, "key": key}
        with self._c.write() as tx:
            row = load_resource(tx, controller, key)
            if row is None:
                return False
            lost = version_guard(row, controller, key, expected_version)
            if lost is not None:
                return lost
            if row["deletion_timestamp"] is None:
                return LostRace(name_of(controller, key), "not_deleting")
            if json.loads(row["finalizers_json"]):
                return LostRace(name_of(controller, key), "finalizers_pending")
            tx.run("DELETE FROM resources WHERE controller = :controller"
                   " AND resource_key = :key AND resource_version = :version",
                   {**params, "version": expected_version})
            tx.run("DELETE FROM reconcile_queue WHERE controller = :controller"
                   " AND resource_key = :key", params)
        return True

    def list(self, controller: str | None = None) -> list[Resource]:
        if controller is None:
            rows = read_all(self._c, "SELECT * FROM resources ORDER BY controller, resource_key")
        else:
            rows = read_all(self._c, "SELECT * FROM resources WHERE controller = :controller"
                                " ORDER BY resource_key", {"controller": controller})
        return [resource_from_row(row) for row in rows]
