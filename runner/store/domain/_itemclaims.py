"""The claim rule of fan-out items (ADR 0008, ADR 0014), backend-neutral: which
running rows are live and counted against a node's ceiling, what a claim takes (and
takes over from a dead holder, or ends `interrupted` at the start budget), the items
a host's slot claims ahead, a visit's cancel, and the wake of its parked parent.
`domain/_fanout.py` (the rows' store methods) writes through these, every one of them
in a transaction that locked the parent's launch row first (`_parent`, `_fence`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runner.store._connector import Row, in_params
from runner.store._connector import Transaction as Tx
from runner.store._states import CLAIMED_STATUSES, TERMINAL_STATUSES
from runner.store.domain._launch_queries import LAUNCH_CHANNEL

#: A third start of an item whose runner died twice is refused (engine.NODE_START_BUDGET
#: for items): it ends failed, `interrupted`.
ITEM_START_BUDGET = 2
#: How a host's item worker's claim token starts (a parent launch's claim never does):
#: a running row under such a token is live while its item lease lasts.
HOST_TOKEN = "item:"
#: How the claim token of an item claimed ahead for a host's slot starts, the holder's
#: own token after it (ADR 0014): live while the item lease lasts, not counted against
#: the ceiling until its slot starts it.
AHEAD_TOKEN = "ahead:"
INTERRUPTED = ('{"code":"interrupted","message":"the item was interrupted twice (its runner'
               ' died each time); it is not run again"}')

RUN_ENDED = '{"code":"cancelled","message":"the run ended"}'
FAIL_FAST = '{"code":"cancelled","message":"fail_fast: another item failed"}'

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
class HostClaim:
    """An item a host's worker claimed: its node visit, index and start number."""

    key: ItemKey
    index: int
    start: int


@dataclass(frozen=True, slots=True)
class Claimed:
    """What one claim took: the items to run (index, start number) and the items it
    ended as `interrupted` instead of starting them a third time."""

    items: tuple[tuple[int, int], ...]
    interrupted: tuple[int, ...]


def _lease_ms(tx: Tx, key: ItemKey) -> int | None:
    """The item lease of a shared node visit (any host may run its items); None: the
    items run under the parent's claim alone (phase 1)."""
    row = tx.one("SELECT lease_ms FROM fanout_nodes WHERE run_id = :run AND node_id = :node"
                 " AND visit = :visit", key.params())
    return None if row is None else int(row["lease_ms"])


def _take(tx: Tx, key: ItemKey, owner: str, parent: str, limit: int, now: int,
          lease_ms: int | None, indexes: Sequence[int] | None = None,
          want: int | None = None) -> Claimed:
    """The claim rule, for the parent's holder and for a host's item worker alike.
    A running row is live when `owner` or `parent` (the parent launch's live claim,
    '' when it has none) holds it, or a host holder whose lease (`updated_at` plus
    `lease_ms`) has not run out; any other running row was left by a dead holder."""
    stale = now - lease_ms if lease_ms is not None else now + 1  # no host holders
    params = {**key.params(), "owner": owner, "parent": parent, "now": now,
              "stale": stale, "host": HOST_TOKEN + "%", "ahead": AHEAD_TOKEN + "%",
              "budget": ITEM_START_BUDGET}
    # Counted against the ceiling: the rows whose items run. A row claimed ahead for a
    # live host's slot is live too (nobody takes it over) but runs only once its
    # slot's item has ended, so it counts against nothing (ADR 0014).
    counted = ("(claim_token = :owner OR claim_token = :parent OR (claim_token LIKE :host"
               " AND updated_at > :stale))")
    live = f"({counted} OR (claim_token LIKE :ahead AND updated_at > :stale))"
    # One read of the running rows (their own index: at most the ceiling, the rows
    # claimed ahead and what dead holders left) counts the counted ones and any a dead
    # holder left at the budget.
    row = tx.one(f"SELECT count(*) AS n, coalesce(sum(CASE WHEN {counted} THEN 1 ELSE 0"
                 " END), 0)"
                 f" AS live, coalesce(sum(CASE WHEN NOT {live} AND starts >= :budget THEN 1"
                 f" ELSE 0 END), 0) AS dead FROM fanout_items WHERE {_KEY}"
                 " AND state = 'running'", params)
    dead: list[Row] = []
    if row is not None and row["dead"]:
        dead = tx.all(f"SELECT item_index FROM fanout_items WHERE {_KEY} AND state ="
                      f" 'running' AND NOT {live} AND starts >= :budget", params)
        tx.run(f"UPDATE fanout_items SET state = 'failed', claim_token = NULL,"
               f" error_json = :err, updated_at = :now, finished_at = :now WHERE {_KEY}"
               f" AND state = 'running' AND NOT {live} AND starts >= :budget",
               {**params, "err": INTERRUPTED})
    free = limit - int(row["live"] if row else 0)
    if want is not None:
        free = min(free, want)
    taken: list[Row] = []
    if free > 0:
        among = ""
        if indexes is not None:
            marks, more = in_params("ix", indexes)
            among = f" AND item_index IN {marks}" if indexes else " AND 1 = 0"
            params.update(more)
        taken = tx.all(
            f"SELECT item_index, starts FROM fanout_items WHERE {_OPEN}{among}"
            f" AND (state = 'pending' OR NOT {live})"
            f" ORDER BY item_index LIMIT {int(free)}" + tx.dialect.lock, params)
        tx.many("UPDATE fanout_items SET state = 'running', claim_token = :owner,"
                f" starts = starts + 1, updated_at = :now WHERE {_KEY}"
                " AND item_index = :i",
                [{**key.params(), "owner": owner, "now": now, "i": r["item_index"]}
                 for r in taken])
    return Claimed(tuple((r["item_index"], r["starts"] + 1) for r in taken),
                   tuple(r["item_index"] for r in dead))


def ahead_token(holder: str) -> str:
    """The claim token of the items `holder` claimed ahead (ADR 0014)."""
    return AHEAD_TOKEN + holder


def _take_ahead(tx: Tx, key: ItemKey, holder: str, limit: int, now: int,
                want: int) -> list[HostClaim]:
    """Up to `want` pending items claimed ahead for `holder`'s slots (ADR 0014), lowest
    index first: each starts the moment its slot's item ends, so its claim (and with it
    its start, counted here) is durable long before, and the slot's next item waits for
    no commit. Only while `limit` (the ceiling) items stay pending besides: the last
    items of a map are left to whichever slot of any host is free first."""
    if want <= 0:
        return []
    # The first pending rows, `limit` more than it may take: one read says both which
    # and whether enough stay pending.
    rows = tx.all(f"SELECT item_index, starts FROM fanout_items WHERE {_KEY} AND state ="
                  f" 'pending' ORDER BY item_index LIMIT {int(limit + want)}" + tx.dialect.lock,
                  key.params())
    taken = rows[:max(0, len(rows) - limit)]
    if not taken:
        return []
    tx.many("UPDATE fanout_items SET state = 'running', claim_token = :token,"
            f" starts = starts + 1, updated_at = :now WHERE {_KEY} AND item_index = :i",
            [{**key.params(), "token": ahead_token(holder), "now": now,
              "i": r["item_index"]} for r in taken])
    return [HostClaim(key, r["item_index"], r["starts"] + 1) for r in taken]


def _cancel_open(tx: Tx, key: ItemKey, now: int, error_json: str) -> int:
    return tx.run(f"UPDATE fanout_items SET state = 'cancelled', claim_token = NULL,"
                  " error_json = :error, updated_at = :now, finished_at = :now"
                  f" WHERE {_OPEN}", {**key.params(), "now": now, "error": error_json})


def _wake(tx: Tx, key: ItemKey, now: int) -> None:
    """No item of the visit is open: a parent parked waiting for them is re-queued
    (`auto`: the next host resumes it) and the node is done for the hosts. A parent
    that marked the node waiting but has not parked yet keeps it active: the next
    host's sweep (claim_for_host) wakes it once it has."""
    node = tx.one(f"SELECT waiting FROM fanout_nodes WHERE {_KEY}" + tx.dialect.lock,
                  key.params())
    if node is None:
        return
    if node["waiting"] and not _requeue(tx, key, now):
        return
    tx.run(f"UPDATE fanout_nodes SET active = 0, waiting = 0 WHERE {_KEY}", key.params())


def _wake_early(tx: Tx, key: ItemKey, now: int) -> None:
    """A host claimed the visit's last pending item: a parent parked waiting for its
    items is re-queued now, to wait for the last ones in the process that resumes it
    (`engine/_fanout.py`, `_await`) while they run, instead of at the last one's end.
    The node stays active and waiting: hosts still take over a dead holder's items,
    and the last settle's `_wake` finds the parent no longer parked."""
    node = tx.one(f"SELECT waiting FROM fanout_nodes WHERE {_KEY}", key.params())
    if node is not None and node["waiting"]:
        _requeue(tx, key, now)


def _requeue(tx: Tx, key: ItemKey, now: int) -> bool:
    """Re-queue the visit's parent if it is parked waiting for its items (`auto`: the
    next host resumes it), with the launch notice; False when it is not parked."""
    woken = tx.run("UPDATE workflow_run_queue SET park_mode = 'auto', updated_at = :now"
                   " WHERE run_id = :run AND status = 'parked' AND park_mode = 'explicit'",
                   {"run": key.run_id, "now": now})
    if woken and tx.dialect.notices:
        tx.notify(LAUNCH_CHANNEL, key.run_id)  # an idle host claims it on the notice
    return bool(woken)


def _parent(tx: Tx, run_id: str) -> Row | None:
    """The parent's launch row, locked (Postgres `FOR UPDATE`; SQLite's writer lock):
    every fan-out write takes it first, the order the parent's own writes take."""
    return tx.one("SELECT status, claim_token, claim_expires_at FROM workflow_run_queue"
                  " WHERE run_id = :run" + tx.dialect.lock, {"run": run_id})


def _claim_node(tx: Tx, key: ItemKey, holder: str, want: int, limit: int,
                lease_ms: int, parent: Row | None) -> list[HostClaim]:
    """A host's claim of up to `want` items of one shared visit, in `tx`, after the
    parent's launch row was locked (`parent`, `_parent`); its live claim's items counted
    against the ceiling; a visit whose run ended has its open items ended, and one with
    none open wakes its parked parent."""
    now = tx.now_ms()
    if parent is None or parent["status"] in TERMINAL_STATUSES:
        # Its run ended (cancelled while parked): so do its open items (a holder stops
        # its own at the next renewal).
        _cancel_open(tx, key, now, RUN_ENDED)
        tx.run(f"UPDATE fanout_nodes SET active = 0 WHERE {_KEY}", key.params())
        return []
    if want <= 0:
        if not _any_open(tx, key):
            _wake(tx, key, now)  # the last settle's wake missed a park since
        return []
    live = parent["status"] in CLAIMED_STATUSES and parent["claim_token"] \
        and parent["claim_expires_at"] > now
    got = _take(tx, key, holder, parent["claim_token"] if live else "", limit, now,
                lease_ms, want=want)
    if got.items and tx.one(f"SELECT 1 AS x FROM fanout_items WHERE {_KEY} AND state ="
                            " 'pending' LIMIT 1", key.params()) is None:
        _wake_early(tx, key, now)
    # An item claimed is an item open: only a claim that took none (none pending, the
    # ceiling reached, or the ends it wrote as `interrupted` were the last) looks for
    # an open one, so a slot handing itself its next item pays no read for it.
    if not got.items and not _any_open(tx, key):
        _wake(tx, key, now)  # the visit has no open item: its parked parent goes on
    return [HostClaim(key, index, start) for index, start in got.items]


def _any_open(tx: Tx, key: ItemKey) -> bool:
    return tx.one(f"SELECT 1 AS x FROM fanout_items WHERE {_OPEN} LIMIT 1",
                  key.params()) is not None
