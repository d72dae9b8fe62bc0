"""Where a fan-out node's items are durable (ADR 0008): the `ItemLedger` protocol the
engine runs `parallel` and `map` nodes against, and `MemoryLedger` for an engine
without a store. The launch layer's `StoreItems` keeps them in the store's
`fanout_items` table, fenced by the run's claim.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class ItemEnd:
    index: int
    outcome: str  # ok | failed | timed_out | cancelled
    output: Any = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class ItemRecord:
    index: int
    state: str  # pending | running | ok | failed | timed_out | cancelled
    starts: int
    output: Any = None
    error: dict[str, Any] | None = None


class ItemLedger(Protocol):
    """Where a fan-out node's items are durable. Every call raises `ClaimLost` when the
    caller no longer holds the run."""

    def open(self, node: str, visit: int, count: int, *, share: int | None = None,
             fail_fast: bool = False) -> None:
        """Make the visit's `count` rows (idempotent). `share`: the node's ceiling, when
        any host may run its items (ADR 0008 phase 2); a ledger without hosts ignores it."""
        ...

    def wait_for_hosts(self, node: str, visit: int) -> bool:
        """Whether the run should park until hosts have ended the (shared) node's open
        items: True only where hosts run them (the run itself runs under one)."""
        ...

    def claim(self, node: str, visit: int, limit: int,
              settling: Sequence[ItemEnd] = ()) -> tuple[list[tuple[int, int]], list[int]]:
        """Record `settling` (ended claimed items), then claim: (the items claimed as
        (index, start number), the items ended `interrupted`), in one write."""
        ...

    def settle(self, node: str, visit: int, ends: Sequence[ItemEnd], *,
               claimed: bool = True) -> int:
        """Record endings; returns how many items of the visit are still open."""
        ...

    def cancel_open(self, node: str, visit: int, error: dict[str, Any]) -> int: ...

    def release(self, node: str, visit: int, indexes: Sequence[int]) -> None:
        """Running items a clean park stopped go back to pending, uncounted."""
        ...

    def items(self, node: str, visit: int,
              indexes: Sequence[int] | None = None) -> list[ItemRecord]:
        """The visit's rows in index order (only `indexes`, when given)."""
        ...

    def logs(self, node: str, visit: int,
             indexes: Sequence[int] | None = None) -> list[tuple[int, str, dict[str, Any]]]:
        """The logs of items other hosts ran: (index, attempt, `node_log` payload); only
        those of `indexes`, when given."""
        ...


class MemoryLedger:
    """An `ItemLedger` in memory: an engine run without a store (nothing survives the
    process, as nothing of such a run's launch does)."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def wait_for_hosts(self, node: str, visit: int) -> bool:
        return False  # no host sees these rows

    def open(self, node: str, visit: int, count: int, *, share: int | None = None,
             fail_fast: bool = False) -> None:
        with self._lock:
            self._rows.setdefault((node, visit), [
                {"state": "pending", "starts": 0, "output": None, "error": None}
                for _ in range(count)])

    def claim(self, node: str, visit: int, limit: int,
              settling: Sequence[ItemEnd] = ()) -> tuple[list[tuple[int, int]], list[int]]:
        if settling:
            self.settle(node, visit, settling)
        with self._lock:
            rows = self._rows[(node, visit)]
            free = limit - sum(r["state"] == "running" for r in rows)
            got: list[tuple[int, int]] = []
            for i, r in enumerate(rows):
                if len(got) >= free:
                    break
                if r["state"] == "pending":
                    r["state"], r["starts"] = "running", r["starts"] + 1
                    got.append((i, r["starts"]))
            return got, []

    def settle(self, node: str, visit: int, ends: Sequence[ItemEnd], *,
               claimed: bool = True) -> int:
        with self._lock:
            rows = self._rows[(node, visit)]
            for end in ends:
                r = rows[end.index]
                if r["state"] == ("running" if claimed else "pending"):
                    r.update(state=end.outcome, output=end.output, error=end.error)
                    r["starts"] += 0 if claimed else 1
            return sum(r["state"] in ("pending", "running") for r in rows)

    def cancel_open(self, node: str, visit: int, error: dict[str, Any]) -> int:
        with self._lock:
            n = 0
            for r in self._rows.get((node, visit), []):
                if r["state"] in ("pending", "running"):
                    r.update(state="cancelled", error=error)
                    n += 1
            return n

    def release(self, node: str, visit: int, indexes: Sequence[int]) -> None:
        with self._lock:
            rows = self._rows.get((node, visit), [])
            for i in indexes:
                if rows[i]["state"] == "running":
                    rows[i]["state"], rows[i]["starts"] = "pending", rows[i]["starts"] - 1

    def logs(self, node: str, visit: int,
             indexes: Sequence[int] | None = None) -> list[tuple[int, str, dict[str, Any]]]:
        return []  # only this process runs them

    def items(self, node: str, visit: int,
              indexes: Sequence[int] | None = None) -> list[ItemRecord]:
        wanted = None if indexes is None else set(indexes)
        with self._lock:
            return [ItemRecord(i, r["state"], r["starts"], r["output"], r["error"])
                    for i, r in enumerate(self._rows.get((node, visit), []))
                    if wanted is None or i in wanted]


class ItemEnds:
    """Items of shared visits that ended in this process (a host's slots say so): a
    parent waiting here for its last items (`_fanout.py`) wakes at each one instead of
    at its next look at the store. Only a hint: items other hosts run are seen by that
    look."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[tuple[str, str, int], list[threading.Event]] = {}

    def watch(self, run_id: str, node: str, visit: int) -> threading.Event:
        """An event set at each item of the visit that ends here (`forget` it after)."""
        event = threading.Event()
        with self._lock:
            self._waiting.setdefault((run_id, node, visit), []).append(event)
        return event

    def forget(self, run_id: str, node: str, visit: int, event: threading.Event) -> None:
        with self._lock:
            events = self._waiting.get((run_id, node, visit), [])
            if event in events:
                events.remove(event)
            if not events:
                self._waiting.pop((run_id, node, visit), None)

    def ended(self, run_id: str, node: str, visit: int) -> None:
        with self._lock:
            events = list(self._waiting.get((run_id, node, visit), ()))
        for event in events:
            event.set()


ITEM_ENDS = ItemEnds()


class ChildRuns(Protocol):
    """`workflow:` bodies as linked child runs (the launch layer's: each one its own
    launch row and bundle). `run` starts the child `run_id` (or, after a crash, resumes
    it or reads how it ended) under `control` and returns how it ended:
    (outcome: ok | failed | timed_out | cancelled | parked, final output, error)."""

    def run(self, workflow: str, value: Any, run_id: str,
            control: Any) -> tuple[str, Any, dict[str, Any] | None]: ...
