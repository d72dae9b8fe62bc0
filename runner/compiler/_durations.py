"""Durations as authors write them: `30s`, `15m`, `2h`, `1h30m`, `250ms`, or null."""

from __future__ import annotations

import math
import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


# No deadline, retry or interval needs more; past it a float loses the seconds, and a
# 400-digit number is infinite (or too big to convert at all).
MAX_SECONDS = 100 * 365 * 86400.0


class DurationError(ValueError):
    pass


def _shown(value: object) -> str:
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}…{text[-8:]} ({len(text):,} characters)"


def _bounded(seconds: float, value: object) -> float:
    if seconds <= 0:
        raise DurationError("a duration must be positive")
    if not seconds <= MAX_SECONDS:  # also NaN and infinity
        raise DurationError(f"'{_shown(value)}' is longer than 100 years; write null for "
                            "no deadline")
    return seconds


def parse_duration(value: object) -> float | None:
    """Seconds as a float; None for `null` (no deadline). Raises DurationError."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise DurationError("expected a duration like 30s, 15m or 2h, or null")
    if isinstance(value, (int, float)):
        if value <= 0:
            raise DurationError("a duration must be positive")
        return _bounded(float(value) if value <= MAX_SECONDS else math.inf, value)
    if not isinstance(value, str):
        raise DurationError("expected a duration like 30s, 15m or 2h, or null")
    text = value.strip().replace(" ", "")
    if not _WHOLE.match(text):
        raise DurationError(f"'{_shown(value)}' is not a duration; write 30s, 15m, 2h or 1h30m")
    return _bounded(sum(float(n) * _UNITS[u] for n, u in _PART.findall(text)), value)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "none"
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:g}s"
    if seconds < 3600:
        return f"{seconds / 60:g}m"
    return f"{seconds / 3600:g}h"
