"""Durations as authors write them: `30s`, `15m`, `2h`, `1h30m`, `250ms`, or null."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class DurationError(ValueError):
    pass


def parse_duration(value: object) -> float | None:
    """Seconds as a float; None for `null` (no deadline). Raises DurationError."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise DurationError("expected a duration like 30s, 15m or 2h, or null")
    if isinstance(value, (int, float)):
        if value <= 0:
            raise DurationError("a duration must be positive")
        return float(value)
    if not isinstance(value, str):
        raise DurationError("expected a duration like 30s, 15m or 2h, or null")
    text = value.strip().replace(" ", "")
    if not _WHOLE.match(text):
        raise DurationError(f"'{value}' is not a duration; write 30s, 15m, 2h or 1h30m")
    seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
    if seconds <= 0:
        raise DurationError("a duration must be positive")
    return seconds


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
