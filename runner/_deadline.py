"""One policy for running user code with a deadline: a pooled thread, abandoned on time-out.

Python cannot kill a thread, so a hook or reconciler that runs past its deadline
(or past a stop request) is abandoned: the caller gets `timed_out` (or `stopped`)
and goes on, the daemon thread keeps running the call, and its result is ignored.
That thread rejoins the pool only if the call ever returns. Threads are reused
rather than started per call (starting one costs more than a whole reconcile pass
on a loaded machine); an idle one exits after `IDLE_EXIT` seconds.

The deadline is read on the `monotonic` the caller passes (the engine's Clock for a
hook, so a node's time budget is the run's). The waiting itself is done on an event
in slices of at most `poll` seconds, never with `Clock.sleep`: the waiter must not
move a test's virtual time, it only watches it.

This module imports only the standard library so every layer may use it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

__all__ = ["POLL", "Call", "Ending", "run_with_deadline"]

T = TypeVar("T")
Ending = Literal["returned", "raised", "timed_out", "stopped"]
POLL = 0.05
IDLE_EXIT = 10.0


@dataclass(frozen=True)
class Call(Generic[T]):
    """How a bounded call ended; `value` when it returned, `error` when it raised."""

    ending: Ending
    value: T | None = None
    error: BaseException | None = None


class _Pool:
    """Reusable daemon threads, each fed jobs through its own queue."""

    def __init__(self, idle_exit: float = IDLE_EXIT) -> None:
        self.idle_exit = idle_exit
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []

    def submit(self, fn: Callable[[], None], done: threading.Event) -> None:
        """Run `fn` on an idle thread (or a new one); `done` is set after it returns."""
        with self._lock:
            jobs = self._idle.pop() if self._idle else None
        if jobs is None:
            jobs = queue.SimpleQueue()
            threading.Thread(target=self._loop, args=(jobs,), daemon=True,
                             name="wfrun-bounded-call").start()

        def job() -> None:
            try:
                fn()
            finally:
                with self._lock:  # idle again before the caller wakes, so it can reuse us
                    self._idle.append(jobs)
                done.set()

        jobs.put(job)

    def _loop(self, jobs: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            try:
                job = jobs.get(timeout=self.idle_exit)
            except queue.Empty:
                with self._lock:
                    if jobs in self._idle:
                        self._idle.remove(jobs)
                        return
                continue  # taken by a caller that is about to hand over a job
            job()


_POOL = _Pool()


def run_with_deadline(fn: Callable[[], T], *, deadline: float | None,
                      monotonic: Callable[[], float],
                      stop: Callable[[], bool] | None = None,
                      poll: float = POLL) -> Call[T]:
    """Run `fn` on a pooled thread until it returns or raises, `monotonic()` reaches
    `deadline` (None: no deadline), or `stop()` says so. A stop request is checked
    before the deadline. `fn` may raise anything (BaseException included): it is
    reported, never re-raised here."""
    values: list[T] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def target() -> None:
        try:
            values.append(fn())
        except BaseException as exc:  # user code: report, never crash the caller
            errors.append(exc)

    _POOL.submit(target, done)
    while not done.is_set():
        if stop is not None and stop():
            return Call("stopped")
        if deadline is not None and monotonic() >= deadline:
            return Call("timed_out")
        wait = poll if deadline is None else min(poll, max(deadline - monotonic(), 0.001))
        done.wait(wait)
    if errors:
        return Call("raised", error=errors[0])
    return Call("returned", value=values[0])
