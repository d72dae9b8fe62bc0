"""Group commit: the ends of many passes in one store transaction.

A worker that finishes a pass hands its end to `GroupCommit.submit`. If no commit
is being made, that worker makes one now with every end handed in so far, and
keeps committing while more ends arrive; if one is being made, the worker goes on
to its next key at once and its end rides in the next commit. So one worker alone
commits every pass before its next (as without this), and several busy workers
share each commit instead of queueing for the store's writer lock one by one.

What an uncommitted end means for recovery: its key is still claimed (nobody else
may reconcile it until the end commits or the claim's lease runs out), and the
pass's effects were recorded in their own transactions before the provider was
called. A crash that loses ends loses them as a crash just before one `complete`
would: the claims expire and the keys are reconciled again, level-based. `flush`
waits until every end handed in so far is committed (or its commit failed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class GroupCommit(Generic[T, R]):
    """Batches `submit`ted items into calls of `commit(items) -> results` (in order);
    `done(item, result)` sees each result, `failed(items, exc)` a failed commit."""

    def __init__(self, commit: Callable[[Sequence[T]], Sequence[R]], *,
                 done: Callable[[T, R], None], failed: Callable[[Sequence[T], Exception], None],
                 max_batch: int = 64, max_pending: int = 512) -> None:
        self._commit = commit
        self._done = done
        self._failed = failed
        self._max = max_batch
        self._max_pending = max_pending
        self._cond = threading.Condition()
        self._pending: list[T] = []
        self._committing = False
        self.commits = 0  # transactions made (the bench prints ends per commit)
        self.items = 0

    def submit(self, item: T) -> None:
        with self._cond:
            while len(self._pending) >= self._max_pending:  # backpressure: bounded memory
                self._cond.wait()
            self._pending.append(item)
            if self._committing:
                return  # the committing thread takes it in its next transaction
            self._committing = True
        self._drain()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until nothing is pending or being committed; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._committing,
                                       timeout)

    def _drain(self) -> None:
        while True:
            with self._cond:
                batch = self._pending[:self._max]
                del self._pending[:self._max]
                if not batch:
                    self._committing = False
                    self._cond.notify_all()
                    return
                self._cond.notify_all()  # room for submitters held by backpressure
            try:
                results = self._commit(batch)
                if len(results) != len(batch):
                    raise RuntimeError(f"a group commit returned {len(results)} results "
                                       f"for {len(batch)} items")
            except Exception as exc:
                self._failed(batch, exc)
            else:
                for item, result in zip(batch, results, strict=True):
                    self._done(item, result)
            with self._cond:
                self.commits += 1
                self.items += len(batch)
