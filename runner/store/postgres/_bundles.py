"""Run bundles in Postgres: the engine's rows protocol (runner/engine/_rows.py).

When the store is Postgres, every run's bundle lives here instead of a folder on
one host's disk, so any host sharing the database can resume a run whose host
died. The store imports nothing from the engine; the host hands this object to
the engine, which checks it structurally.

    run_bundles        one row per run: sealed flag and the three documents
                       (manifest, workflow snapshot, state) as JSON text
    run_trace          (run_id, seq) -> the event's canonical JSON: the truth
    run_artifacts      (run_id, sha256) -> bytes of a string over 4 KiB
    run_continuations  parent run -> the run that continued it ('' while begun)

Every write is one transaction. A write with a claim token first locks the
run's launch row `FOR SHARE` and requires that token, a claimed status and an
unexpired lease (the database clock, or the injected one), so a takeover's
claim (an UPDATE of that row) waits for a write in flight, and afterwards the
old holder's writes are refused (`fenced`) and change nothing. A sealed bundle
refuses every write (`sealed`). Trace rows are keyed by seq: an event whose seq
is taken is refused whole (`exists`), so two writers never interleave. A write that
cannot reach the database (a restart, a network blip: `StoreUnreachable`) is
`unavailable`; the engine waits and tries again (the write may have committed
before the connection broke, which the engine's retry accounts for). Reads raise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from runner.store._connector import Transaction
from runner.store._ddl import sql_in
from runner.store._errors import StoreUnreachable
from runner.store._states import CLAIMED_STATUSES
from runner.store.postgres._connector import PostgresTransaction
from runner.store.postgres._db import Conn, PostgresDatabase

BUNDLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "run_bundles": ("run_id", "created_at", "sealed", "manifest", "workflow", "state"),
    "run_trace": ("run_id", "seq", "event"),
    "run_artifacts": ("run_id", "sha256", "data"),
    "run_continuations": ("parent_run_id", "child_run_id"),
}
BUNDLE_TABLES: tuple[str, ...] = tuple(BUNDLE_COLUMNS)

BUNDLE_DDL: tuple[str, ...] = (
    "CREATE TABLE run_bundles ("
    " run_id TEXT PRIMARY KEY CHECK (octet_length(run_id) BETWEEN 1 AND 512),"
    " created_at BIGINT NOT NULL,"
    " sealed BOOLEAN NOT NULL DEFAULT false,"
    " manifest TEXT, workflow TEXT, state TEXT)",
    "CREATE TABLE run_trace ("
    " run_id TEXT NOT NULL REFERENCES run_bundles (run_id) ON DELETE CASCADE,"
    " seq BIGINT NOT NULL CHECK (seq >= 1),"
    " event TEXT NOT NULL,"
    " PRIMARY KEY (run_id, seq))",
    "CREATE TABLE run_artifacts ("
    " run_id TEXT NOT NULL REFERENCES run_bundles (run_id) ON DELETE CASCADE,"
    " sha256 TEXT NOT NULL CHECK (octet_length(sha256) = 64),"
    " data BYTEA NOT NULL,"
    " PRIMARY KEY (run_id, sha256))",
    "CREATE TABLE run_continuations ("
    " parent_run_id TEXT PRIMARY KEY,"
    " child_run_id TEXT NOT NULL DEFAULT '')",
)

_DOCUMENTS = {"manifest": "manifest", "workflow": "workflow", "state": "state"}
_DB_NOW = "(extract(epoch FROM now()) * 1000)::bigint"


class LaunchStep(Protocol):
    """A launch transition that runs a bundle write in its transaction
    (runner/engine/_rows.py): `run(write)` is the write's result word."""

    def run(self, write: Callable[[Any], str]) -> str: ...


def _conn(tx: Transaction) -> Conn:
    """The psycopg connection of the transition's transaction (this backend's own)."""
    assert isinstance(tx, PostgresTransaction), tx
    return tx.conn


class _Refused(Exception):
    """Rolls the write's transaction back and names why."""

    def __init__(self, result: str) -> None:
        super().__init__(result)
        self.result = result


class PostgresBundleRows:
    """`BundleRows` on the store's connection pool."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    def __repr__(self) -> str:
        return f"PostgresBundleRows({self._db.where!r})"

    # -- the fence -------------------------------------------------------------
    def _held_sql(self, claim_param: str) -> tuple[str, tuple[object, ...]]:
        """The fence as an EXISTS over the launch row (locked FOR SHARE)."""
        now_sql, now = (("%s", (self._db.now_ms(),)) if self._db.injected_clock
                        else (_DB_NOW, ()))
        return ("EXISTS (SELECT 1 FROM workflow_run_queue q WHERE q.run_id = %s"
                f" AND q.claim_token = {claim_param}"
                f" AND q.status IN {sql_in(CLAIMED_STATUSES)}"
                f" AND q.claim_expires_at > {now_sql} FOR SHARE)"), now

    def _fence(self, conn: Conn, run_id: str, claim: str | None) -> None:
        if claim is None:
            return
        held, now = self._held_sql("%s")
        row = conn.execute(f"SELECT {held} AS held", (run_id, claim, *now)).fetchone()
        if row is None or not row["held"]:
            raise _Refused("fenced")

    def _open_for_write(self, conn: Conn, run_id: str, claim: str | None) -> None:
        # One statement: the fence and the bundle row, FOR UPDATE (not SHARE: two
        # writers of one bundle queue here instead of deadlocking on the UPDATE after).
        params: tuple[object, ...] = (run_id,)
        held = "true"
        if claim is not None:
            held, now = self._held_sql("%s")
            params = (run_id, claim, *now, run_id)
        row = conn.execute(f"SELECT b.sealed, {held} AS held FROM run_bundles b"
                           " WHERE b.run_id = %s FOR UPDATE OF b", params).fetchone()
        if row is None:
            self._fence(conn, run_id, claim)  # a stale writer is told so first
            raise _Refused("missing")
        if not row["held"]:
            raise _Refused("fenced")
        if row["sealed"]:
            raise _Refused("sealed")

    def _write(self, run_id: str, claim: str | None, sql: str,
               params: Sequence[object], *, want: int | None = None,
               durable: bool = True) -> str:
        try:
            with self._db.write() as conn:
                if not durable:
                    # What a folder would not fsync: commit without waiting for the WAL
                    # flush (a crash loses at most a suffix of such writes, in order).
                    conn.execute("SET LOCAL synchronous_commit = off")
                self._open_for_write(conn, run_id, claim)
                cur = conn.execute(sql, params)
                if want is not None and cur.rowcount != want:
                    raise _Refused("exists")
        except _Refused as refused:
            return refused.result
        except StoreUnreachable:  # a full, read-only or forbidden database is raised
            return "unavailable"
        return "ok"

    # -- writes ----------------------------------------------------------------
    def _insert_bundle(self, conn: Conn, run_id: str, claim: str | None, *,
                       fenced_after: bool = False) -> None:
        """The bundle's row. `fenced_after`: the caller's next statement is the fence
        (`_open_for_write`), whose refusal rolls this insert back with the rest."""
        if not fenced_after:
            self._fence(conn, run_id, claim)
        now_sql, now = (("%s", (self._db.now_ms(),)) if self._db.injected_clock
                        else (_DB_NOW, ()))  # the server's clock inside the insert
        cur = conn.execute("INSERT INTO run_bundles (run_id, created_at)"
                           f" VALUES (%s, {now_sql}) ON CONFLICT DO NOTHING", (run_id, *now))
        if cur.rowcount != 1:
            if fenced_after:
                self._fence(conn, run_id, claim)  # a stale writer is told so first
            raise _Refused("exists")

    def create_bundle(self, run_id: str, claim: str | None) -> str:
        try:
            with self._db.write() as conn:
                self._insert_bundle(conn, run_id, claim)
        except _Refused as refused:
            return refused.result
        except StoreUnreachable:
            return "unavailable"
        return "ok"

    def append_events(self, run_id: str, events: Sequence[tuple[int, str]],
                      claim: str | None, durable: bool = True) -> str:
        seqs = [seq for seq, _ in events]
        texts = [text for _, text in events]
        return self._write(
            run_id, claim,
            "INSERT INTO run_trace (run_id, seq, event)"
            " SELECT %s, s, e FROM unnest(%s::bigint[], %s::text[]) AS t(s, e)"
            " ON CONFLICT DO NOTHING", (run_id, seqs, texts), want=len(events),
            durable=durable)

    def put_document(self, run_id: str, kind: str, text: str, claim: str | None,
                     durable: bool = True) -> str:
        column = _DOCUMENTS.get(kind)
        if column is None:
            raise ValueError(f"unknown bundle document {kind!r}")
        return self._write(run_id, claim,
                           f"UPDATE run_bundles SET {column} = %s WHERE run_id = %s",
                           (text, run_id), durable=durable)

    def put_artifact(self, run_id: str, sha256: str, data: bytes, claim: str | None) -> str:
        return self._write(run_id, claim,
                           "INSERT INTO run_artifacts (run_id, sha256, data) VALUES (%s, %s, %s)"
                           " ON CONFLICT DO NOTHING", (run_id, sha256, data))

    def truncate_events(self, run_id: str, after_seq: int, claim: str | None) -> str:
        return self._write(run_id, claim,
                           "DELETE FROM run_trace WHERE run_id = %s AND seq > %s",
                           (run_id, after_seq))

    def write_batch(self, run_id: str, claim: str | None, *,
                    events: Sequence[tuple[int, str]] = (),
                    documents: Sequence[tuple[str, str]] = (), seal: bool = False,
                    durable: bool = True, create: bool = False,
                    launch: LaunchStep | None = None) -> str:
        """Events, documents and the seal in one transaction (one fence, one commit);
        with `create`, the bundle's row is inserted first in it (a run's first write:
        its row, snapshot, manifest and `run_started` commit together or not at all).
        With `launch`, the launch's transition runs the batch inside its own
        transaction: its guard on the launch row (locked) is the fence, and the
        run's first write and `running`, or its seal and ending, are one commit."""
        columns = [_DOCUMENTS.get(kind) for kind, _ in documents]
        if None in columns:
            raise ValueError(f"unknown bundle document in {[k for k, _ in documents]!r}")

        def batch(conn: Conn, fenced_by: str | None) -> str:
            try:
                self._batch(conn, run_id, fenced_by, events, documents, seal, create)
            except _Refused as refused:
                return refused.result
            return "ok"

        if launch is not None:
            return launch.run(lambda tx: batch(_conn(tx), None))
        try:
            with self._db.write() as conn:
                if not durable:
                    conn.execute("SET LOCAL synchronous_commit = off")
                result = batch(conn, claim)
                if result != "ok":
                    raise _Refused(result)
        except _Refused as refused:
            return refused.result
        except StoreUnreachable:
            return "unavailable"
        return "ok"

    def _batch(self, conn: Conn, run_id: str, claim: str | None,
               events: Sequence[tuple[int, str]], documents: Sequence[tuple[str, str]],
               seal: bool, create: bool) -> None:
        if create:
            self._insert_bundle(conn, run_id, claim, fenced_after=True)
        self._open_for_write(conn, run_id, claim)
        if events:
            cur = conn.execute(
                "INSERT INTO run_trace (run_id, seq, event)"
                " SELECT %s, s, e FROM unnest(%s::bigint[], %s::text[]) AS t(s, e)"
                " ON CONFLICT DO NOTHING",
                (run_id, [q for q, _ in events], [t for _, t in events]))
            if cur.rowcount != len(events):
                raise _Refused("exists")
        columns = [_DOCUMENTS[kind] for kind, _ in documents]
        sets = [f"{column} = %s" for column in dict.fromkeys(columns)]
        values = list(dict(zip(columns, (t for _, t in documents), strict=True)).values())
        if seal:
            sets.append("sealed = true")
        if sets:
            conn.execute(f"UPDATE run_bundles SET {', '.join(sets)} WHERE run_id = %s",
                         (*values, run_id))

    def seal_bundle(self, run_id: str, claim: str | None) -> str:
        return self._write(run_id, claim,
                           "UPDATE run_bundles SET sealed = true WHERE run_id = %s", (run_id,))

    # -- reads -----------------------------------------------------------------
    def bundle_exists(self, run_id: str) -> bool:
        return bool(self._db.read("SELECT 1 FROM run_bundles WHERE run_id = %s", (run_id,)))

    def bundle_sealed(self, run_id: str) -> bool:
        rows = self._db.read("SELECT sealed FROM run_bundles WHERE run_id = %s", (run_id,))
        return bool(rows) and bool(rows[0]["sealed"])

    def read_events(self, run_id: str, after_seq: int = 0) -> list[str]:
        rows = self._db.read("SELECT event FROM run_trace WHERE run_id = %s AND seq > %s"
                             " ORDER BY seq", (run_id, after_seq))
        return [str(r["event"]) for r in rows]

    def first_event(self, run_id: str) -> str | None:
        rows = self._db.read("SELECT event FROM run_trace WHERE run_id = %s AND seq = 1",
                             (run_id,))
        return str(rows[0]["event"]) if rows else None

    def read_document(self, run_id: str, kind: str) -> str | None:
        column = _DOCUMENTS.get(kind)
        if column is None:
            raise ValueError(f"unknown bundle document {kind!r}")
        rows = self._db.read(f"SELECT {column} AS doc FROM run_bundles WHERE run_id = %s",
                             (run_id,))
        return None if not rows or rows[0]["doc"] is None else str(rows[0]["doc"])

    def read_artifact(self, run_id: str, sha256: str) -> bytes | None:
        rows = self._db.read("SELECT data FROM run_artifacts WHERE run_id = %s AND sha256 = %s",
                             (run_id, sha256))
        return bytes(rows[0]["data"]) if rows else None

    def bundle_ids(self) -> list[str]:
        return [str(r["run_id"]) for r in
                self._db.read("SELECT run_id FROM run_bundles ORDER BY run_id")]

    def read_bundles(self, run_ids: Sequence[str]) -> dict[str, tuple[str | None, list[str]]]:
        ids = list(dict.fromkeys(run_ids))
        if not ids:
            return {}
        # The manifest first: a trace read after it is at least as new, as it is when
        # one run is read (a manifest never names more than its trace holds).
        found: dict[str, tuple[str | None, list[str]]] = {
            str(r["run_id"]): (None if r["manifest"] is None else str(r["manifest"]), [])
                 for r in self._db.read("SELECT run_id, manifest FROM run_bundles"
                                        " WHERE run_id = ANY(%s)", (ids,))}
        if found:
            for r in self._db.read("SELECT run_id, event FROM run_trace WHERE run_id = ANY(%s)"
                                   " ORDER BY run_id, seq", (list(found),)):
                found[str(r["run_id"])][1].append(str(r["event"]))
        return found

    def remove_bundle(self, run_id: str, *, unstarted_only: bool) -> bool:
        guard = (" AND NOT EXISTS (SELECT 1 FROM run_trace t WHERE t.run_id = b.run_id"
                 " AND t.seq = 1)") if unstarted_only else ""
        with self._db.write() as conn:
            cur = conn.execute(f"DELETE FROM run_bundles b WHERE b.run_id = %s{guard}",
                               (run_id,))
            if cur.rowcount and not unstarted_only:
                conn.execute("DELETE FROM run_continuations WHERE parent_run_id = %s",
                             (run_id,))
            return cur.rowcount == 1

    # -- continuation markers --------------------------------------------------
    def mark_continued(self, parent_run_id: str) -> bool:
        with self._db.write() as conn:
            cur = conn.execute("INSERT INTO run_continuations (parent_run_id) VALUES (%s)"
                               " ON CONFLICT DO NOTHING", (parent_run_id,))
            return cur.rowcount == 1

    def set_continued(self, parent_run_id: str, child_run_id: str) -> None:
        with self._db.write() as conn:
            conn.execute("UPDATE run_continuations SET child_run_id = %s"
                         " WHERE parent_run_id = %s", (child_run_id, parent_run_id))

    def unmark_continued(self, parent_run_id: str, child_run_id: str) -> None:
        with self._db.write() as conn:
            conn.execute("DELETE FROM run_continuations WHERE parent_run_id = %s"
                         " AND child_run_id IN ('', %s)", (parent_run_id, child_run_id))

    def continued_by(self, parent_run_id: str) -> str | None:
        rows = self._db.read("SELECT child_run_id FROM run_continuations"
                             " WHERE parent_run_id = %s", (parent_run_id,))
        return str(rows[0]["child_run_id"]) if rows else None
