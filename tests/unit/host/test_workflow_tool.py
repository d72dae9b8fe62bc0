"""The `workflow` tool: one flat schema for strict providers, then exact per-action checks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runner.errors import InputError
from runner.host.session._tool import ACTIONS, FIELDS, WORKFLOW_TOOL, validate_call

pytestmark = pytest.mark.timeout(10)
COMBINATORS = {"oneOf", "anyOf", "allOf", "not", "if", "then", "else", "$ref"}
VALUES: dict[str, Any] = {"workflow": "hello", "input": {"task": "x"}, "runId": "r-1",
                          "offset": 0, "step": "plan", "attempt": "a1",
                          "output": {"summary": "s"}, "update": {"type": "progress"}}


def _walk(node: Any) -> list[str]:
    keys: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            keys.append(key)
            keys.extend(_walk(value))
    elif isinstance(node, list):
        for value in node:
            keys.extend(_walk(value))
    return keys


def test_tool_schema_is_one_flat_object() -> None:
    params = WORKFLOW_TOOL["parameters"]
    json.dumps(WORKFLOW_TOOL)  # plain JSON, as a provider receives it
    assert params["type"] == "object"
    assert params["additionalProperties"] is False
    assert params["required"] == ["action"]
    assert not COMBINATORS & set(_walk(params))  # no oneOf/anyOf anywhere
    assert params["properties"]["action"] == {"type": "string", "enum": list(ACTIONS)}
    assert ACTIONS == ("list", "start", "status", "pause", "resume", "cancel", "answer",
                       "update", "submit")
    fields = {f for req, opt in FIELDS.values() for f in (*req, *opt)}
    assert set(params["properties"]) == {"action", *fields}
    for name, prop in params["properties"].items():
        assert isinstance(prop, dict), name
        assert "properties" not in prop, name  # one level only


@pytest.mark.parametrize("action", ACTIONS)
def test_each_action_accepts_exactly_its_fields(action: str) -> None:
    required, optional = FIELDS[action]
    full = {"action": action, **{k: VALUES[k] for k in (*required, *optional)}}
    assert validate_call(full) == (action, {k: v for k, v in full.items() if k != "action"})
    minimal = {"action": action, **{k: VALUES[k] for k in required}}
    assert validate_call(minimal)[0] == action
    for missing in required:
        args = {k: v for k, v in minimal.items() if k != missing}
        with pytest.raises(InputError) as caught:
            validate_call(args)
        assert caught.value.message == f"action '{action}' needs {missing}"
    for extra in sorted(set(VALUES) - set(required) - set(optional)):
        with pytest.raises(InputError) as caught:
            validate_call({**minimal, extra: VALUES[extra]})
        assert caught.value.message.startswith(f"action '{action}' does not take {extra};")


@pytest.mark.parametrize(("args", "message"), [
    ([], "workflow tool arguments must be a JSON object"),
    ({}, "unknown action null; use one of: list, start"),
    ({"action": "run"}, 'unknown action "run"'),
    ({"action": "start", "workflow": ""}, "'workflow' must be a non-empty string"),
    ({"action": "status", "runId": 7}, "'runId' must be a non-empty string"),
    ({"action": "list", "offset": -1}, "'offset' must be a non-negative integer"),
    ({"action": "update", "step": "s", "attempt": "a", "update": []},
     "'update' must be an object"),
    ({"action": "start", "workflow": "w", "nope": 1, "zzz": 2},
     "action 'start' does not take nope, zzz; it takes workflow, input"),
])
def test_invalid_calls_name_what_to_fix(args: Any, message: str) -> None:
    with pytest.raises(InputError) as caught:
        validate_call(args)
    assert caught.value.message.startswith(message)
