"""A claimed launch's fan-out items in the store (`ItemLedger`, ADR 0008).

The engine's `parallel` and `map` nodes keep their items here: every call is fenced
by the launch's claim token (the store reads the launch row in the same
transaction), so a runner that lost the run changes no item, and its next call
raises `ClaimLost` as a refused bundle write does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from runner._leases import LEASE_SECONDS
from runner.engine import RunControl, RunOutcome, RunReader
from runner.engine._items import ItemEnd, ItemRecord
from runner.engine._rerun import ItemRows
from runner.errors import ClaimLost, ConflictError, InputError, NotFoundError
from runner.store import TERMINAL_STATUSES, LaunchBook, LaunchRecord, LostRace, Store
from runner.store.domain._fanout import (
    FanoutItem,
    FanoutItems,
    ItemEnding,
    ItemKey,
    SharedNode,
)

from ._errors import PreflightError


class _Launcher(Protocol):
    """What of the `LaunchCoordinator` a child run needs (it imports this module)."""

    store: Store
    runner_id: str
    lease_seconds: float
    reader: RunReader

    def prepare(self, ref: str, run_input: Any = None, *, affinity_runner_id: str | None,
                run_id: str | None, claim_by: str | None,
                lease_seconds: float) -> LaunchRecord: ...

    def claim(self, run_id: str, *, dead_runner: str | None = None) -> LaunchRecord: ...

    def execute(self, record: LaunchRecord, *,
                control: RunControl | None = None) -> RunOutcome | None: ...


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"),
                                                  ensure_ascii=False, allow_nan=False)


def _load_all(texts: Sequence[str | None]) -> list[Any]:
    """Each stored JSON text decoded (None for None), in one parse: a 1,000-item map's
    end decoded its rows' outputs and logs one `json.loads` each, twice the time."""
    present = [t for t in texts if t is not None]
    values = iter(json.loads("[" + ",".join(present) + "]")) if present else iter(())
    return [None if t is None else next(values) for t in texts]


def _endings(ends: Sequence[ItemEnd]) -> list[ItemEnding]:
    return [ItemEnding(e.index, e.outcome,  # type: ignore[arg-type]
                       _dump(e.output), _dump(e.error)) for e in ends]


class StoreItems:
    """`ItemLedger` over `store.fanout` for one claimed launch."""

    def __init__(self, fanout: FanoutItems, run_id: str, claim_token: str, *,
                 lease_seconds: float = LEASE_SECONDS, hosted: bool = False) -> None:
        self._fanout = fanout
        self._run_id = run_id
        self._owner = claim_token
        self._lease_ms = max(int(lease_seconds * 1000), 1)  # a shared node's item lease
        self._hosted = hosted  # the run's runner is a host: it parks while hosts run items

    def _key(self, node: str, visit: int) -> ItemKey:
        return ItemKey(self._run_id, node, visit)

    def _held(self, result: Any) -> Any:
        if isinstance(result, LostRace):
            raise ClaimLost(f"lost the claim on run '{self._run_id}' ({result.reason}); "
                            "another runner owns it")
        return result

    def open(self, node: str, visit: int, count: int, *, share: int | None = None,
             fail_fast: bool = False) -> None:
        shared = None if share is None else SharedNode(share, self._lease_ms, fail_fast)
        self._held(self._fanout.open(self._key(node, visit), count, owner=self._owner,
                                     shared=shared))

    def wait_for_hosts(self, node: str, visit: int) -> bool:
        if not self._hosted:
            return False
        waiting: bool = self._held(self._fanout.wait_for_hosts(self._key(node, visit),
                                                               owner=self._owner))
        return waiting

    def claim(self, node: str, visit: int, limit: int,
              settling: Sequence[ItemEnd] = ()) -> tuple[list[tuple[int, int]], list[int]]:
        got = self._held(self._fanout.claim(self._key(node, visit), owner=self._owner,
                                            limit=limit, settling=_endings(settling)))
        return list(got.items), list(got.interrupted)

    def settle(self, node: str, visit: int, ends: Sequence[ItemEnd], *,
               claimed: bool = True) -> int:
        rows = _endings(ends)
        left: int = self._held(self._fanout.settle(self._key(node, visit), rows,
                                                   owner=self._owner, claimed=claimed))
        return left

    def cancel_open(self, node: str, visit: int, error: dict[str, Any]) -> int:
        n: int = self._held(self._fanout.cancel_open(self._key(node, visit), owner=self._owner,
                                                     error_json=_dump(error) or "{}"))
        return n

    def release(self, node: str, visit: int, indexes: Sequence[int]) -> None:
        self._held(self._fanout.release(self._key(node, visit), indexes, owner=self._owner))

    def logs(self, node: str, visit: int,
             indexes: Sequence[int] | None = None) -> list[tuple[int, str, dict[str, Any]]]:
        rows = self._fanout.logs(self._key(node, visit), indexes)
        return [(g.index, g.attempt, log)
                for g, log in zip(rows, _load_all([g.log_json for g in rows]), strict=True)]

    def items(self, node: str, visit: int,
              indexes: Sequence[int] | None = None) -> list[ItemRecord]:
        return _records(self._fanout.items(self._key(node, visit), indexes))


def _records(rows: Sequence[FanoutItem]) -> list[ItemRecord]:
    outputs = _load_all([i.output_json for i in rows])
    errors = _load_all([i.error_json for i in rows])
    return [ItemRecord(i.index, i.state, i.starts, output, error)
            for i, output, error in zip(rows, outputs, errors, strict=True)]


def item_rows(fanout: FanoutItems) -> ItemRows:
    """A rerun's read of an ended run's item rows (`engine/_rerun.py`): no claim, only
    rows; the run has ended, so nothing writes them any more."""
    def read(run_id: str, node: str, visit: int) -> list[ItemRecord]:
        return _records(fanout.items(ItemKey(run_id, node, visit)))
    return read


class LaunchChildren:
    """`ChildRuns`: a fan-out's `workflow:` body as a linked child run. The child is a
    launch row and a bundle of its own (`wfrun runs`, `show`, `logs` see it), run in this
    process on the item's thread under the item's control. Its id is fixed by the item,
    so a resumed parent finds the child it started: one that ended is read, not run
    again; one left behind by a dead runner is taken over and resumed."""

    def __init__(self, coordinator: _Launcher) -> None:
        self._c = coordinator

    def run(self, workflow: str, value: Any, run_id: str,
            control: Any) -> tuple[str, Any, dict[str, Any] | None]:
        c = self._c
        row = LaunchBook(c.store).get(run_id)
        if row is not None and row.status in TERMINAL_STATUSES:
            return self._ended(row)
        try:
            if row is None:
                record = c.prepare(workflow, value, run_id=run_id,
                                   affinity_runner_id=c.runner_id, claim_by=c.runner_id,
                                   lease_seconds=c.lease_seconds)
            else:
                # Left by the parent's last runner, which lost the parent: it is dead (or
                # fenced), so its claim on the child is taken over too.
                dead = row.runner_id if row.runner_id != c.runner_id else None
                record = c.claim(run_id, dead_runner=dead)
        except PreflightError as exc:
            return "failed", None, {"code": exc.code, "message": exc.message}
        except (ConflictError, InputError, NotFoundError) as exc:
            return "failed", None, {"code": "child_unavailable", "message": str(exc)[:500]}
        outcome = c.execute(record, control=control)
        if outcome is None:
            ended = LaunchBook(c.store).get(run_id)
            if ended is None or ended.status not in TERMINAL_STATUSES:
                return "parked", None, None
            return self._ended(ended)
        if outcome.parked:
            return "parked", None, None
        return _from_status(outcome.status), outcome.final_output, outcome.error

    def _ended(self, row: LaunchRecord) -> tuple[str, Any, dict[str, Any] | None]:
        if row.status == "done" and row.ending == "completed":
            return "ok", self._c.reader.final_output(row.run_id), None
        if row.status == "done":
            return "failed", None, {"code": "child_waiting", "message": (
                f"child run {row.run_id} waits at a checkpoint; a branch cannot wait")}
        if row.status == "cancelled":
            return "cancelled", None, {"code": "cancelled", "message": f"child run "
                                       f"{row.run_id} was cancelled"}
        return "failed", None, {"code": row.error_code or "child_failed",
                                "message": row.error_message or f"child run {row.run_id} "
                                "failed"}


def _from_status(status: str) -> str:
    return {"completed": "ok", "timed_out": "timed_out", "cancelled": "cancelled"}.get(
        status, "failed")
