"""Reconcile passes in batches, backend-neutral (issue 15: controllers that scale with
workers). The same rules as one `claim_next` and one `complete` per pass
(controller_queue.py), with fewer commits:

- `claim_batch` claims up to `limit` keys in one transaction and reads their
  resources in it (one statement), so a pass need not read its row again;
- `finish_passes` ends several passes in one transaction (the manager's group
  commit: the ends of every worker that finished while the previous commit was
  being made). Each end is checked on its own: its claim must still hold (else
  `LostRace`, nothing of it written); its status compare-and-swap comes next (a
  lost CAS records `conflict_events` and requeues, the stale status discarded);
  then its events and its queue completion. One end never spoils another.

A crash before the commit loses the batch's ends as a crash before one `complete`
would: the claims expire and the keys are reconciled again (level-based).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from runner.store._connector import Transaction as Tx
from runner.store._controller_interface import (
    ClaimedPass,
    EventSpec,
    PassEnd,
    PassResult,
    QueueItem,
)
from runner.store._records import LostRace, check_id, lease_ms
from runner.store.domain._controller_events import insert_events
from runner.store.domain._controller_queue import (
    KeyedQueue,
    bounded_error,
    checked_outcome,
    claim_rows,
    delay_ms,
    end_claim,
    event_rows,
    event_texts,
    holder_guard,
    keys_clause,
    load_item,
    queue_item_from_row,
)
from runner.store.domain._controller_resources import (
    encode_status,
    resource_from_row,
    swap_status,
)

#: The most keys one batch claim takes.
MAX_BATCH = 256


class _Prepared:
    """One PassEnd checked and encoded before the transaction opens."""

    __slots__ = ("end", "error", "events", "status_json", "wait")

    def __init__(self, end: PassEnd) -> None:
        checked_outcome(end.outcome)
        self.end = end
        self.wait = delay_ms(end.delay)
        self.error = bounded_error(end.error)
        self.events = event_texts(end.controller, end.key, end.events)
        self.status_json: str | None = None
        if end.status is not None:
            if end.expected_version is None:
                raise ValueError("a status write names the resource_version it read")
            self.status_json = encode_status(end.controller, end.key, end.status)


def _finish_one(tx: Tx, p: _Prepared) -> PassResult:
    end = p.end
    row = load_item(tx, end.controller, end.key)
    lost = holder_guard(row, end.controller, end.key, end.claim_token)
    if lost is not None:
        return lost
    assert row is not None
    if p.status_json is not None:
        assert end.expected_version is not None
        written = swap_status(tx, end.controller, end.key, end.expected_version,
                              p.status_json)
        if isinstance(written, LostRace):
            conflict = event_texts(end.controller, end.key, end.conflict_events)
            insert_events(tx, event_rows(tx, end.controller, end.key, conflict))
            end_claim(tx, row, end.claim_token, "requeue", 0, None)
            return "conflict"
    insert_events(tx, event_rows(tx, end.controller, end.key, p.events))
    end_claim(tx, row, end.claim_token, end.outcome, p.wait, p.error)
    return "finished"


class PassQueue(KeyedQueue):
    """`ReconcileQueue` on any backend, with the batched pass operations."""

    def claim_batch(self, *, runner_id: str, lease_seconds: float, limit: int,
                    controllers: Iterable[str] | None = None,
                    claim_event: Callable[[QueueItem], EventSpec] | None = None
                    ) -> list[ClaimedPass]:
        check_id(runner_id, "runner_id")
        if not isinstance(limit, int) or not 1 <= limit <= MAX_BATCH:
            raise ValueError(f"a batch claim takes 1 to {MAX_BATCH} keys, not {limit!r}")
        lease = lease_ms(lease_seconds)
        with self._c.write() as tx:
            rows = claim_rows(tx, runner_id=runner_id, lease=lease, limit=limit,
                              controllers=controllers, exclude=())
            if not rows:
                return []
            items = [queue_item_from_row(row) for row in rows]
            which, params = keys_clause("r", ((i.controller, i.key) for i in items))
            found = {(r["controller"], r["resource_key"]): r for r in tx.all(
                f"SELECT * FROM resources WHERE {which}", params)}
            if claim_event is not None:
                events: list[dict[str, object]] = []
                for item in items:
                    texts = event_texts(item.controller, item.key, [claim_event(item)])
                    events.extend(event_rows(tx, item.controller, item.key, texts))
                insert_events(tx, events)
        return [ClaimedPass(item, None if (row := found.get((item.controller, item.key)))
                            is None else resource_from_row(row)) for item in items]

    def finish_passes(self, ends: Sequence[PassEnd]) -> list[PassResult]:
        results: list[PassResult | None] = [None] * len(ends)
        prepared: list[tuple[int, _Prepared]] = []
        for i, end in enumerate(ends):
            try:
                prepared.append((i, _Prepared(end)))
            except ValueError as exc:
                results[i] = exc
        if prepared:
            with self._c.write() as tx:
                for i, p in prepared:
                    results[i] = _finish_one(tx, p)
        return [r for r in results if r is not None]
