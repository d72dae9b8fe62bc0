"""`fanout_items`, backend-neutral: the branches and items of `parallel` and `map`
nodes (ADR 0008).

A node visit's items are opened once (one row per index, `pending`); a holder of
the parent launch's claim claims them, runs them and settles each. Every write is
fenced by the parent's claim (its launch row is read, locked, in the same
transaction): a runner that lost the parent changes nothing here. The rules:

    pending            -> running (claim: starts + 1) | an ending (a pure item, or cancel)
    running (owner X)  -> an ending (settle by X) | cancelled (cancel)
    running (owner Y)  -> running (owner X: taken over by the parent's new holder)
                          | failed `interrupted` (it already started twice)

`max_concurrency` is enforced here: a claim counts the owner's running rows in its
transaction and takes at most the difference, lowest index first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from runner.store._connector import Connector, Row, in_params
from runner.store._connector import Transaction as Tx
from runner.store._records import LostRace
from runner.store._states import CLAIMED_STATUSES, ITEM_ENDINGS, ItemState

#: A third start of an item whose runner died twice is refused (engine.NODE_START_BUDGET
#: for items): it ends failed, `interrupted`.
ITEM_START_BUDGET = 2
#: Ended items written per transaction (pure items settle in batches).
BATCH = 500
INTERRUPTED = ('{"code":"interrupted","message":"the item was interrupted twice (its runner'
               ' died each time); it is not run again"}')

_KEY = "run_id = :run AND node_id = :node AND visit = :visit"
_OPEN = f"{_KEY} AND state IN ('pending', 'running')"


@dataclass(frozen=True, slots=True)
class ItemKey:
    """One visit of one fan-out node of one run."""

    run_id: str
    node_id: str
    visit: int

    def params(self) -> dict[str, object]:
        return {"run": self.run_id, "node": self.node_id, "visit": self.visit}


@dataclass(frozen=True, slots=True)
class FanoutItem:
    index: int
    state: ItemState
    starts: int
    output_json: str | None
    error_json: str | None
    child_run_id: str | None
    finished_at: int | None


@dataclass(frozen=True, slots=True)
class ItemEnding:
    """How one item ended: `state` one of ITEM_ENDINGS, output and error as JSON text."""

    index: int
    state: ItemState
    output_json: str | None = None
    error_json: str | None = None


@dataclass(frozen=True, slots=True)
class Claimed:
    """What one claim took: the items to run (index, start number) and the items it
    ended as `interrupted` instead of starting them a third time."""

    items: tuple[tuple[int, int], ...]
    interrupted: tuple[int, ...]


def item_from_row(row: Row) -> FanoutItem:
    return FanoutItem(index=row["item_index"], state=row["state"], starts=row["starts"],
                      output_json=row["output_json"], error_json=row["error_json"],
                      child_run_id=row["child_run_id"], finished_at=row["finished_at"])


def _fence(tx: Tx, run_id: str, owner: str) -> LostRace | None:
    """The parent launch is held by `owner` (its claim token, lease unexpired); the
    row stays locked to the end of the transaction on Postgres."""
    row = tx.one("SELECT status, claim_token, claim_expires_at FROM workflow_run_queue"
                 " WHERE run_id = :run" + tx.dialect.lock, {"run": run_id})
    # The launch queue's `hold` guard (domain/_launches.py), read here as data.
    if row is None:
        return LostRace(run_id, "not_found")
    if row["status"] not in CLAIMED_STATUSES:
        return LostRace(run_id, "wrong_status", row["status"])
    if row["claim_token"] != owner:
        return LostRace(run_id, "token_mismatch", row["status"])
    if row["claim_expires_at"] <= tx.now_ms():
        return LostRace(run_id, "lease_expired", row["status"])
    return None


def _check(ending: ItemEnding) -> None:
    if ending.state not in ITEM_ENDINGS:
        raise ValueError(f"an item cannot end as {ending.state!r}")


def _settle(tx: Tx, key: ItemKey, rows: Sequence[ItemEnding], owner: str, now: int, *,
            claimed: bool) -> None:
    source = "state = 'running' AND claim_token = :owner" if claimed else "state = 'pending'"
    starts = "" if claimed else ", starts = starts + 1"
    base = key.params()
    tx.many(f"UPDATE fanout_items SET state = :state, claim_token = NULL{starts},"
            " output_json = :output, error_json = :error, updated_at = :now,"
            f" finished_at = :now WHERE {_KEY} AND item_index = :i AND {source}",
            [{**base, "owner": owner, "now": now, "i": e.index, "state": e.state,
              "output": e.output_json, "error": e.error_json} for e in rows])


class FanoutItems:
    """The fan-out item rows on any backend."""

    def __init__(self, connector: Connector) -> None:
        self._c = connector

    def open(self, key: ItemKey, count: int, *, owner: str) -> int | LostRace:
        """Make the visit's rows 0..count-1 (`pending`) unless they exist: idempotent, so
        a resumed parent opens again and finds what it had. Returns the row count."""
        if count < 0:
            raise ValueError("an item count is never negative")
        with self._c.write() as tx:
            lost = _fence(tx, key.run_id, owner)
            if lost is not None:
                return lost
            now = tx.now_ms()
            base = key.params()
            tx.many("INSERT INTO fanout_items (run_id, node_id, visit, item_index, state,"
                    " starts, created_at, updated_at) VALUES (:run, :node, :visit, :i,"
                    " 'pending', 0, :now, :now) ON CONFLICT DO NOTHING",
                    [{**base, "i": i, "now": now} for i in range(count)])
            row = tx.one(f"SELECT count(*) AS n FROM fanout_items WHERE {_KEY}", base)
        assert row is not None
        return int(row["n"])

    def claim(self, key: ItemKey, *, owner: str, limit: int,
              indexes: Sequence[int] | None = None,
              settling: Sequence[ItemEnding] = ()) -> Claimed | LostRace:
        """Claim up to `limit` minus the owner's running items, lowest index first
        (among `indexes` when given). Rows another owner left running are taken over
        (their start counted), or ended `interrupted` at the start budget. `settling`:
        the owner's items that ended, recorded first in the same transaction (one
        commit hands a finished item's slot to the next)."""
        if limit < 1:
            raise ValueError("max_concurrency is at least 1")
        for ending in settling:
            _check(ending)
        base = key.params()
        with self._c.write() as tx:
            lost = _fence(tx, key.run_id, owner)
            if lost is not None:
                return lost
            now = tx.now_ms()
            if settling:
                _settle(tx, key, settling, owner, now, claimed=True)
            params = {**base, "owner": owner, "now": now, "budget": ITEM_START_BUDGET}
            dead = tx.all(f"SELECT item_index FROM fanout_items WHERE {_KEY} AND state ="
                          " 'running' AND claim_token <> :owner AND starts >= :budget",
                          params)
            if dead:
                tx.run(f"UPDATE fanout_items SET state = 'failed', claim_token = NULL,"
                       f" error_json = :err, updated_at = :now, finished_at = :now WHERE {_KEY}"
                       " AND state = 'running' AND claim_token <> :owner AND starts >= :budget",
                       {**params, "err": INTERRUPTED})
            row = tx.one(f"SELECT count(*) AS n FROM fanout_items WHERE {_KEY} AND state ="
                         " 'running' AND claim_token = :owner", params)
            free = limit - int(row["n"] if row else 0)
            taken: list[Row] = []
            if free > 0:
                among = ""
                if indexes is not None:
                    marks, more = in_params("ix", indexes)
                    among = f" AND item_index IN {marks}" if indexes else " AND 1 = 0"
                    params.update(more)
                taken = tx.all(
                    f"SELECT item_index, starts FROM fanout_items WHERE {_OPEN}{among}"
                    " AND (state = 'pending' OR claim_token <> :owner)"
                    f" ORDER BY item_index LIMIT {int(free)}" + tx.dialect.lock, params)
                tx.many("UPDATE fanout_items SET state = 'running', claim_token = :owner,"
                        f" starts = starts + 1, updated_at = :now WHERE {_KEY}"
                        " AND item_index = :i",
                        [{**base, "owner": owner, "now": now, "i": r["item_index"]}
                         for r in taken])
        return Claimed(tuple((r["item_index"], r["starts"] + 1) for r in taken),
                       tuple(r["item_index"] for r in dead))

    def settle(self, key: ItemKey, endings: Iterable[ItemEnding], *, owner: str,
               claimed: bool = True) -> int | LostRace:
        """Record endings in one transaction. `claimed`: each item must be running under
        `owner` (an item that is not is left alone); otherwise pending items (pure ones,
        never claimed) end directly, their start counted. Returns the open items left."""
        rows = list(endings)
        for ending in rows:
            _check(ending)
        base = key.params()
        with self._c.write() as tx:
            lost = _fence(tx, key.run_id, owner)
            if lost is not None:
                return lost
            _settle(tx, key, rows, owner, tx.now_ms(), claimed=claimed)
            row = tx.one(f"SELECT count(*) AS n FROM fanout_items WHERE {_OPEN}", base)
        return int(row["n"]) if row else 0

    def cancel_open(self, key: ItemKey, *, owner: str, error_json: str) -> int | LostRace:
        """End every open item of the visit `cancelled` (a cancel, fail_fast): one
        transaction. Returns how many it ended."""
        with self._c.write() as tx:
            lost = _fence(tx, key.run_id, owner)
            if lost is not None:
                return lost
            now = tx.now_ms()
            return tx.run(f"UPDATE fanout_items SET state = 'cancelled', claim_token = NULL,"
                          " error_json = :error, updated_at = :now, finished_at = :now"
                          f" WHERE {_OPEN}", {**key.params(), "now": now,
                                              "error": error_json})

    def release(self, key: ItemKey, indexes: Sequence[int], *, owner: str) -> int | LostRace:
        """Give running items back (`pending`, their start uncounted): a clean park
        stopped them, they did not die, so the start budget does not count it."""
        if not indexes:
            return 0
        marks, more = in_params("ix", indexes)
        with self._c.write() as tx:
            lost = _fence(tx, key.run_id, owner)
            if lost is not None:
                return lost
            return tx.run(f"UPDATE fanout_items SET state = 'pending', claim_token = NULL,"
                          f" starts = starts - 1, updated_at = :now WHERE {_KEY}"
                          f" AND item_index IN {marks} AND state = 'running'"
                          " AND claim_token = :owner AND starts > 0",
                          {**key.params(), **more, "owner": owner, "now": tx.now_ms()})

    def set_child(self, key: ItemKey, index: int, child_run_id: str, *,
                  owner: str) -> bool | LostRace:
        """Record the linked child run of a `workflow:` item (kept across its restarts)."""
        with self._c.write() as tx:
            lost = _fence(tx, key.run_id, owner)
            if lost is not None:
                return lost
            n = tx.run(f"UPDATE fanout_items SET child_run_id = :child, updated_at = :now"
                       f" WHERE {_KEY} AND item_index = :i AND state = 'running'"
                       " AND claim_token = :owner",
                       {**key.params(), "child": child_run_id, "now": tx.now_ms(), "i": index,
                        "owner": owner})
        return n == 1

    def items(self, key: ItemKey) -> list[FanoutItem]:
        with self._c.read() as tx:
            rows = tx.all(f"SELECT * FROM fanout_items WHERE {_KEY} ORDER BY item_index",
                          key.params())
        return [item_from_row(r) for r in rows]

    def progress(self, run_id: str) -> dict[tuple[str, int], dict[str, int]]:
        """Per (node, visit) of a run, how many items are in each state (views)."""
        with self._c.read() as tx:
            rows = tx.all("SELECT node_id, visit, state, count(*) AS n FROM fanout_items"
                          " WHERE run_id = :run GROUP BY node_id, visit, state",
                          {"run": run_id})
        out: dict[tuple[str, int], dict[str, int]] = {}
        for r in rows:
            out.setdefault((r["node_id"], r["visit"]), {})[r["state"]] = int(r["n"])
        return out
