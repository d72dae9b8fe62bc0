"""A claimed launch's fan-out items in the store (`ItemLedger`, ADR 0008).

The engine's `parallel` and `map` nodes keep their items here: every call is fenced
by the launch's claim token (the store reads the launch row in the same
transaction), so a runner that lost the run changes no item, and its next call
raises `ClaimLost` as a refused bundle write does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from runner.engine.items import ItemEnd, ItemRecord
from runner.errors import ClaimLost
from runner.store import LostRace
from runner.store.domain.fanout import FanoutItems, ItemEnding, ItemKey


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"),
                                                  ensure_ascii=False, allow_nan=False)


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _endings(ends: Sequence[ItemEnd]) -> list[ItemEnding]:
    return [ItemEnding(e.index, e.outcome,  # type: ignore[arg-type]
                       _dump(e.output), _dump(e.error)) for e in ends]


class StoreItems:
    """`ItemLedger` over `store.fanout` for one claimed launch."""

    def __init__(self, fanout: FanoutItems, run_id: str, claim_token: str) -> None:
        self._fanout = fanout
        self._run_id = run_id
        self._owner = claim_token

    def _key(self, node: str, visit: int) -> ItemKey:
        return ItemKey(self._run_id, node, visit)

    def _held(self, result: Any) -> Any:
        if isinstance(result, LostRace):
            raise ClaimLost(f"lost the claim on run '{self._run_id}' ({result.reason}); "
                            "another runner owns it")
        return result

    def open(self, node: str, visit: int, count: int) -> None:
        self._held(self._fanout.open(self._key(node, visit), count, owner=self._owner))

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

    def items(self, node: str, visit: int) -> list[ItemRecord]:
        return [ItemRecord(i.index, i.state, i.starts, _load(i.output_json),
                           _load(i.error_json))
                for i in self._fanout.items(self._key(node, visit))]
