"""Group commit: requests that arrive together share one batch (one commit, one sync).

Each caller `submit`s its job and waits for its own result. No thread is kept for
it: a caller that finds a round free becomes that round's committer, takes every
job pending (its own first), runs them as one batch (`run`: one transaction, so
one fsync, for all) and returns with its own result. Callers that arrive while
no round is free wait, each on a lock of its own: when a round ends, its
committer wakes only the threads it has something for, the next round's committer
first (the oldest waiting caller: it takes every job pending then) and then the
callers whose results it holds. No thread wakes to find nothing to do: under a
storm, a condition's `notify_all` woke every waiting request thread at each
round's end, and each had to win the GIL only to go back to sleep, queued ahead of
the one thread that could commit.

A lone caller pays nothing extra (its batch of one starts at once), and while one
commit waits for the disk the next batch fills: under a burst the syncs per
request fall towards one per round instead of one each (a webhook storm's
deliveries: _webhooks.py).

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
    __slots__ = ("done", "error", "job", "lead", "result", "wake")

    def __init__(self, job: J) -> None:
        self.job = job
        self.result: R | None = None
        self.error: BaseException | None = None
        self.done = False
        self.lead = False  # handed the next round by the last one's committer
        # Held until its thread has something to do (its result, or a round to commit).
        self.wake = threading.Lock()
        self.wake.acquire()


class GroupCommit(Generic[J, R]):
    """Runs `run(jobs) -> results` (one result per job, in order) over the jobs
    submitted together; an exception `run` raises is raised to every caller of
    its round."""

    def __init__(self, run: Callable[[Sequence[J]], Sequence[R]], *,
                 max_batch: int = MAX_BATCH, rounds: int = 1) -> None:
        self._run = run
        self._max = max(1, max_batch)
        self._rounds = max(1, rounds)
        self._lock = threading.Lock()
        self._pending: list[_Slot[J, R]] = []  # not taken by a round yet
        self.running = 0  # rounds committing now, or handed to a caller not yet awake
        self.rounds = 0  # rounds committed (the bench and tests read it)

    def submit(self, job: J) -> R:
        slot: _Slot[J, R] = _Slot(job)
        with self._lock:
            self._pending.append(slot)
            slot.lead = self.running < self._rounds
            if slot.lead:
                self.running += 1  # this caller commits a round now
        if not slot.lead:
            try:
                slot.wake.acquire()  # its result, or the next round to commit
            except BaseException:  # a signal's exception (only the main thread gets one)
                self._leave(slot)
                raise
        if not slot.done:
            self._commit(slot)
        if slot.error is not None:
            raise slot.error
        return slot.result  # type: ignore[return-value]  # set by its round

    def _commit(self, slot: _Slot[J, R]) -> None:
        """Commit a round whose first job is `slot`'s, then hand the next round on."""
        with self._lock:
            others = [s for s in self._pending if s is not slot and not s.lead]
            batch = [slot, *others[:self._max - 1]]
            taken = {id(s) for s in batch}
            self._pending = [s for s in self._pending if id(s) not in taken]
        results: Sequence[R] = ()
        error: BaseException | None = None
        try:
            results = self._run([s.job for s in batch])
            if len(results) != len(batch):
                error = RuntimeError(f"a group commit of {len(batch)} gave "
                                     f"{len(results)} results")
        except BaseException as exc:  # every caller of the round hears of it
            error = exc
        for n, s in enumerate(batch):
            if error is None:
                s.result = results[n]
            s.error = error
            s.done = True
        with self._lock:
            self.rounds += 1
            handed = self._hand_on()
        if handed is not None:  # the next round first: the disk is the long wait
            handed.wake.release()
        for s in batch:
            if s is not slot:
                s.wake.release()

    def _hand_on(self) -> _Slot[J, R] | None:
        """A round ended or was given up (under the lock): the oldest waiting caller
        is handed it (it takes every job pending when it wakes), one caller at a time;
        a round not handed on frees its place."""
        waiting = [s for s in self._pending if not s.lead]
        handed = waiting[0] if waiting and not any(s.lead for s in self._pending) else None
        if handed is not None:
            handed.lead = True
        else:
            self.running -= 1
        return handed

    def _leave(self, slot: _Slot[J, R]) -> None:
        """A caller stops waiting (interrupted). A job no round has taken is dropped
        (nobody would hear its result: the sender retries), and a round it was handed
        goes on to the next caller: kept, it would stall every later caller."""
        handed = None
        with self._lock:
            if slot.done or all(s is not slot for s in self._pending):
                return  # answered, or in a round under way: that round hands on
            self._pending = [s for s in self._pending if s is not slot]
            if slot.lead:
                handed = self._hand_on()
        if handed is not None:
            handed.wake.release()
