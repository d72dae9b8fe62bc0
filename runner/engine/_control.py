"""Run control: cancel, pause and park requests crossing threads into the engine."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Literal

StopReason = Literal["cancel", "park"]
#: The park reason of a run stopped by `wfrun pause` (its launch parks `paused`).
PAUSED = "paused"
#: The park reason of a run whose fan-out items other hosts run (ADR 0008 phase 2): it
#: goes on by itself when they end, unlike a run parked by a shutdown.
ITEMS = "waiting for its items (hosts run them)"


@dataclass(eq=False)  # compared by identity, as before
class RunControl:
    """Set from any thread (a signal handler, a tool call); the engine polls it.

    Cancel ends the run `cancelled`. Park stops it with no terminal event so a
    later resume continues at the interrupted node. Pause holds the run at the
    next node boundary until `resume()`.

    What the engine reads (`stop_reason`, `stopping`, `pause_requested`) are plain
    attributes, set only by the methods below: the run loop and every template
    operation read them (a render's budget checks `stopping`), so a read is no call.
    """

    # A plain dataclass: its generated __init__ only stores these (no runner frame).
    # The two events are made on first use (`wake`, `stopped`): a host makes a
    # RunControl per run, most runs never wait on either, and an Event costs a
    # Condition and a lock (~2 µs each, a third of a run's control otherwise).
    _wake: threading.Event | None = field(default=None, init=False, repr=False)
    _stopped: threading.Event | None = field(default=None, init=False, repr=False)
    _woken: bool = field(default=False, init=False, repr=False)  # `wake` is made set
    stop_reason: StopReason | None = field(default=None, init=False)  # the first wins
    stopping: bool = field(default=False, init=False)  # stop_reason is set
    pause_requested: bool = field(default=False, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    reason: str | None = field(default=None, init=False)
    # A park by a host shutdown may be resumed by the next host; any other park
    # (a person's Ctrl-C, a session shutdown) waits for an explicit resume.
    auto_resume: bool = field(default=False, init=False)
    # A clean park is recorded in the trace (`run_parked`), so the crash-loop budget
    # does not count it as a death; a park because the claim was lost writes
    # nothing (another runner may hold the run by now) and counts as one.
    clean: bool = field(default=True, init=False)
    park_on_pause: bool = field(default=False, init=False)  # see `pause`

    @property
    def wake(self) -> threading.Event:
        """Set on any request, so sleeps return early."""
        event = self._wake
        if event is None:
            with self._lock:  # a request and the event's making never miss each other
                if self._wake is None:
                    self._wake = threading.Event()
                    if self._woken:
                        self._wake.set()
                event = self._wake
        return event

    @property
    def stopped(self) -> threading.Event:
        """Set only by cancel and park."""
        event = self._stopped
        if event is None:
            with self._lock:
                if self._stopped is None:
                    self._stopped = threading.Event()
                    if self.stopping:
                        self._stopped.set()
                event = self._stopped
        return event

    def cancel(self, reason: str = "cancelled") -> None:
        with self._lock:
            if self.stop_reason is None:
                self.stop_reason, self.stopping = "cancel", True
                self.reason = reason
        self._signal(stop=True)

    def park(self, reason: str = "parked", *, auto_resume: bool = False,
             clean: bool = True) -> None:
        with self._lock:
            if self.stop_reason is None:
                self.stop_reason, self.stopping = "park", True
                self.reason = reason
                self.auto_resume = auto_resume
                self.clean = clean
        self._signal(stop=True)

    def pause(self, *, park: bool = False) -> None:
        """Hold the run at the next node boundary; `park`: stop it there instead
        (parked, reason PAUSED: `wfrun pause`, the run frees its runner's slot)."""
        self.park_on_pause = park
        self.pause_requested = True
        self._signal()

    def resume(self) -> None:
        self.pause_requested = False
        self.park_on_pause = False
        self._signal()

    def _signal(self, *, stop: bool = False) -> None:
        """Set the events made so far; one made later is made set (under the lock)."""
        with self._lock:
            self._woken = True
            wake, stopped = self._wake, self._stopped
        if stop and stopped is not None:
            stopped.set()
        if wake is not None:
            wake.set()

    def rearm(self) -> None:
        """Clear the wake flag after handling it (stop requests stay sticky)."""
        with self._lock:
            if not self.stopping:
                self._woken = False
                if self._wake is not None:
                    self._wake.clear()
