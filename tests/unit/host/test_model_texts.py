"""The model-facing texts' building blocks: bounded schema messages, tool-action hints,
errors as one JSON object (runner/compiler/_schemamessages.py, host/session/_replies.py)."""

from __future__ import annotations

import json

import pytest

from runner.compiler._jsonschemas import validation_errors
from runner.errors import DefinitionInvalid, InputError, NotFoundError, TemporaryError
from runner.host.session._protocol import ToolReply
from runner.host.session._replies import (
    MAX_ERROR_CHARS,
    MAX_REPLY_CHARS,
    bounded,
    code_of,
    error_reply,
    for_model,
)

SCHEMA = {"type": "object", "required": ["task", "n"], "additionalProperties": False,
          "properties": {"task": {"type": "string", "maxLength": 10},
                         "n": {"type": "integer", "minimum": 1},
                         "mode": {"enum": ["fast", "slow"]},
                         "tags": {"type": "array", "maxItems": 2,
                                  "items": {"type": "string", "pattern": "^[a-z]+$"}}}}


@pytest.mark.parametrize(("value", "expected"), [
    ({"task": "x" * 100_000, "n": 1}, "$.task: is 100000 characters long; at most 10 allowed"),
    ({"task": ["x" * 100_000], "n": 1}, "$.task: expected string, got array"),
    ({"task": "a"}, 'value: missing required property "n"'),
    ({"task": "a", "n": 0}, "$.n: must be >= 1"),
    ({"task": "a", "n": 1, "mode": "x" * 1000}, '$.mode: must be one of ["fast","slow"]'),
    ({"task": "a", "n": 1, "tags": ["a", "b", "c"]}, "$.tags: has 3 items; at most 2 allowed"),
    ({"task": "a", "n": 1, "tags": ["A" * 1000]}, '$.tags[0]: does not match the pattern '
                                                  '"^[a-z]+$"'),
    ("x" * 100_000, "value: expected object, got string"),
])
def test_schema_messages_say_what_is_wrong_without_the_value(value: object,
                                                              expected: str) -> None:
    errors = validation_errors(SCHEMA, value)
    assert errors[0] == expected
    assert all(len(e) < 200 for e in errors)


def test_unexpected_keys_are_quoted_as_json_and_cut() -> None:
    (error,) = validation_errors(SCHEMA, {"task": "a", "n": 1, "k" * 100_000: 1})
    assert error.startswith('value: unexpected property "kkkk')
    assert len(error) < 100
    odd = validation_errors({"type": "object", "properties": {"a b": {"type": "string"}}},
                            {"a b": 1})
    assert odd == ['$["a b"]: expected string, got integer']


@pytest.mark.parametrize(("cli", "tool"), [
    ("no workflow named 'x'; `wfrun list` shows what exists",
     "no workflow named 'x'; the list action shows what exists"),
    ("workflow 'x' has 1 error(s): bad; run `wfrun validate x`",
     "workflow 'x' has 1 error(s): bad; fix the file, then start it again"),
    ("no run 'r'; `wfrun runs` lists runs",
     "no run 'r'; the status action without runId shows this session's run"),
    ("no launch 'r'; `wfrun status` lists launches",
     "no launch 'r'; the status action without runId shows this session's run"),
    ("run 'r' is waiting at a checkpoint; continue it with `wfrun answer r ...`",
     "run 'r' is waiting at a checkpoint; continue it with the answer action (runId 'r')"),
])
def test_cli_hints_become_tool_actions(cli: str, tool: str) -> None:
    assert for_model(cli) == tool


def test_an_error_reply_is_one_bounded_json_object() -> None:
    reply = error_reply("why " * 10_000, "start", "input_invalid", {"extra": 1})
    assert reply.is_error
    error = json.loads(reply.content)["error"]
    assert (error["code"], error["action"]) == ("input_invalid", "start")
    assert len(error["message"]) == MAX_ERROR_CHARS
    assert error["message"].endswith("…")
    assert reply.details == {"extra": 1, "action": "start", "code": "input_invalid"}
    odd = json.loads(error_reply("x", "a" * 1000, "c").content)["error"]
    assert "action" not in odd  # a junk action is not echoed


def test_bounded_wraps_a_plain_error_and_cuts_a_long_reply() -> None:
    wrapped = bounded(ToolReply("nope", {"action": "pause"}, is_error=True))
    assert json.loads(wrapped.content) == {"error": {"code": "refused", "message": "nope",
                                                     "action": "pause"}}
    long = bounded(ToolReply("y" * (MAX_REPLY_CHARS + 10)))
    assert len(long.content) == MAX_REPLY_CHARS
    same = ToolReply("fine")
    assert bounded(same) is same


def test_codes_follow_what_the_caller_should_do() -> None:
    assert code_of(NotFoundError("x")) == "not_found"
    assert code_of(InputError("x")) == "invalid_call"
    assert code_of(TemporaryError("x")) == "try_again"
    assert code_of(DefinitionInvalid("x")) == "failed"
