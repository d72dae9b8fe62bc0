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
transaction and takes at most the difference, lowest index first (the claim rule:
`_itemclaims.py`). A host's slot also holds one item claimed ahead (ADR 0014):
`running` under `ahead:<holder>`, its start counted, not counted against the ceiling,
shown as `pending` until its slot starts it and the settle of the item before it
makes it the holder's own (`hand_on`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from runner.store._connector import Connector, Row, in_params
from runner.store._connector import Transaction as Tx
from runner.store._ddl import sql_in
from runner.store._records import LostRace
from runner.store._states import CLAIMED_STATUSES, ITEM_ENDINGS, TERMINAL_STATUSES, ItemState
from runner.store.domain._itemclaims import (
    _KEY,
    _OPEN,
    AHEAD_TOKEN,
    FAIL_FAST,
    HOST_TOKEN,
    INTERRUPTED,
    ITEM_START_BUDGET,
    RUN_ENDED,
    Claimed,
    HostClaim,
    ItemKey,
    _any_open,
    _cancel_open,
    _claim_node,
    _lease_ms,
    _parent,
    _take,
    _take_ahead,
    _wake,
    ahead_token,
)
from runner.store.domain._launch_queries import LAUNCH_CHANNEL

#: Ended items written per transaction (pure items settle in batches).
BATCH = 500


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
class SharedNode:
    """A node visit any host may run items of: its ceiling, the item lease a host's
    claim holds, and whether a failed item cancels the rest (the parent may be parked)."""

    limit: int
    lease_ms: int
    fail_fast: bool = False


@dataclass(frozen=True, slots=True)
class Handed:
    """What a slot's commit between items did (`FanoutItems.hand_on`): endings recorded,
    items claimed, items claimed ahead, and whether the ahead item it started is its own."""

    recorded: int
    claimed: list[HostClaim]
    ahead: list[HostClaim]
    promoted: bool


@dataclass(frozen=True, slots=True)
class ItemLog:
    """One attempt's log (a `node_log` payload as JSON) of an item another host ran."""

    index: int
    attempt: str
    log_json: str


#: The item's run has not ended (a renewal and the look before an ahead item starts).
_RUN_GOES_ON = ("NOT EXISTS (SELECT 1 FROM workflow_run_queue q WHERE q.run_id = :run AND"
                f" q.status IN {sql_in(TERMINAL_STATUSES)})")
#: An item claimed ahead reads as `pending`: nothing of it runs yet (ADR 0014).
_ITEM_STATE = f"CASE WHEN claim_token LIKE '{AHEAD_TOKEN}%' THEN 'pending' ELSE state END"
_ITEM_COLUMNS = (f"item_index, {_ITEM_STATE} AS state, starts, output_json, error_json,"
                 " child_run_id, finished_at")


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


def _among(key: ItemKey, indexes: Sequence[int] | None) -> tuple[str, dict[str, object]]:
    """A read's `AND item_index IN (...)` and its parameters (nothing: every item)."""
    if indexes is None:
        return "", key.params()
    if not indexes:
        return " AND 1 = 0", key.params()
    marks, more = in_params("ix", indexes)
    return f" AND item_index IN {marks}", {**key.params(), **more}


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


def _count(tx: Tx, key: ItemKey) -> int:
    row = tx.one(f"SELECT count(*) AS n FROM fanout_items WHERE {_KEY}", key.params())
    return int(row["n"]) if row is not None else 0


#: Claims and settles are durable, but wait for the disk after the store's write lock
#: is let go (`Connector.write(shared_sync=True)`): a host's 16 slots each settle an item
#: and claim the next about 160 times a second, and their commits then share the WAL's
#: flushes instead of queueing behind each other's. What another writer sees a moment
#: before it is durable is covered by that writer's own durable commit (the WAL is one
#: ordered log), and an item's process starts only once its claim is durable (the
#: block returns after the sync).
SHARED_SYNC = True


class FanoutItems:
    """The fan-out item rows on any backend."""

    def __init__(self, connector: Connector) -> None:
        self._c = connector

    def open(self, key: ItemKey, count: int, *, owner: str,
             shared: SharedNode | None = None) -> int | LostRace:
        """Make the visit's rows 0..count-1 (`pending`) unless they exist: idempotent, so
        a resumed parent opens again and finds what it had. Returns the row count.
        `shared`: hosts may run the items too (the parent, back in the node, no longer
        waits for them)."""
        if count < 0:
            raise ValueError("an item count is never negative")
        with self._c.write() as tx:
            lost = _fence(tx, key.run_id, owner)
            if lost is not None:
                return lost
            now = tx.now_ms()
            base = key.params()
            made = _count(tx, key)
            if made < count:
                # A resumed parent finds its rows made (all in one transaction): only a
                # first open writes them (a 1,000-item map's resume wrote 1,000 no-ops).
                # One statement makes them (a row per number of a recursive count), not
                # one bound row each: a 1,000-item map's open was ~3 ms of its way to
                # its first item. `WHERE true`: SQLite's upsert after a SELECT needs it.
                tx.run("WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n"
                       " WHERE i + 1 < :count) INSERT INTO fanout_items (run_id, node_id,"
                       " visit, item_index, state, starts, created_at, updated_at) SELECT"
                       " :run, :node, :visit, i, 'pending', 0, :now, :now FROM n WHERE true"
                       " ON CONFLICT DO NOTHING", {**base, "count": count, "now": now})
                made = _count(tx, key)
            if shared is not None:
                tx.run("INSERT INTO fanout_nodes (run_id, node_id, visit, max_concurrency,"
                       " lease_ms, fail_fast, active, waiting, created_at) VALUES (:run,"
                       " :node, :visit, :limit, :lease, :ff, 1, 0, :now) ON CONFLICT DO NOTHING",
                       {**base, "limit": shared.limit, "lease": shared.lease_ms,
                        "ff": int(shared.fail_fast), "now": now})
                tx.run(f"UPDATE fanout_nodes SET waiting = 0 WHERE {_KEY}", base)
        return made

    def claim(self, key: ItemKey, *, owner: str, limit: int,
              indexes: Sequence[int] | None = None,
              settling: Sequence[ItemEnding] = ()) -> Claimed | LostRace:
        """Claim up to `limit` minus the live running items, lowest index first (among
        `indexes` when given). Live: the owner's, and on a shared node also the host
        holders' whose item lease has not expired. Rows a dead holder left running are
        taken over (their start counted), or ended `interrupted` at the start budget.
        `settling`: the owner's items that ended, recorded first in the same
        transaction (one commit hands a finished item's slot to the next)."""
        if limit < 1:
            raise ValueError("max_concurrency is at least 1")
        for ending in settling:
            _check(ending)
        with self._c.write(shared_sync=SHARED_SYNC) as tx:
            lost = _fence(tx, key.run_id, owner)
            if lost is not None:
                return lost
            now = tx.now_ms()
            if settling:
                _settle(tx, key, settling, owner, now, claimed=True)
            return _take(tx, key, owner, owner, limit, now, _lease_ms(tx, key), indexes)

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

    def wait_for_hosts(self, key: ItemKey, *, owner: str) -> bool | LostRace:
        """The parent is about to park until hosts have ended its items: True (and the
        node marked waiting, so the settle that ends the last item re-queues the
        parent) unless none is open any more (then it reads them and goes on)."""
        with self._c.write() as tx:
            lost = _fence(tx, key.run_id, owner)
            if lost is not None:
                return lost
            left = tx.one(f"SELECT count(*) AS n FROM fanout_items WHERE {_OPEN}",
                          key.params())
            if not (left and left["n"]):
                return False
            n = tx.run(f"UPDATE fanout_nodes SET waiting = 1, active = 1 WHERE {_KEY}"
                       " AND refused = 0", key.params())
        return n == 1

    # -- a host's item worker (phase 2): items of shared nodes of any run -----------------
    def claim_for_host(self, holder: str, want: int, *,
                       skip: Collection[ItemKey] = ()) -> list[HostClaim]:
        """Claim up to `want` items of shared node visits, oldest visit first, each under
        its node's ceiling (counted in the transaction that claims, with the parent's
        launch row locked, as the parent's own claims do). `holder` starts HOST_TOKEN."""
        if not holder.startswith(HOST_TOKEN):
            raise ValueError(f"a host's item claim token starts {HOST_TOKEN!r}")
        with self._c.read() as tx:
            nodes = tx.all("SELECT run_id, node_id, visit, max_concurrency, lease_ms FROM"
                           " fanout_nodes WHERE active = 1 AND refused = 0"
                           " ORDER BY created_at LIMIT 50", {})
        out: list[HostClaim] = []
        for n in nodes:
            if want <= 0:
                break
            key = ItemKey(n["run_id"], n["node_id"], n["visit"])
            if key in skip:
                continue
            with self._c.write(shared_sync=SHARED_SYNC) as tx:
                got = _claim_node(tx, key, holder, want, int(n["max_concurrency"]),
                                  int(n["lease_ms"]), _parent(tx, key.run_id))
            out.extend(got)
            want -= len(got)
        return out

    def refuse(self, key: ItemKey) -> None:
        """A host cannot run the visit's items (a secret or a definition it lacks): no
        host claims them any more, and a parent parked waiting for them is re-queued to
        run the rest itself."""
        with self._c.write() as tx:
            tx.run(f"UPDATE fanout_nodes SET refused = 1 WHERE {_KEY}", key.params())
            woken = tx.run("UPDATE workflow_run_queue SET park_mode = 'auto', updated_at ="
                           " :now WHERE run_id = :run AND status = 'parked' AND park_mode ="
                           " 'explicit' AND EXISTS (SELECT 1 FROM fanout_nodes WHERE"
                           f" {_KEY} AND waiting = 1)", {**key.params(), "now": tx.now_ms()})
            tx.run(f"UPDATE fanout_nodes SET active = 0, waiting = 0 WHERE {_KEY}",
                   key.params())
            if woken and tx.dialect.notices:
                tx.notify(LAUNCH_CHANNEL, key.run_id)

    def renew_held(self, holder: str,
                   items: Collection[tuple[ItemKey, int]]) -> set[tuple[ItemKey, int]]:
        """Renew the item leases `holder` has of `items` (the ones it runs); returns
        those it still holds (one no longer running under it was cancelled or taken
        over; one whose parent ended is not renewed: its runner stops it). Each is
        found by its key: no index by holder (one would cost every claim and settle a
        page, for a renewal that knows its items). Not synced: a renewal a power cut
        loses only shortens a dead holder's lease (and a synced one held the store's
        write lock through a flush every half second, the 16 slots' settles behind it)."""
        with self._c.write(durable=False) as tx:
            now = tx.now_ms()
            return {(key, index) for key, index in items if tx.run(
                f"UPDATE fanout_items SET updated_at = :now WHERE {_KEY} AND item_index = :i"
                f" AND state = 'running' AND claim_token IN (:holder, :ahead) AND {_RUN_GOES_ON}",
                {**key.params(), "i": index, "holder": holder, "ahead": ahead_token(holder),
                 "now": now})}

    def settle_held(self, key: ItemKey, endings: Iterable[ItemEnding], *,
                    holder: str, logs: Sequence[ItemLog] = ()) -> int:
        """A host holder records its items' endings: fenced by its token (an item taken
        over or cancelled meanwhile is left alone), with their logs (`logs`, kept for
        the parent's trace). Returns how many it recorded."""
        return self.settle_and_claim(key, endings, holder=holder, logs=logs)[0]

    def settle_and_claim(self, key: ItemKey, endings: Iterable[ItemEnding], *,
                         holder: str, logs: Sequence[ItemLog] = (),
                         want: int = 0) -> tuple[int, list[HostClaim]]:
        """`settle_held`, and in the same transaction the claim of up to `want` more
        items of the visit: one commit hands the slot on, as the parent's own claims
        do. Returns (endings recorded, items claimed)."""
        handed = self.hand_on(key, endings, holder=holder, logs=logs, want=want)
        return handed.recorded, handed.claimed

    def hand_on(self, key: ItemKey, endings: Iterable[ItemEnding], *, holder: str,
                logs: Sequence[ItemLog] = (), want: int = 0, ahead: int = 0,
                promote: int | None = None) -> Handed:
        """A host slot's one commit between items: its endings recorded (each only if
        its row is still running under `holder`, or under its ahead token: one taken
        over or cancelled meanwhile is left alone), with their logs; `promote`: the
        item claimed ahead that the slot has just started becomes the holder's own
        (`promoted` False: it was cancelled or taken over, and the slot stops it); up
        to `want` more items claimed, and then up to `ahead` more claimed ahead, one
        per item the slot now runs (ADR 0014)."""
        rows = list(endings)
        for ending in rows:
            _check(ending)
        with self._c.write(shared_sync=SHARED_SYNC) as tx:
            parent = _parent(tx, key.run_id)  # the order every writer takes
            now = tx.now_ms()
            tokens = {**key.params(), "owner": holder, "ahead": ahead_token(holder),
                      "now": now}
            # Each ending its own statement, whose count says whether it was recorded.
            mine = {e.index for e in rows if tx.run(
                f"UPDATE fanout_items SET state = :state, claim_token = NULL, output_json ="
                " :output, error_json = :error, updated_at = :now, finished_at = :now"
                f" WHERE {_KEY} AND item_index = :i AND state = 'running'"
                " AND claim_token IN (:owner, :ahead)",
                {**tokens, "i": e.index, "state": e.state, "output": e.output_json,
                 "error": e.error_json})}
            kept = [g for g in logs if g.index in mine]
            if kept:
                tx.many("INSERT INTO fanout_logs (run_id, node_id, visit, item_index, seq,"
                        " attempt, log_json, created_at) VALUES (:run, :node, :visit, :i,"
                        " (SELECT count(*) FROM fanout_logs WHERE run_id = :run AND node_id ="
                        " :node AND visit = :visit AND item_index = :i), :attempt, :log, :now)",
                        [{**key.params(), "i": g.index, "attempt": g.attempt,
                          "log": g.log_json, "now": now} for g in kept])
            node = tx.one("SELECT fail_fast, max_concurrency, lease_ms, refused FROM"
                          f" fanout_nodes WHERE {_KEY}", key.params())
            if node is not None and node["fail_fast"] and any(
                    e.state in ("failed", "timed_out") for e in rows if e.index in mine):
                _cancel_open(tx, key, now, FAIL_FAST)  # the parent is parked: here, then
            usable = node is not None and not node["refused"]
            limit, lease = (int(node["max_concurrency"]), int(node["lease_ms"])) \
                if node is not None else (0, 0)
            if promote is not None and (parent is None
                                        or parent["status"] in TERMINAL_STATUSES):
                _cancel_open(tx, key, now, RUN_ENDED)  # its run ended: so do its items
                usable = False
            promoted = usable and promote is not None and tx.run(
                f"UPDATE fanout_items SET claim_token = :owner, updated_at = :now WHERE {_KEY}"
                " AND item_index = :i AND state = 'running' AND claim_token = :ahead",
                {**tokens, "i": promote}) == 1
            claimed: list[HostClaim] = []
            if want > 0 and usable:
                # Wakes the parked parent if that was the last item (or the run ended).
                claimed = _claim_node(tx, key, holder, want, limit, lease, parent)
            elif not promoted and not _any_open(tx, key):
                _wake(tx, key, now)  # the last item: its parent is re-queued with it
            runs = len(claimed) + int(promoted)
            taken = _take_ahead(tx, key, holder, limit, now, min(ahead, runs)) \
                if usable else []
        return Handed(len(mine), claimed, taken, promoted)

    def holds_ahead(self, claim: HostClaim, holder: str) -> bool:
        """Whether `holder` still holds `claim`, claimed ahead, and its run goes on: the
        slot's look just before it starts the item (a read; a cancel since is met by
        the settle that promotes it)."""
        with self._c.read() as tx:
            row = tx.one(f"SELECT 1 AS x FROM fanout_items WHERE {_KEY} AND item_index = :i"
                         f" AND state = 'running' AND claim_token = :ahead AND {_RUN_GOES_ON}",
                         {**claim.key.params(), "i": claim.index,
                          "ahead": ahead_token(holder)})
        return row is not None

    def release_held(self, key: ItemKey, indexes: Sequence[int], *, holder: str) -> int:
        """A stopping host gives its running items back (`pending`, uncounted)."""
        if not indexes:
            return 0
        marks, more = in_params("ix", indexes)
        with self._c.write() as tx:
            return tx.run(f"UPDATE fanout_items SET state = 'pending', claim_token = NULL,"
                          f" starts = starts - 1, updated_at = :now WHERE {_KEY}"
                          f" AND item_index IN {marks} AND state = 'running'"
                          " AND claim_token IN (:owner, :ahead) AND starts > 0",
                          {**key.params(), **more, "owner": holder,
                           "ahead": ahead_token(holder), "now": tx.now_ms()})

    def logs(self, key: ItemKey, indexes: Sequence[int] | None = None) -> list[ItemLog]:
        """The logs of the visit's items other hosts ran, in item and attempt order (only
        those of `indexes`, when given)."""
        among, params = _among(key, indexes)
        with self._c.read() as tx:
            rows = tx.all(f"SELECT item_index, attempt, log_json FROM fanout_logs WHERE {_KEY}"
                          f"{among} ORDER BY item_index, seq", params)
        return [ItemLog(r["item_index"], r["attempt"], r["log_json"]) for r in rows]

    def items(self, key: ItemKey, indexes: Sequence[int] | None = None) -> list[FanoutItem]:
        """The visit's rows in index order (only `indexes`, when given)."""
        among, params = _among(key, indexes)
        with self._c.read() as tx:
            # The columns `FanoutItem` keeps, not `*`: a 1,000-item map's rows are read at
            # its start and again at its end, and the six others made every row a dict of
            # 13 (~1 ms a read here, issue 37).
            rows = tx.all(f"SELECT {_ITEM_COLUMNS} FROM fanout_items WHERE {_KEY}{among}"
                          " ORDER BY item_index", params)
        return [item_from_row(r) for r in rows]

    def progress(self, run_id: str) -> dict[tuple[str, int], dict[str, int]]:
        """Per (node, visit) of a run, how many items are in each state (views)."""
        with self._c.read() as tx:
            rows = tx.all(f"SELECT node_id, visit, {_ITEM_STATE} AS state, count(*) AS n"
                          " FROM fanout_items WHERE run_id = :run GROUP BY node_id, visit,"
                          f" {_ITEM_STATE}",
                          {"run": run_id})
        out: dict[tuple[str, int], dict[str, int]] = {}
        for r in rows:
            out.setdefault((r["node_id"], r["visit"]), {})[r["state"]] = int(r["n"])
        return out


__all__ = ["BATCH", "FAIL_FAST", "HOST_TOKEN", "INTERRUPTED", "ITEM_START_BUDGET", "RUN_ENDED",
           "Claimed", "FanoutItem", "FanoutItems", "Handed", "HostClaim", "ItemEnding",
           "ItemKey", "ItemLog", "SharedNode", "item_from_row"]
