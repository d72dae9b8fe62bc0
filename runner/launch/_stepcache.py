"""The engine's step cache (`cache:`, engine/_cache.py) on the store's `step_cache` table.

Best effort both ways: a store that fails a read is a miss and one that fails a
write keeps nothing; the node's own result is what counts, so neither fails a run.
"""

from __future__ import annotations

import logging
from typing import Any

from runner.engine._cache import CachedResult
from runner.store import Store, StoreError

log = logging.getLogger(__name__)


class StoreStepCache:
    def __init__(self, store: Store) -> None:
        self.store = store

    def get(self, key: str) -> CachedResult | None:
        try:
            entry = self.store.step_cache.get(key)
        except StoreError as exc:
            log.warning("step cache: a lookup failed, the node runs (%s)", exc.message)
            return None
        if entry is None:
            return None
        return CachedResult(output=entry.output, run_id=entry.run_id,
                            created_at=entry.created_at)

    def put(self, key: str, *, workflow: str, node_id: str, run_id: str, output: Any,
            ttl: float) -> None:
        try:
            kept = self.store.step_cache.put(key, workflow=workflow, node_id=node_id,
                                             run_id=run_id, output=output,
                                             ttl_ms=max(1, round(ttl * 1000)))
        except StoreError as exc:
            log.warning("step cache: the result of %s was not kept (%s)", node_id, exc.message)
            return
        if not kept:
            log.info("step cache: the result of %s is too large to keep", node_id)
