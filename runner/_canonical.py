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
import json.encoder
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["canonical_bytes", "canonical_json", "fingerprint"]

_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
    check_circular=False,  # a loop ends in RecursionError, refused like the rest
)


def _refuse(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# The C encoder that `_ENCODER.encode` builds on every call, made once with the same
# arguments (so the same bytes): a run encodes ~16 small values, and that set-up (two
# Python frames, the encoder object) was a tenth of each. None where the C
# accelerator is missing; `_ENCODER` does the work then.
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODE: Callable[[object, int], Sequence[str]] | None = None if _c_make_encoder is None else (
    _c_make_encoder(None, _refuse, json.encoder.encode_basestring, None, ":", ",",
                    True, False, False))


def canonical_json(value: object) -> str:
    """`value` as canonical JSON text; `ValueError` when it is not plain JSON."""
    try:
        if _C_ENCODE is None:
            return _ENCODER.encode(value)
        return "".join(_C_ENCODE(value, 0))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"not plain JSON: {exc}") from None


def canonical_bytes(value: object) -> bytes:
    """The UTF-8 bytes of `canonical_json(value)`."""
    return canonical_json(value).encode("utf-8")


def fingerprint(value: object) -> str:
    """``"sha256:<hex>"`` of the canonical JSON bytes of `value`."""
    return "sha256:" + hashlib.sha256(canonical_bytes(value)).hexdigest()
