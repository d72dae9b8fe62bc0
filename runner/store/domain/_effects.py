"""`effects`, backend-neutral: an external mutation recorded *before* the provider
is called.

    reserve  -> pending (or the existing record; another fingerprint/kind raises
                IdentityConflict)
    complete -> pending | indeterminate  ->  applied | rejected | indeterminate

`applied` and `rejected` are final: completing them again returns `LostRace`
(`wrong_status`, with the state found). An `indeterminate` effect may be
completed again once the provider has been observed.
"""

from __future__ import annotations

from runner.store._connector import Connector, Row
from runner.store._controller_interface import Effect, EffectState
from runner.store._errors import IdentityConflict
from runner.store._records import LostRace, bounded_message, check_id
from runner.store._states import CONTROLLER_ERROR_MAX_BYTES
from runner.store.domain._controller_events import read_all

#: States an effect may be completed from, and the states it may be completed to.
EFFECT_OPEN_STATES: tuple[EffectState, ...] = ("pending", "indeterminate")
EFFECT_OUTCOMES: tuple[EffectState, ...] = ("applied", "rejected", "indeterminate")
_LOAD = "SELECT * FROM effects WHERE resource_uid = :uid AND effect_key = :key"


def effect_from_row(row: Row) -> Effect:
    return Effect(
        resource_uid=row["resource_uid"],
        effect_key=row["effect_key"],
        generation=row["generation"],
        kind=row["kind"],
        state=row["state"],
        request_fingerprint=row["request_fingerprint"],
        started_at=row["started_at"],
        completed_at=row["completed_at"],
        external_ref=row["external_ref"],
        error=row["error"],
    )


class EffectLedger:
    """`Effects` on any backend."""

    def __init__(self, connector: Connector) -> None:
        self._c = connector

    def reserve(self, resource_uid: str, effect_key: str, *, generation: int, kind: str,
                request_fingerprint: str) -> Effect:
        check_id(resource_uid, "resource uid")
        check_id(effect_key, "effect key")
        check_id(kind, "effect kind")
        check_id(request_fingerprint, "request fingerprint")
        if not isinstance(generation, int) or generation < 1:
            raise ValueError(f"an effect generation must be a positive integer, got {generation!r}")
        ids = {"uid": resource_uid, "key": effect_key}
        with self._c.write() as tx:
            tx.run(
                "INSERT INTO effects (resource_uid, effect_key, generation, kind, state,"
                " request_fingerprint, started_at) VALUES (:uid, :key, :generation, :kind,"
                " 'pending', :fingerprint, :now) ON CONFLICT (resource_uid, effect_key) DO NOTHING",
                {**ids, "generation": generation, "kind": kind,
                 "fingerprint": request_fingerprint, "now": tx.now_ms()})
            row = tx.one(_LOAD, ids)
        assert row is not None
        if row["request_fingerprint"] != request_fingerprint or row["kind"] != kind:
            raise IdentityConflict(
                f"effect {effect_key!r} of resource {resource_uid} was reserved as a "
                f"{row['kind']!r} with another request; use a new effect key for a new request"
            )
        return effect_from_row(row)

    def complete(self, resource_uid: str, effect_key: str, *, state: EffectState,
                 external_ref: str | None = None, error: str | None = None) -> Effect | LostRace:
        if state not in EFFECT_OUTCOMES:
            raise ValueError(f"an effect completes as one of {EFFECT_OUTCOMES}, not {state!r}")
        name = f"{resource_uid}/{effect_key}"
        ids = {"uid": resource_uid, "key": effect_key}
        with self._c.write() as tx:
            row = tx.one(
                "SELECT state FROM effects WHERE resource_uid = :uid AND effect_key = :key"
                + tx.dialect.lock, ids)
            if row is None:
                return LostRace(name, "not_found")
            if row["state"] not in EFFECT_OPEN_STATES:
                return LostRace(name, "wrong_status", row["state"])
            updated = tx.one(
                "UPDATE effects SET state = :state, completed_at = :now, external_ref = :ref,"
                " error = :error WHERE resource_uid = :uid AND effect_key = :key"
                " AND state = :was RETURNING *",
                {**ids, "state": state, "now": tx.now_ms(), "ref": external_ref,
                 "error": None if error is None else bounded_message(
                     error, CONTROLLER_ERROR_MAX_BYTES),
                 "was": row["state"]})
        assert updated is not None
        return effect_from_row(updated)

    def get(self, resource_uid: str, effect_key: str) -> Effect | None:
        rows = read_all(self._c, _LOAD, {"uid": resource_uid, "key": effect_key})
        return effect_from_row(rows[0]) if rows else None

    def list(self, resource_uid: str) -> list[Effect]:
        rows = read_all(self._c, "SELECT * FROM effects WHERE resource_uid = :uid"
                            " ORDER BY started_at, effect_key", {"uid": resource_uid})
        return [effect_from_row(row) for row in rows]
