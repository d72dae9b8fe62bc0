"""Time as an input (DESIGN §9): logic asks a `Clock`, tests pass a `FakeClock`.

This module imports nothing from `runner`, so every layer may use it.
"""

from __future__ import annotations

import threading
import time
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
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float, wake: threading.Event | None = None) -> bool:
        if wake is None:
            time.sleep(max(seconds, 0.0))
            return False
        return wake.wait(max(seconds, 0.0))


class FakeClock:
    """A virtual clock: `sleep` advances time instantly; `advance` moves it by hand."""

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


def iso(ts: float) -> str:
    """UTC ISO-8601 with milliseconds and a Z, for traces and manifests."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + \
        f"{int(ts * 1000) % 1000:03d}Z"


def compact_utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y%m%dT%H%M%SZ")
