"""The artifact walk's bounds (engine/_state.py): a string moves to `artifacts/`
exactly when its UTF-8 form is over the threshold, wherever it sits in a payload,
and the state's fold copies what a run_started carries instead of sharing it."""

from __future__ import annotations

from typing import Any

import pytest

from runner.engine._state import ARTIFACT_THRESHOLD, RunState, externalize


def _walk(value: Any) -> tuple[Any, list[bytes], bool]:
    written: list[bytes] = []

    def write(data: bytes, media_type: str) -> dict[str, Any]:
        written.append(data)
        return {"bytes": len(data)}

    marked = [False]
    return externalize(value, write, marked), written, marked[0]


# Four-byte characters: the short cut's bound (a quarter of the threshold in
# characters) is exactly the threshold in bytes, and one more character passes it.
@pytest.mark.parametrize(("text", "moves"), [
    ("a" * ARTIFACT_THRESHOLD, False),
    ("a" * (ARTIFACT_THRESHOLD + 1), True),
    ("\U0001F600" * (ARTIFACT_THRESHOLD // 4), False),
    ("\U0001F600" * (ARTIFACT_THRESHOLD // 4 + 1), True),
    ("é" * (ARTIFACT_THRESHOLD // 2 + 1), True),
])
def test_a_string_moves_exactly_when_its_bytes_pass_the_threshold(text: str,
                                                                  moves: bool) -> None:
    for payload in ({"output": text}, {"output": [text]}, {"a": {"b": text}}):
        out, written, marked = _walk(payload)
        assert written == ([text.encode()] if moves else [])
        assert marked is moves
        if not moves:
            assert out == payload


def test_scalars_and_short_strings_come_back_equal_and_markers_are_escaped() -> None:
    payload = {"n": 1, "f": 1.5, "b": True, "none": None, "s": "short", "l": [1, "x"]}
    out, written, marked = _walk(payload)
    assert (out, written, marked) == (payload, [], False)
    out, _, marked = _walk({"v": {"$artifact": "user data"}})
    assert out == {"v": {"$escaped": {"$artifact": "user data"}}}
    assert marked


def _started(payload: dict[str, Any]) -> RunState:
    state = RunState("r1")
    state.apply({"type": "run_started", "seq": 1, "at": "t", "payload": payload})
    return state


def test_a_fresh_run_starts_from_empty_tables_of_its_own() -> None:
    one, two = _started({"workflow": "w"}), _started({"workflow": "w"})
    one.outputs["a"] = 1
    assert (two.outputs, two.results, two.scope_inputs) == ({}, {}, {})
    assert (one.steps, one.carried_steps, one.reused_items) == (0, 0, {})


def test_what_a_run_started_carries_is_copied_not_shared() -> None:
    carried = {"outputs": {"a": {"x": [1]}}, "results": {"a": {"outcome": "ok"}},
               "steps": 2, "scope_inputs": {"m": {"k": 1}}}
    reused = {"item-0": {"output": {"y": 1}}}
    state = _started({"workflow": "w", "carried": carried, "reused_items": reused})
    assert (state.steps, state.carried_steps) == (2, 2)
    state.outputs["a"]["x"].append(2)
    state.results["a"]["outcome"] = "failed"
    state.scope_inputs["m"]["k"] = 2
    state.reused_items["item-0"]["output"]["y"] = 2
    assert carried == {"outputs": {"a": {"x": [1]}}, "results": {"a": {"outcome": "ok"}},
                       "steps": 2, "scope_inputs": {"m": {"k": 1}}}
    assert reused == {"item-0": {"output": {"y": 1}}}
