"""Group commit: requests that arrive together share one batch (one commit, one sync).

Each caller `submit`s its job and waits for its own result. No thread is kept for
it: the first caller that finds no batch running becomes this round's committer,
takes every job pending (its own among them), runs them as one batch (`run`: one
transaction, so one fsync, for all), hands each caller its result, and returns
with its own. Callers that arrived meanwhile wait; when the round ends, the first
of them to wake commits the next round with all of theirs. A lone caller pays
nothing extra (its batch of one starts at once), and while one commit waits for
the disk the next batch fills: under a burst the syncs per request fall towards
one per round instead of one each (a webhook storm's deliveries: _webhooks.py).

`rounds`: how many rounds may commit at once. One where the store's writers go
one at a time anyway (SQLite); more where they make progress side by side
(Postgres: each round is a connection's round trips, and the server already
shares its WAL flushes), so batches form only once that many are under way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

J = TypeVar("J")
R = TypeVar("R")

#: The most jobs one round takes (the rest wait for the next): bounds one
#: transaction's length and so the wait of the first caller in it.
MAX_BATCH = 200


class _Slot(Generic[J, R]):
    __slots__ = ("done", "error", "job", "result", "taken")

    def __init__(self, job: J) -> None:
        self.job = job
        self.result: R | None = None
        self.error: BaseException | None = None
        self.done = False
        self.taken = False  # in a round under way


class GroupCommit(Generic[J, R]):
    """Runs `run(jobs) -> results` (one result per job, in order) over the jobs
    submitted together; an exception `run` raises is raised to every caller of
    its round."""

    def __init__(self, run: Callable[[Sequence[J]], Sequence[R]], *,
                 max_batch: int = MAX_BATCH, rounds: int = 1) -> None:
        self._run = run
        self._max = max(1, max_batch)
        self._rounds = max(1, rounds)
        self._cond = threading.Condition()
        self._pending: list[_Slot[J, R]] = []
        self.running = 0  # rounds committing now
        self.rounds = 0  # rounds committed (the bench and tests read it)

    def submit(self, job: J) -> R:
        slot: _Slot[J, R] = _Slot(job)
        with self._cond:
            self._pending.append(slot)
        while True:
            with self._cond:
                # A slot another round took waits for that round's end.
                while not slot.done and (slot.taken or self.running >= self._rounds):
                    self._cond.wait()
                if slot.done:
                    break
                self.running += 1  # this caller commits a round
                batch = self._pending[:self._max]
                del self._pending[:self._max]
                for taken in batch:
                    taken.taken = True
            self._commit(batch)
        if slot.error is not None:
            raise slot.error
        return slot.result  # type: ignore[return-value]  # set by its round

    def _commit(self, batch: list[_Slot[J, R]]) -> None:
        results: Sequence[R] = ()
        error: BaseException | None = None
        try:
            results = self._run([s.job for s in batch])
            if len(results) != len(batch):
                error = RuntimeError(f"a group commit of {len(batch)} gave "
                                     f"{len(results)} results")
        except BaseException as exc:  # every caller of the round hears of it
            error = exc
        with self._cond:
            for n, s in enumerate(batch):
                if error is None:
                    s.result = results[n]
                s.error = error
                s.done = True
            self.rounds += 1
            self.running -= 1
            self._cond.notify_all()
