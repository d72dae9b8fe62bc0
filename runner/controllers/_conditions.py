"""Conditions and status patches (Kubernetes conventions, DESIGN §7).

Conditions are a list treated as a map keyed by `type`. `last_transition_time`
changes only when a condition's `status` changes; every condition records the
generation it observed, so readiness from an older spec is visibly stale.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

ConditionStatus = Literal["True", "False", "Unknown"]
_UNSET: Any = object()


@dataclass(frozen=True)
class Condition:
    type: str
    status: ConditionStatus
    reason: str
    message: str = ""

    def __post_init__(self) -> None:
        if self.status not in ("True", "False", "Unknown"):
            raise ValueError(f"condition status must be True, False or Unknown, not "
                             f"{self.status!r}")
        if not self.type or not self.reason:
            raise ValueError("a condition needs a type and a reason")


@dataclass(frozen=True)
class StatusPatch:
    """What a reconcile pass changes in `status` (None = leave as is)."""

    controller_status: Mapping[str, Any] | None = None
    conditions: tuple[Condition, ...] = ()
    workflow_run: Any = _UNSET  # a mapping, or None to clear
    finalizers: tuple[str, ...] | None = None

    @property
    def sets_workflow_run(self) -> bool:
        return self.workflow_run is not _UNSET


def merge_conditions(current: Iterable[Mapping[str, Any]], updates: Iterable[Condition], *,
                     generation: int, now: str) -> list[dict[str, Any]]:
    """Merge by type; keep `last_transition_time` when the status did not change."""
    seen: set[str] = set()
    for cond in updates:
        if cond.type in seen:
            raise ValueError(f"condition '{cond.type}' appears twice in one patch")
        seen.add(cond.type)
    by_type = {str(c.get("type")): dict(c) for c in current}
    for cond in updates:
        old = by_type.get(cond.type)
        changed = old is None or old.get("status") != cond.status
        by_type[cond.type] = {
            "type": cond.type,
            "status": cond.status,
            "reason": cond.reason,
            "message": cond.message,
            "observed_generation": generation,
            "last_transition_time": now if changed or old is None
            else old.get("last_transition_time", now),
        }
    return sorted(by_type.values(), key=lambda c: str(c["type"]))


def apply_patch(status: Mapping[str, Any], patch: StatusPatch, *, generation: int,
                now: str) -> dict[str, Any]:
    out = dict(status)
    out["observed_generation"] = generation
    out["conditions"] = merge_conditions(status.get("conditions") or [], patch.conditions,
                                         generation=generation, now=now)
    if patch.controller_status is not None:
        out["controller_status"] = dict(patch.controller_status)
    if patch.sets_workflow_run:
        out["workflow_run"] = dict(patch.workflow_run) if patch.workflow_run else None
    return out


def condition(status: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    for c in status.get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def is_true(status: Mapping[str, Any], type_: str, generation: int) -> bool:
    """True only for a condition observed at the current generation."""
    c = condition(status, type_)
    return bool(c and c.get("status") == "True" and c.get("observed_generation") == generation)


@dataclass(frozen=True)
class Result:
    """How a reconcile pass ended: settled, requeue now, or requeue after a delay."""

    kind: Literal["settled", "requeue", "requeue_after"]
    patch: StatusPatch = field(default_factory=StatusPatch)
    delay: float = 0.0
