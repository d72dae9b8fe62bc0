"""The store seam: the one narrow interface a backend implements (procrastinate's model).

Everything that *means* something -- the state contract (`states.py`), the
transition guards, the reservation rules, event appends, epoch fencing -- is
written once, above this seam (`runner/store/domain/`), against `Connector` and
`Transaction`. A backend (`sqlite/_connector.py`, `postgres/_connector.py`) supplies
only its connections and transactions, its clock, its error translation and the
few named statements whose SQL really differs.

Using it (the controller side builds on exactly this):

    with connector.write() as tx:                    # one transaction, or nothing
        row = tx.one(sql["load"] + tx.dialect.lock, {"k": key})
        now = tx.now_ms()                            # the backend's clock, fixed per tx
        changed = tx.run("UPDATE t SET a = :a WHERE k = :k", {"a": 1, "k": "x"})
        try:
            with tx.statement():                     # a unique index may refuse this...
                tx.run("INSERT INTO t (k) VALUES (:k)", {"k": "x"})
        except UniqueViolation:                      # ...and the rest of tx is kept
            ...
        if tx.dialect.notices:                       # Postgres: delivered at commit
            tx.notify("wfrun_launch", run_id)

    with connector.read() as tx:                     # reads only; each statement sees
        rows = tx.all("SELECT ...", {...})          # its own snapshot (autocommit)

Rules of the seam:

- SQL is written once with `:name` parameters (SQLite's native style); the Postgres
  connector rewrites them to `%(name)s` mechanically (`::` casts and `%` are left
  meaning what they mean; so no `:word` inside a string literal). Parameters are
  always a mapping; extra keys are ignored. There is no list binding: build
  `IN (:s0, :s1)` with `in_params()`.
- Rows come back as plain `dict`s keyed by column name (never by position).
- `write()` commits when the block ends normally and rolls back on any exception.
  SQLite takes the write lock up front (`BEGIN IMMEDIATE`: writers are serialized);
  Postgres relies on row locks, so a read-then-update must lock what it read
  (`tx.dialect.lock`, empty on SQLite) or be an update guarded by what it read.
- `now_ms()` is integer milliseconds: SQLite's is the store's injected clock,
  Postgres's the database's `now()` (the transaction's start, so every host on one
  database agrees on leases) unless a clock was injected (tests). It is read once per
  transaction and then fixed. `clock_sql()` is the same clock inside a statement
  (`SELECT *, {now} AS now_ms ...`), saving Postgres the extra round trip.
- Errors: a backend raises only `runner.store._errors` classes (its own translation:
  `StoreUnavailable` is retryable, and so on); `UniqueViolation` is the one a caller
  may catch and carry on from, and only around `tx.statement()` (one statement) or
  `tx.savepoint()` (several): on Postgres the rest of a transaction is unusable after
  an error outside a savepoint; SQLite undoes a refused statement alone.
- Dialect differences that are fragments (`FOR UPDATE`, `SKIP LOCKED`, "no limit")
  are `Dialect` fields; whole statements that differ are named queries a backend
  overrides (`named()` checks every override names a known query).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from runner.store._errors import StoreError

Row = dict[str, Any]
Params = Mapping[str, object]


class UniqueViolation(StoreError):
    """A unique constraint or index refused a statement (caught around a savepoint)."""


@dataclass(frozen=True)
class Dialect:
    """The SQL fragments that differ between backends."""

    name: str
    #: Appended to a SELECT whose rows the transaction is about to change.
    lock: str
    #: Appended to a SELECT that takes the first free row of a queue.
    skip_locked: str
    #: The LIMIT value that means "no limit".
    unlimited: int | None
    #: Null-safe equality (`a IS b`; SQLite before 3.39 lacks IS NOT DISTINCT FROM).
    same: str
    #: Whether a FROM may name the index to read (`INDEXED BY`, SQLite): its planner
    #: has no statistics and prefers a status lookup plus a sort for the claim.
    index_hints: bool = False
    #: Whether an `UPDATE ... RETURNING` costs no more than the UPDATE alone. On
    #: SQLite it does not: RETURNING turns off the one-pass UPDATE, and a status change
    #: of a launch row (five indexes) cost ~1.6x the plain UPDATE plus a re-read by key
    #: (~2.8x on 3.40.1); there the launch queue computes the row from the one it read.
    cheap_returning: bool = True
    #: A statement that holds the transaction until no other holds `:key` (Postgres:
    #: an advisory lock); None where writers already go one at a time (SQLite).
    key_lock: str | None = None
    #: Whether write transactions of one process make progress side by side (a pool
    #: of connections, row locks) rather than one at a time (SQLite's write lock).
    parallel_writes: bool = True
    #: Whether a commit announces ids to listeners (`Transaction.notify`, Postgres
    #: LISTEN/NOTIFY). Where not (SQLite: hosts on one file poll), callers skip it.
    notices: bool = True

    def indexed_by(self, index: str) -> str:
        return f" INDEXED BY {index}" if self.index_hints else ""


class Transaction(Protocol):
    """One transaction (or, from `read()`, a connection whose statements autocommit)."""

    @property
    def dialect(self) -> Dialect: ...

    def all(self, sql: str, params: Params = ...) -> list[Row]:
        """Run one statement; every row it returns."""
        ...

    def one(self, sql: str, params: Params = ...) -> Row | None:
        """Run one statement; its first row, or None."""
        ...

    def run(self, sql: str, params: Params = ...) -> int:
        """Run one statement; the number of rows it changed."""
        ...

    def many(self, sql: str, rows: Sequence[Params]) -> None:
        """Run one statement once per parameter mapping (a batch insert)."""
        ...

    def now_ms(self) -> int:
        """The backend's clock in integer milliseconds, fixed for this transaction."""
        ...

    def clock_sql(self, name: str = "now") -> tuple[str, dict[str, int]]:
        """This transaction's clock as an SQL fragment and its parameters, for a read
        that needs the clock and its rows in one statement (one round trip): the
        database's expression (Postgres `now()` in ms), or `:name` bound to the injected
        clock's value. Bound, not a literal, so the statement's text (and the prepared
        statement SQLite caches for it) is the same in every transaction."""
        ...

    def savepoint(self) -> AbstractContextManager[None]:
        """A nested savepoint: an error inside undoes only the statements inside."""
        ...

    def statement(self) -> AbstractContextManager[None]:
        """Around one statement a unique index may refuse: its refusal undoes it alone
        and the transaction goes on. SQLite does that by itself (a refused statement
        is rolled back, the transaction kept), so nothing is sent there; Postgres needs
        a savepoint (after an error outside one the transaction is unusable)."""
        ...

    def notify(self, channel: str, item_id: str) -> None:
        """Announce an id on a channel at commit (Postgres LISTEN/NOTIFY; a no-op where
        the backend has no notices, `dialect.notices`: its readers poll)."""
        ...


class Connector(Protocol):
    """A backend's connections and transactions."""

    @property
    def dialect(self) -> Dialect: ...

    def write(self, *, durable: bool = True,
              shared_sync: bool = False) -> AbstractContextManager[Transaction]:
        """One writing transaction: committed on success, rolled back on any error.
        `durable=False` for a commit whose loss in a power cut (or a database crash) is
        recovered from what else is durable: it need not wait for the disk. It is
        atomic and visible at once all the same, and the next durable commit covers it.
        `shared_sync=True` (a durable commit): the wait for the disk may come after the
        store's write lock is let go, where concurrent writers' waits are one (group
        commit), so others may see the commit a moment before it is durable; the block
        still returns only once it is. For a commit that records what is durable
        elsewhere already (a run's ending, after its bundle's)."""
        ...

    def read(self) -> AbstractContextManager[Transaction]:
        """A connection for reads, each statement in its own snapshot."""
        ...

    def write_one(self) -> AbstractContextManager[Transaction]:
        """For ONE writing statement that is a whole transaction by itself: committed
        (durably) when it returns. Postgres runs it in autocommit: one round trip, no
        BEGIN or COMMIT of its own; SQLite wraps it in `write()`."""
        ...

    def now_ms(self) -> int:
        """The clock outside any transaction (one round trip on Postgres)."""
        ...


def in_params(prefix: str, values: Iterable[object]) -> tuple[str, dict[str, object]]:
    """`(:p0, :p1, ...)` and its parameters; `(NULL)` (matches nothing) when empty."""
    params = {f"{prefix}{i}": value for i, value in enumerate(values)}
    marks = ", ".join(f":{name}" for name in params) or "NULL"
    return f"({marks})", params


def named(portable: Mapping[str, str], overrides: Mapping[str, str] | None = None
          ) -> Mapping[str, str]:
    """The named statements of a domain module with a backend's overrides applied."""
    unknown = sorted(set(overrides or {}) - set(portable))
    if unknown:
        raise ValueError(f"override(s) of unknown queries: {unknown}")
    return {**portable, **(overrides or {})}

