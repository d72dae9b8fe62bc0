"""Conditions, status patches, results and backoff: the pure parts of the runtime."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from runner.controllers import (
    Condition,
    ReconcileContext,
    StatusPatch,
    backoff_delay,
    condition,
    is_true,
    merge_conditions,
)
from runner.controllers._conditions import apply_patch
from runner.controllers._effects import request_fingerprint
from runner.store._controller_interface import Resource

T0, T1 = "2026-01-01T00:00:00.000Z", "2026-01-01T00:05:00.000Z"


def test_condition_status_and_fields_are_validated() -> None:
    with pytest.raises(ValueError, match="True, False or Unknown"):
        Condition("Ready", "true", "Done")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="type and a reason"):
        Condition("Ready", "True", "")


def test_merge_keeps_transition_time_while_status_is_unchanged() -> None:
    first = merge_conditions([], [Condition("Ready", "False", "Waiting")], generation=1, now=T0)
    same = merge_conditions(first, [Condition("Ready", "False", "StillWaiting", "x")],
                            generation=2, now=T1)
    assert same == [{"type": "Ready", "status": "False", "reason": "StillWaiting",
                     "message": "x", "observed_generation": 2, "last_transition_time": T0}]
    flipped = merge_conditions(same, [Condition("Ready", "True", "Done")], generation=2, now=T1)
    assert flipped[0]["last_transition_time"] == T1
    assert flipped[0]["status"] == "True"


def test_merge_is_by_type_sorted_and_keeps_untouched_conditions() -> None:
    base = merge_conditions([], [Condition("Synced", "True", "Ok"),
                                 Condition("Ready", "False", "No")], generation=1, now=T0)
    assert [c["type"] for c in base] == ["Ready", "Synced"]
    updated = merge_conditions(base, [Condition("Ready", "True", "Yes")], generation=2, now=T1)
    synced = next(c for c in updated if c["type"] == "Synced")
    assert synced["observed_generation"] == 1  # not re-observed by this pass
    with pytest.raises(ValueError, match="appears twice"):
        merge_conditions([], [Condition("Ready", "True", "A"), Condition("Ready", "False", "B")],
                         generation=1, now=T0)


def test_is_true_needs_the_current_generation() -> None:
    status = {"conditions": merge_conditions([], [Condition("Ready", "True", "Done")],
                                             generation=3, now=T0)}
    assert is_true(status, "Ready", 3)
    assert not is_true(status, "Ready", 4)
    assert not is_true(status, "Missing", 3)
    assert condition(status, "Ready") == status["conditions"][0]
    assert condition({}, "Ready") is None


def test_apply_patch_sets_observed_generation_and_optional_parts() -> None:
    status: dict[str, Any] = {"observed_generation": 1, "conditions": [],
                              "controller_status": {"phase": "a"}, "workflow_run": {"x": 1}}
    kept = apply_patch(status, StatusPatch(), generation=5, now=T0)
    assert kept["observed_generation"] == 5
    assert kept["controller_status"] == {"phase": "a"}
    assert kept["workflow_run"] == {"x": 1}  # not mentioned: unchanged
    cleared = apply_patch(status, StatusPatch(controller_status={"phase": "b"},
                                              workflow_run=None), generation=5, now=T0)
    assert cleared["controller_status"] == {"phase": "b"}
    assert cleared["workflow_run"] is None
    assert status["controller_status"] == {"phase": "a"}  # the input is not mutated


def _ctx() -> ReconcileContext:
    r = Resource("c", "k", "uid", 1, 1, {}, {}, None, (), 0, 0)
    return ReconcileContext(r, None, None, "rid", threading.Event())  # type: ignore[arg-type]


def test_results() -> None:
    ctx = _ctx()
    assert ctx.settled().kind == "settled"
    assert ctx.requeue({"a": 1}).patch.controller_status == {"a": 1}
    later = ctx.requeue_after(2.5, conditions=[Condition("Ready", "False", "Wait")],
                              workflow_run=None, finalizers=["f"])
    assert (later.kind, later.delay) == ("requeue_after", 2.5)
    assert later.patch.sets_workflow_run
    assert later.patch.finalizers == ("f",)
    assert not ctx.settled().patch.sets_workflow_run
    for bad in (0, -1):
        with pytest.raises(ValueError, match="positive"):
            ctx.requeue_after(bad)


def test_backoff_doubles_from_one_second_with_jitter_up_to_the_cap() -> None:
    rng = random.Random(7)
    for n in range(1, 15):
        full = min(300.0, 2.0 ** (n - 1))
        for _ in range(20):
            d = backoff_delay(n, 1.0, 300.0, rng)
            assert full / 2 <= d <= full
    assert backoff_delay(0, 1.0, 300.0, rng) <= 1.0
    spread = {round(backoff_delay(3, 1.0, 300.0, rng), 3) for _ in range(20)}
    assert len(spread) > 5  # jitter spreads retries out


def test_request_fingerprint_is_canonical() -> None:
    assert request_fingerprint({"a": 1, "b": [1, 2]}) == request_fingerprint({"b": [1, 2],
                                                                               "a": 1})
    assert request_fingerprint({"a": 1}) != request_fingerprint({"a": 2})
    with pytest.raises(ValueError, match="not JSON compliant"):
        request_fingerprint({"x": float("nan")})
