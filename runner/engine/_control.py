"""Run control: cancel, pause and park requests crossing threads into the engine."""

from __future__ import annotations

import threading
from typing import Literal

StopReason = Literal["cancel", "park"]
#: The park reason of a run stopped by `wfrun pause` (its launch parks `paused`).
PAUSED = "paused"
#: The park reason of a run whose fan-out items other hosts run (ADR 0008 phase 2): it
#: goes on by itself when they end, unlike a run parked by a shutdown.
ITEMS = "waiting for its items (hosts run them)"


class RunControl:
    """Set from any thread (a signal handler, a tool call); the engine polls it.

    Cancel ends the run `cancelled`. Park stops it with no terminal event so a
    later resume continues at the interrupted node. Pause holds the run at the
    next node boundary until `resume()`.
    """

    def __init__(self) -> None:
        self.wake = threading.Event()  # set on any request, so sleeps return early
        self.stopped = threading.Event()  # set only by cancel and park
        self._stop: StopReason | None = None
        self._pause = threading.Event()
        self._lock = threading.Lock()
        self.reason: str | None = None
        # A park by a host shutdown may be resumed by the next host; any other park
        # (a person's Ctrl-C, a session shutdown) waits for an explicit resume.
        self.auto_resume = False
        # A clean park is recorded in the trace (`run_parked`), so the crash-loop budget
        # does not count it as a death; a park because the claim was lost writes
        # nothing (another runner may hold the run by now) and counts as one.
        self.clean = True
        self.park_on_pause = False  # see `pause`

    @property
    def stopping(self) -> bool:
        return self._stop is not None

    @property
    def stop_reason(self) -> StopReason | None:
        return self._stop

    @property
    def pause_requested(self) -> bool:
        return self._pause.is_set()

    def cancel(self, reason: str = "cancelled") -> None:
        with self._lock:
            if self._stop is None:
                self._stop = "cancel"
                self.reason = reason
        self.stopped.set()
        self.wake.set()

    def park(self, reason: str = "parked", *, auto_resume: bool = False,
             clean: bool = True) -> None:
        with self._lock:
            if self._stop is None:
                self._stop = "park"
                self.reason = reason
                self.auto_resume = auto_resume
                self.clean = clean
        self.stopped.set()
        self.wake.set()

    def pause(self, *, park: bool = False) -> None:
        """Hold the run at the next node boundary; `park`: stop it there instead
        (parked, reason PAUSED: `wfrun pause`, the run frees its runner's slot)."""
        self.park_on_pause = park
        self._pause.set()
        self.wake.set()

    def resume(self) -> None:
        self._pause.clear()
        self.park_on_pause = False
        self.wake.set()

    def rearm(self) -> None:
        """Clear the wake flag after handling it (stop requests stay sticky)."""
        if self._stop is None:
            self.wake.clear()
