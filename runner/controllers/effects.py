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
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from runner.errors import InputError
from runner.store import IdentityConflict, LostRace
from runner.store.controller_interface import ControllerStore, Effect, Resource

Observed = Literal["applied", "not_applied", "indeterminate"]
#: Where a test seam may stop the process around the provider call (see `Effects.crash`):
#: after the pending record and before the call, after the call before its receipt is
#: stored, and after the receipt before the pass writes status.
CRASH_POINTS = ("before_provider_call", "after_provider_call", "after_receipt")


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
    text = json.dumps(request, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


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
        if existing is not None and (existing.request_fingerprint != fp
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
            result = Applied("indeterminate", error=f"{type(exc).__name__}: {exc}"[:300])
        self.crash("after_provider_call")
        done = self._complete(record.effect_key, result.state, result.external_ref, result.error)
        self.record_event(f"effect_{result.state}", {"key": record.effect_key,
                                                     "kind": record.kind})
        self.crash("after_receipt")
        return _outcome(done)

    def _complete(self, key: str, state: Any, ref: str | None, error: str | None) -> Effect:
        done = self.store.effects.complete(self.resource.uid, key, state=state, external_ref=ref,
                                           error=error[:500] if error else None)
        if isinstance(done, LostRace):
            current = self.store.effects.get(self.resource.uid, key)
            assert current is not None
            return current
        return done


def _outcome(record: Effect) -> EffectOutcome:
    return EffectOutcome(record.effect_key, record.state, record.external_ref, record.error)
