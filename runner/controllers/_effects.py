"""Effects: external mutations that survive a process stopping at any point (DESIGN §7).

`ctx.effects.ensure(key, kind, request, observe, apply)`:

1. The request's fingerprint is recorded as `pending` *before* the provider call.
2. A record that is already `applied` or `rejected` is final: return it.
3. An existing `pending` or `indeterminate` record means an earlier pass may have
   reached the provider: `observe` first. Applied -> record it (recovered);
   indeterminate -> record and return without applying; not applied -> apply.
4. `apply` returns applied / rejected / indeterminate; an exception is
   indeterminate (a local timeout is not proof the provider failed).

A key reused with a different request is an error, never a silent second effect.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from runner._canonical import canonical_json, fingerprint
from runner._safety import safe_message
from runner.errors import InputError
from runner.store import IdentityConflict, LostRace
from runner.store._controller_interface import ControllerStore, Effect, Resource

Observed = Literal["applied", "not_applied", "indeterminate"]
#: Where a test seam may stop the process around the provider call (see `Effects.crash`):
#: after the pending record and before the call, after the call before its receipt is
#: stored, and after the receipt before the pass writes status.
CRASH_POINTS = ("before_provider_call", "after_provider_call", "after_receipt")
#: Bytes kept of an effect's error (redacted first): the exception text of a failed call.
CALL_ERROR_MAX_BYTES = 300
ERROR_MAX_BYTES = 500


@dataclass(frozen=True)
class Observation:
    state: Observed
    external_ref: str | None = None


@dataclass(frozen=True)
class Applied:
    state: Literal["applied", "rejected", "indeterminate"]
    external_ref: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class EffectOutcome:
    key: str
    state: str  # applied | rejected | indeterminate
    external_ref: str | None
    error: str | None
    recovered: bool = False  # found applied by observation after an interruption


def request_fingerprint(request: Any) -> str:
    """The canonical fingerprint (`runner._canonical`) an effect record keeps."""
    return fingerprint(request)


# What `ensure_ascii=True` escaped beyond the canonical form: DEL and everything above.
_ESCAPED = re.compile(r"[^\x00-\x7e]")


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}"


def _ascii_fingerprint(request: Any) -> str | None:
    """The fingerprint records written before `runner._canonical` keep: the same
    canonical text with DEL and non-ASCII characters as `\\uXXXX` escapes (what
    `json.dumps(..., ensure_ascii=True)` wrote). None when the two are the same."""
    text = canonical_json(request)
    if _ESCAPED.search(text) is None:
        return None
    return "sha256:" + hashlib.sha256(_ESCAPED.sub(_json_escape, text).encode()).hexdigest()


def _same_request(recorded: str, fp: str, request: Any) -> bool:
    return recorded == fp or recorded == _ascii_fingerprint(request)


class EffectError(InputError):
    """An effect key was reused with a different request or kind."""


class Effects:
    def __init__(self, store: ControllerStore, resource: Resource,
                 record_event: Callable[[str, dict[str, Any]], None],
                 crash: Callable[[str], None] = lambda _p: None) -> None:
        self.store = store
        self.resource = resource
        self.record_event = record_event
        self.crash = crash

    def ensure(self, key: str, kind: str, request: Any,
               observe: Callable[[Any], Observation],
               apply: Callable[[Any], Applied]) -> EffectOutcome:
        effects = self.store.effects
        uid = self.resource.uid
        fp = request_fingerprint(request)
        existing = effects.get(uid, key)
        if existing is not None and (not _same_request(existing.request_fingerprint, fp, request)
                                     or existing.kind != kind):
            raise EffectError(f"effect '{key}' was recorded with a different request; use a "
                              "new key for a new request")
        if existing is None:
            try:
                existing = effects.reserve(uid, key, generation=self.resource.generation,
                                           kind=kind, request_fingerprint=fp)
            except IdentityConflict:
                raise EffectError(f"effect '{key}' was recorded with a different "
                                  "request") from None
            self.record_event("effect_pending", {"key": key, "kind": kind})
            return self._apply(existing, request, apply)
        if existing.state in ("applied", "rejected"):
            return _outcome(existing)
        # pending or indeterminate: an earlier pass may have reached the provider.
        seen = observe(request)
        if seen.state == "applied":
            done = self._complete(key, "applied", seen.external_ref, None)
            self.record_event("effect_recovered", {"key": key, "kind": kind})
            return EffectOutcome(key, "applied", done.external_ref, None, recovered=True)
        if seen.state == "indeterminate":
            done = self._complete(key, "indeterminate", None,
                                  "the provider state is still unknown")
            self.record_event("effect_indeterminate", {"key": key, "kind": kind})
            return _outcome(done)
        return self._apply(existing, request, apply)

    def _apply(self, record: Effect, request: Any,
               apply: Callable[[Any], Applied]) -> EffectOutcome:
        self.crash("before_provider_call")
        try:
            result = apply(request)
        except Exception as exc:  # a timeout or crash is not proof the call failed
            result = Applied("indeterminate", error=safe_message(
                f"{type(exc).__name__}: {exc}", max_bytes=CALL_ERROR_MAX_BYTES))
        self.crash("after_provider_call")
        done = self._complete(record.effect_key, result.state, result.external_ref, result.error)
        self.record_event(f"effect_{result.state}", {"key": record.effect_key,
                                                     "kind": record.kind})
        self.crash("after_receipt")
        return _outcome(done)

    def _complete(self, key: str, state: Any, ref: str | None, error: str | None) -> Effect:
        done = self.store.effects.complete(self.resource.uid, key, state=state, external_ref=ref,
                                           error=safe_message(error, max_bytes=ERROR_MAX_BYTES)
                                           if error else None)
        if isinstance(done, LostRace):
            current = self.store.effects.get(self.resource.uid, key)
            assert current is not None
            return current
        return done


def _outcome(record: Effect) -> EffectOutcome:
    return EffectOutcome(record.effect_key, record.state, record.external_ref, record.error)
