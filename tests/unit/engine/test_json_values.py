"""Values a node returns and a run's input go through JSON: the fast paths for plain
scalars and the empty input must give what the round trip gives."""

from __future__ import annotations

import math
from typing import Any

import pytest

from runner.compiler._model import WorkflowDefinition
from runner.engine._engine import check_input
from runner.engine._nodecontext import json_value as _json_value
from runner.errors import InputError


@pytest.mark.parametrize("value", ["text", "", 0, 7, -3, True, False, None, 2.5])
def test_plain_values_come_back_equal_and_of_the_same_type(value: Any) -> None:
    out, bad = _json_value(value, "the expression")
    assert bad is None
    assert out == value
    assert type(out) is type(value)


def test_containers_are_normalized_and_non_json_is_refused() -> None:
    assert _json_value((1, "a", (2,)), "x") == ([1, "a", [2]], None)
    for value in (math.nan, math.inf, {1, 2}, b"bytes", {"k": object()}):
        out, bad = _json_value(value, "the expression")
        assert out is None
        assert bad is not None
        assert bad.error is not None
        assert bad.error["code"] == "not_json"


def test_run_input_is_copied_normalized_or_refused() -> None:
    definition = WorkflowDefinition(name="w", start="a", nodes={}, edges={})
    empty: dict[str, Any] = {}
    out = check_input(definition, empty)
    assert out == {}
    assert out is not empty
    assert check_input(definition, {"a": (1, 2)}) == {"a": [1, 2]}
    with pytest.raises(InputError, match="input must be JSON"):
        check_input(definition, {"a": math.nan})


def test_a_definition_encodes_its_snapshot_once_in_the_canonical_bytes() -> None:
    from runner._canonical import canonical_json

    definition = WorkflowDefinition(name="w", start="a", nodes={}, edges={}, title="T")
    text = definition.snapshot_json
    assert text == canonical_json(definition.snapshot())
    assert definition.snapshot_json is text  # cached: every run's bundle stores it
