"""Time as an input (DESIGN §9): logic asks a `Clock`, tests pass a `FakeClock`.

This module imports nothing from `runner`, so every layer may use it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock seconds since the epoch (for timestamps people read)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for deadlines and durations)."""
        ...

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> bool:
        """Sleep; returns True early if `wake` is set."""
        ...


class SystemClock:
    # The C functions themselves: a read is no Python frame (a run reads the clock
    # ~50 times, every render operation's budget check among them).
    now = staticmethod(time.time)
    monotonic = staticmethod(time.monotonic)

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> bool:
        if wake is None:
            time.sleep(max(seconds, 0.0))
            return False
        return wake.wait(max(seconds, 0.0))


class FakeClock:
    """A virtual clock: `sleep` advances time instantly; `advance` moves it by hand.

    A sleep moves the time for every reader, so only the logic under test sleeps on
    it; background threads (`runner._leases`, `runner._deadline`) wait on events and
    only read the time, so virtual time passes when the test (or that logic) says.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._mono = 1000.0
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
            self._mono += seconds

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> bool:
        if wake is not None and wake.is_set():
            return True
        self.advance(max(seconds, 0.0))
        return False


CLOCK_FILE_ENV = "WFRUN_CLOCK_FILE"


class FileClock:
    """A test seam: virtual wall time shared by processes through a file.

    `now()` is the number of epoch seconds written in the file, so a test (and
    every process it starts with `WFRUN_CLOCK_FILE=path`) agrees on what time it
    is, and a lease or a delayed wake-up comes due only when the test moves the
    file on, never because a process was slow to start. `monotonic()` and
    `sleep()` stay real: polling and shutdown deadlines still pass.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    @classmethod
    def create(cls, path: str | os.PathLike[str], start: float | None = None) -> FileClock:
        """A clock file set to `start` (default: the real time now)."""
        clock = cls(path)
        clock.set(time.time() if start is None else start)
        return clock

    def now(self) -> float:
        try:
            with open(self.path, encoding="ascii") as f:
                return float(f.read())
        except (OSError, ValueError) as e:
            raise RuntimeError(f"{CLOCK_FILE_ENV}={self.path}: no readable time ({e})") from e

    def set(self, ts: float) -> None:
        """Write the time atomically (a reader sees the old or the new value)."""
        tmp = f"{self.path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write(repr(float(ts)))
        os.replace(tmp, self.path)

    def advance(self, seconds: float) -> None:
        self.set(self.now() + seconds)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> bool:
        return SystemClock().sleep(seconds, wake)


def clock_from_env(env: Mapping[str, str] | None = None) -> Clock:
    """The process clock: a `FileClock` when `WFRUN_CLOCK_FILE` names one (tests
    only), else the system clock."""
    path = (os.environ if env is None else env).get(CLOCK_FILE_ENV)
    return FileClock(path) if path else SystemClock()


_ISO_SECOND: tuple[int, str] = (-1, "")  # the last second formatted, and its text


def iso(ts: float) -> str:
    """UTC ISO-8601 with milliseconds and a Z, for traces and manifests. A run writes
    several per millisecond: the second's text is formatted once per second."""
    global _ISO_SECOND
    ms = int(ts * 1000)
    second, text = _ISO_SECOND
    if ms // 1000 != second:
        second = ms // 1000
        text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        _ISO_SECOND = (second, text)  # one tuple: a thread reads a whole pair
    return f"{text}{ms % 1000:03d}Z"


def compact_utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y%m%dT%H%M%SZ")
