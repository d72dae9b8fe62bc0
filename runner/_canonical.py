"""Canonical JSON: the one encoding behind every identity comparison and digest.

Sorted keys, no whitespace, UTF-8 text as is (``ensure_ascii=False``) and finite
numbers only. Two values that are equal as JSON encode to the same bytes, so
store columns compare byte for byte, trace lines are stable, and a fingerprint
(`fingerprint`, the SHA-256 of those bytes) names a value. Anything that is not
plain JSON (a set, bytes, NaN, an object) is refused with `ValueError` rather
than encoded some way that a later reader would not reproduce.

The bytes of this encoding are part of the on-disk formats (definition digests,
effect request fingerprints, trace lines): changing them changes every digest.
`Spliced` writes the same bytes for a bundle's records while encoding a long list
(a map's output, met up to five times at a run's end) once.
This module imports only the standard library so every layer may use it.
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring  # how the canonical encoder quotes a key
from typing import Any

__all__ = ["Spliced", "canonical_bytes", "canonical_json", "fingerprint"]

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


# -- a run's records, each long list encoded once ------------------------------------

LONG = 64  # a list this long is encoded once per bundle and spliced after
KEEP = 8  # lists kept, the latest: a map's output and its items' summary, a few ends
# Dict levels looked into: state.json, its `results`, a node's result, then the lists
# in it; an event, its payload, a parallel node's output by branch.
DEPTH = 3
#: Events that may carry a long list (an output, a map's item summary): any other is
#: encoded whole without a look (a map's end writes 1,000 `node_log` events).
CARRIERS = frozenset({"node_finished", "node_failed", "run_completed", "run_failed",
                      "run_timed_out", "run_cancelled", "run_waiting", "run_started",
                      "include_exited"})


@dataclass(eq=False)
class Spliced:
    """Canonical JSON of one bundle's records, each long list encoded once and spliced
    where the very same list object appears again (a map's output: in its node's end
    event, the run's ending and state.json's `outputs`, `results` and `final_output`).
    Canonical JSON is compositional (a dict's text is `{`, its `"key":value` pairs in
    key order joined by `,`, `}`), so the text is, byte for byte, `canonical_json` of
    the whole (tests/unit/engine/test_spliced.py). Only lists are kept, held so their
    ids stay their own: a run's state dicts change in place, its lists never do."""

    _texts: dict[int, tuple[list[Any], str]] = field(default_factory=dict)

    def line(self, event: dict[str, Any]) -> str:
        """One trace event's text."""
        if event.get("type") in CARRIERS:
            return self.dumps(event)
        return canonical_json(event)

    def dumps(self, value: Any) -> str:
        """`canonical_json(value)`, with the text of a long list met before spliced in;
        `ValueError` when it is not plain JSON, as there."""
        if type(value) is dict and _holds(value, DEPTH):
            return self._compose(value, DEPTH)
        return canonical_json(value)

    def _compose(self, value: dict[str, Any], depth: int) -> str:
        if any(type(k) is not str for k in value):
            return canonical_json(value)  # the encoder's own key rules (and refusals)
        parts = []
        for key, v in sorted(value.items()):  # keys differ: values are never compared
            if type(v) is list and len(v) >= LONG:
                text = self._kept(v)
            elif type(v) is dict and depth > 1 and _holds(v, depth - 1):
                text = self._compose(v, depth - 1)
            else:
                text = canonical_json(v)
            parts.append(encode_basestring(key) + ":" + text)
        return "{" + ",".join(parts) + "}"

    def _kept(self, value: list[Any]) -> str:
        got = self._texts.get(id(value))
        if got is not None and got[0] is value:
            return got[1]
        text = canonical_json(value)
        if len(self._texts) >= KEEP:
            del self._texts[next(iter(self._texts))]
        self._texts[id(value)] = (value, text)
        return text


def _holds(value: dict[str, Any], depth: int) -> bool:
    """Whether `value` holds a long list, in it or in its dicts `depth` - 1 levels down."""
    for v in value.values():
        kind = type(v)
        if kind is list:
            if len(v) >= LONG:
                return True
        elif kind is dict and depth > 1 and _holds(v, depth - 1):
            return True
    return False
