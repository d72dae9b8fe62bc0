"""Long strings leave the trace: values over 4 KiB are stored in `artifacts/`.

A persisted value replaces each long string with
`{"$artifact": {path, media_type, bytes, sha256}}`; a user object that happens
to use the key `$artifact` (or `$escaped`) is wrapped as `{"$escaped": ...}`
so reading back is unambiguous.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._bundlefmt import ARTIFACT_THRESHOLD

_MARKERS = ("$artifact", "$escaped")
Writer = Callable[[bytes, str], dict[str, Any]]
Reader = Callable[[dict[str, Any]], bytes]


def externalize(value: Any, write: Writer, marked: list[bool] | None = None) -> Any:
    """`value` as persisted; `marked[0]` becomes True when the result holds a marker
    (an artifact or an escaped object), which `has_artifacts` would otherwise find in
    a second walk of every event."""
    if isinstance(value, str):
        if len(value) > _SHORT and len(value.encode()) > ARTIFACT_THRESHOLD:
            if marked is not None:
                marked[0] = True
            return {"$artifact": write(value.encode(), "text/plain; charset=utf-8")}
        return value
    if isinstance(value, dict):
        # Scalars and short strings (most values) are kept without a call of their own;
        # plain loops, as a comprehension is a frame of its own (several per event).
        inner = {}
        for k, v in value.items():
            inner[k] = v if v is None or type(v) in _SCALARS or (
                type(v) is str and len(v) <= _SHORT) else externalize(v, write, marked)
        if len(value) == 1 and next(iter(value)) in _MARKERS:
            if marked is not None:
                marked[0] = True
            return {"$escaped": inner}
        return inner
    if isinstance(value, list):
        out = []
        for v in value:
            out.append(externalize(v, write, marked))
        return out
    return value


_SCALARS = frozenset({bool, int, float})  # nothing to move or escape: no call for them
# A string this short cannot pass the threshold (UTF-8 takes at most 4 bytes a character).
_SHORT = ARTIFACT_THRESHOLD // 4


def internalize(value: Any, read: Reader) -> Any:
    if isinstance(value, dict):
        if len(value) == 1:
            key = next(iter(value))
            if key == "$artifact" and isinstance(value[key], dict):
                return read(value[key]).decode()
            if key == "$escaped" and isinstance(value[key], dict):
                return {k: internalize(v, read) for k, v in value[key].items()}
        return {k: internalize(v, read) for k, v in value.items()}
    if isinstance(value, list):
        return [internalize(v, read) for v in value]
    return value


def has_artifacts(value: Any) -> bool:
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)) in _MARKERS:
            return True
        return any(has_artifacts(v) for v in value.values())
    if isinstance(value, list):
        return any(has_artifacts(v) for v in value)
    return False
