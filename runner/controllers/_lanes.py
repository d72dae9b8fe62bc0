"""Lanes: how many of a manager's workers run its own Python at once.

Under the GIL only one thread runs Python at a time, so workers doing the
manager's CPU-bound part of a pass (claims, reads, status patches, group
commits) gain nothing past two: one whose commit waits on the disk (the GIL
released) and one running Python meanwhile. More of them only make the
interpreter hand the GIL round more threads at every SQLite statement, which
costs CPU per pass: 4 workers were 17 % slower than 2 on a 2-core machine.

So a worker holds a lane while it works, and a worker without one waits. What
it does with its lane while it calls user code depends on what that
controller's calls have been like (`Habits`):

- calls that return at once (a no-op reconciler: microseconds) keep the lane
  (`away`/`back`): handing it over at every call cost more than the contention
  it saves, since every hand-over wakes a thread;
- calls that block (an HTTP call, a sleep) leave the lane (`leave`/`enter`), so
  blocking reconcilers run as many at once as there are workers;
- and a call that was expected to return at once but blocks does not hold the
  others up for long: a waiting worker that finds the same call still running
  after `patience` takes that lane over, and the worker coming back from it
  waits for a lane like any other.

The patience is a wait on a condition, never a clock read, and only workers
with work to do and no lane wait in it; idle workers wait elsewhere without a
timeout (manager.py). How long a user call took is measured by the manager on
the system clock, like its timeout.
"""

from __future__ import annotations

import threading

#: Enough for one commit in flight beside one thread running Python.
DEFAULT_LANES = 2
#: How long a user call may run before a waiting worker takes its lane over.
PATIENCE = 0.002
#: The longest the watcher waits between looks, in patiences, while it sees nobody
#: in user code (so a newly blocked call is taken over within LONGEST_LOOK + 1).
LONGEST_LOOK = 16
#: A user call longer than this blocked (or computed) long enough that handing its
#: lane over is worth a thread wake-up.
SLOW_CALL = 0.0002
#: How much one call moves a controller's share of slow calls (an exponential mean:
#: one call that was descheduled does not make a no-op controller "blocking").
HABIT_WEIGHT = 0.125


class Lanes:
    """`count` lanes; a thread `enter`s (waiting if none is free or can be taken over)
    and `leave`s; around user code it is `away` and then `back`."""

    def __init__(self, count: int, patience: float = PATIENCE) -> None:
        if count < 1:
            raise ValueError(f"lanes must be at least 1, not {count}")
        self.count = count
        self.patience = patience
        self._cond = threading.Condition(threading.Lock())
        self._free = count
        self._away: dict[int, int] = {}  # thread -> serial of the user call it is in
        self._taken: set[int] = set()    # threads whose lane was taken over while away
        self._serial = 0
        self._watcher = False  # a waiter is watching the away calls
        self._mine = threading.local()
        self.takeovers = 0  # lanes taken from a blocked user call (tests, figures)

    def held(self) -> bool:
        return bool(getattr(self._mine, "held", False))

    def enter(self) -> None:
        with self._cond:
            self._take()
        self._mine.held = True

    def _take(self) -> None:
        """Take a lane (under the condition). One waiter at a time watches the away
        calls, waking every `patience`; the others sleep until a lane is left or the
        watcher gets one and hands them the watch."""
        seen: dict[int, int] = {}
        watching = False
        wait = self.patience
        longest = self.patience * LONGEST_LOOK
        try:
            while True:
                if self._free:
                    self._free -= 1
                    return
                if not watching and self._watcher:
                    self._cond.wait()
                    continue
                watching = self._watcher = True
                if self._cond.wait(wait):
                    continue  # a lane was left: take it (or wait again)
                for thread, serial in self._away.items():
                    if seen.get(thread) == serial:  # the same call a whole patience ago
                        del self._away[thread]
                        self._taken.add(thread)
                        self.takeovers += 1
                        return
                seen = dict(self._away)
                # Nobody in user code: the passes are CPU-bound and a look every
                # patience only takes the GIL from them; look less often (up to
                # LONGEST_LOOK times the patience) until someone is seen in user code.
                wait = self.patience if seen else min(wait * 2, longest)
        finally:
            if watching:
                self._watcher = False
                self._cond.notify()  # the next waiter, if any, watches now

    def leave(self) -> None:
        if not self.held():
            return
        self._mine.held = False
        with self._cond:
            self._free += 1
            self._cond.notify()

    def away(self) -> None:
        """This lane's holder is calling user code: its lane may be taken over."""
        with self._cond:
            self._serial += 1
            self._away[threading.get_ident()] = self._serial

    def back(self) -> None:
        """Back from user code: the lane again, or, if it was taken over, the next one."""
        me = threading.get_ident()
        with self._cond:
            if me in self._taken:
                self._taken.discard(me)
                self._take()
            else:
                del self._away[me]


class Habits:
    """Per controller, the recent share of its user calls that were slow (an
    exponential mean of `took > SLOW_CALL`). A controller not seen yet is assumed
    to block, so its first calls hand their lanes over as they always did."""

    def __init__(self) -> None:
        self._slow: dict[str, float] = {}

    def blocks(self, controller: str) -> bool:
        return self._slow.get(controller, 1.0) >= 0.5

    def record(self, controller: str, took: float) -> None:
        # Unlocked: a lost update between two workers only delays the mean by a call.
        share = self._slow.get(controller, 1.0)
        self._slow[controller] = share + HABIT_WEIGHT * ((took > SLOW_CALL) - share)
