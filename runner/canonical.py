"""Canonical JSON: the one encoding behind every identity comparison and digest.

Sorted keys, no whitespace, UTF-8 text as is (``ensure_ascii=False``) and finite
numbers only. Two values that are equal as JSON encode to the same bytes, so
store columns compare byte for byte, trace lines are stable, and a fingerprint
(`fingerprint`, the SHA-256 of those bytes) names a value. Anything that is not
plain JSON (a set, bytes, NaN, an object) is refused with `ValueError` rather
than encoded some way that a later reader would not reproduce.

The bytes of this encoding are part of the on-disk formats (definition digests,
effect request fingerprints, trace lines): changing them changes every digest.
This module imports only the standard library so every layer may use it.
"""

from __future__ import annotations

import hashlib
import json

__all__ = ["canonical_bytes", "canonical_json", "fingerprint"]

_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: object) -> str:
    """`value` as canonical JSON text; `ValueError` when it is not plain JSON."""
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"not plain JSON: {exc}") from None


def canonical_bytes(value: object) -> bytes:
    """The UTF-8 bytes of `canonical_json(value)`."""
    return canonical_json(value).encode("utf-8")


def fingerprint(value: object) -> str:
    """``"sha256:<hex>"`` of the canonical JSON bytes of `value`."""
    return "sha256:" + hashlib.sha256(canonical_bytes(value)).hexdigest()
