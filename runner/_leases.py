"""The lease: how long a claim lasts, how often it is renewed, and the one renewer.

`LEASE_SECONDS` is the one place the lease length is written (a launch's
activation, a controller pass, a turn intent, a notification's delivery); every
renewal interval is `renew_every(lease)`, a third of it, so two renewals in a row
can fail (or stall) before the lease runs out. tests/unit/test_policy_homes.py
fails on a second literal.

One lease renewer: a thread that keeps every registered claim alive (issue 9).

A `Renewer` serves any number of held items (a launch's activation, a controller
pass's claim) from one thread, started on the first `add`. Every `tick` it visits
each item: `poll(item)` first when given (the launch keeper reads cancel requests
there), then, once `renew_every` has passed on the Clock since the item was added
or last renewed, `renew(item)`:

    True    renewed; the next renewal is due `renew_every` later
    False   lost (taken over, expired): the item is dropped and `on_lost(item)` called
    None    could not tell (a busy store): tried again on the next tick

Give it `renew_every(lease)` (or less).

Due times are read on the Clock (`clock.monotonic()`); the thread paces itself on
its own event, never with `Clock.sleep`: a background thread must not move a
test's virtual time (a `FakeClock` sleep advances it for every reader), so under a
FakeClock renewals come due exactly when the test moves the clock. With no item
held the thread lingers `linger` seconds for the next one (a thread per claim cost
milliseconds on a loaded two-core machine), then exits; the next `add` starts it
again.

This module imports only the standard library and `runner.clock`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from runner.clock import Clock

if TYPE_CHECKING:
    import logging

__all__ = ["LEASE_SECONDS", "Renewer", "renew_every"]


def _log() -> logging.Logger:
    """This module's logger. `logging` loads only when something is logged: the
    store's read path imports this module on every command (cold start)."""
    import logging

    return logging.getLogger(__name__)

T = TypeVar("T")

#: How long a claim lasts without renewal. A runner that dies is taken over after
#: this long; a live one renews every third of it.
LEASE_SECONDS = 30.0


def renew_every(lease_seconds: float = LEASE_SECONDS) -> float:
    """How often a holder renews a lease of `lease_seconds`: a third of it, so two
    renewals in a row can fail (a busy store, a stalled thread) before it expires."""
    return lease_seconds / 3


@dataclass(eq=False)
class _Held(Generic[T]):
    item: T
    due: float  # on clock.monotonic()


class Renewer(Generic[T]):
    def __init__(self, clock: Clock, renew: Callable[[T], bool | None],
                 on_lost: Callable[[T], None], *, renew_every: float,
                 tick: float | None = None, poll: Callable[[T], None] | None = None,
                 linger: float = 0.0, name: str = "wfrun-lease") -> None:
        if renew_every <= 0:
            raise ValueError("renew_every must be positive")
        self.clock = clock
        self.renew_every = renew_every
        self.tick = min(tick, renew_every) if tick is not None else renew_every / 2
        self.linger = linger
        self.name = name
        self._renew = renew
        self._on_lost = on_lost
        self._poll = poll
        self._lock = threading.Lock()
        self._held: dict[int, _Held[T]] = {}
        self._wake = threading.Event()  # set by `add`: ends an idle linger
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    # -- registration ----------------------------------------------------------------
    def add(self, item: T) -> None:
        """Renew `item` every `renew_every` from now until `remove` (or a lost renewal)."""
        held = _Held(item, self.clock.monotonic() + self.renew_every)
        with self._lock:
            self._held[id(item)] = held
            self._wake.set()
            if self._thread is None and not self._closed.is_set():
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name=self.name)
                self._thread.start()

    def remove(self, item: T) -> None:
        with self._lock:
            self._held.pop(id(item), None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    @property
    def running(self) -> bool:
        """Whether the thread is alive (serving items or lingering for the next)."""
        with self._lock:
            return self._thread is not None

    def close(self, timeout: float | None = None) -> None:
        """Stop the thread (items still held are no longer renewed)."""
        self._closed.set()
        self._wake.set()
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # -- the thread ------------------------------------------------------------------
    def _loop(self) -> None:
        me = threading.current_thread()
        try:
            while not self._closed.is_set():
                with self._lock:
                    idle = not self._held
                    if idle:
                        self._wake.clear()
                if idle:
                    # Waiting for work, not for time: a real wait, so nothing is paced.
                    if self.linger > 0 and self._wake.wait(self.linger):
                        continue
                    with self._lock:
                        if not self._held:
                            # Under the lock, so an `add` now starts a new thread.
                            self._thread = None
                            return
                    continue
                if self._closed.wait(self.tick):  # pacing only; due times are on the Clock
                    return
                with self._lock:
                    held = list(self._held.values())
                for entry in held:
                    with self._lock:
                        if self._held.get(id(entry.item)) is not entry:
                            continue  # removed (its run or pass ended) meanwhile
                    self._visit(entry)
        finally:
            with self._lock:
                if self._thread is me:
                    self._thread = None

    def _visit(self, entry: _Held[T]) -> None:
        if self._poll is not None:
            try:
                self._poll(entry.item)
            except Exception:  # the renewer outlives any one item's trouble
                _log().exception("%s: poll failed", self.name)
        if self.clock.monotonic() < entry.due:
            return
        try:
            renewed = self._renew(entry.item)
        except Exception:
            _log().exception("%s: renewal failed", self.name)
            renewed = None
        if renewed is None:
            return  # not known: the next tick tries again, well before the lease runs out
        if renewed:
            entry.due = self.clock.monotonic() + self.renew_every
            return
        with self._lock:
            current = self._held.pop(id(entry.item), None)
            if current is not entry:  # removed, or added again, meanwhile: not ours to drop
                if current is not None:
                    self._held[id(entry.item)] = current
                return
        try:
            self._on_lost(entry.item)
        except Exception:
            _log().exception("%s: on_lost failed", self.name)
