"""Schemas from other people's YAML (issue 10 item 7): no network `$ref`, cycles and
unresolvable references are diagnostics, `pattern`s run with a bound, and an invalid
schema's error sits on the offending key's line."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from runner.compiler._jsonschemas import schema_problem_at, validation_errors
from runner.compiler._schemarefs import bounded_validator

REFUSED = [
    ({"$ref": "http://127.0.0.1:9/schema.json"}, "points outside"),
    ({"properties": {"a": {"$ref": "https://example.com/x"}}}, "points outside"),
    ({"$ref": "other.json#/x"}, "points outside"),
    ({"$ref": "#/$defs/missing"}, "does not point at anything"),
    ({"$ref": "#nowhere"}, "does not point at anything"),
    ({"$ref": "#"}, "loops back"),
    ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
      "$ref": "#/$defs/a"}, "loops back"),
    ({"$defs": {"a": {"not": {"$ref": "#/$defs/a"}}}, "$ref": "#/$defs/a"}, "loops back"),
]


@pytest.mark.parametrize(("schema", "message"), REFUSED)
def test_references_wfrun_will_not_follow_are_diagnostics(schema: dict[str, Any],
                                                          message: str) -> None:
    found = schema_problem_at(schema)
    assert found is not None
    assert message in found[0]
    assert found[1][-1] in ("$ref", "$dynamicRef")


def test_recursive_schemas_that_consume_input_are_fine() -> None:
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
        "$ref": "#/$defs/node"}
    assert schema_problem_at(tree) is None
    anchored = {"$defs": {"n": {"$anchor": "num", "type": "integer"}}, "$ref": "#num"}
    assert schema_problem_at(anchored) is None
    assert validation_errors(tree, {"children": [{"children": []}]}) == []
    assert validation_errors(anchored, "x")


class _Silent(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"type": "integer"}')

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Silent)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_validation_never_fetches_a_remote_ref(server: str) -> None:
    _Silent.hits.clear()
    schema = {"properties": {"a": {"$ref": f"{server}/s.json"}}}
    errors = validation_errors(schema, {"a": "x"})
    assert errors
    assert "does not hold" in errors[0]
    assert _Silent.hits == []  # a real server was there to answer: nobody asked


def test_catastrophic_patterns_are_bounded() -> None:
    # The issue's `^(a+)+$` (7 s on 26 characters in `re`) is linear in `regex`.
    assert validation_errors({"pattern": "^(a+)+$"}, "a" * 26 + "!")
    # This one backtracks exponentially in both engines: the timeout ends it.
    evil = {"type": "string", "pattern": "^(a|aa)+$"}
    errors = validation_errors(evil, "a" * 60 + "!")
    assert len(errors) == 1
    assert "ran longer than" in errors[0]
    props = {"type": "object", "patternProperties": {"^(a|aa)+$": {"type": "integer"}},
             "additionalProperties": False}
    assert any("ran longer than" in e for e in validation_errors(props, {"a" * 60 + "!": 1}))


UNEVALUATED = {"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}},
               "unevaluatedProperties": False}


@pytest.mark.timeout(30)  # `re` takes minutes on this key: a regression fails, not hangs
def test_unevaluated_properties_match_pattern_properties_with_the_bound() -> None:
    key = "a" * 30 + "!"
    errors = validation_errors(UNEVALUATED, {key: 1})
    assert len(errors) == 1
    assert f"{json.dumps(key)} was unexpected" in errors[0]
    assert validation_errors(UNEVALUATED, {"a" * 30: 1, "aaa": 2}) == []
    assert validation_errors(UNEVALUATED, {"aaa": "x"})  # matched keys still checked
    evil = {**UNEVALUATED, "patternProperties": {"^(a|aa)+$": {}}}
    slow = validation_errors(evil, {"a" * 60 + "!": 1})
    # patternProperties and unevaluatedProperties each report the slow pattern.
    assert len(slow) == 2
    assert all("ran longer than" in e for e in slow)


@pytest.mark.timeout(30)
def test_unevaluated_properties_follow_refs_and_subschemas() -> None:
    schema = {"$defs": {"x": {"patternProperties": {"^x-": {}}}},
              "allOf": [{"$ref": "#/$defs/x"}], "properties": {"p": {}},
              "if": {"required": ["p"]}, "then": {"properties": {"q": {}}},
              "unevaluatedProperties": False}
    assert validation_errors(schema, {"p": 1, "q": 2, "x-a": 3}) == []
    [error] = validation_errors(schema, {"q": 2, "x-a": 3})
    assert '"q" was unexpected' in error


@pytest.mark.timeout(30)
def test_property_names_patterns_are_bounded() -> None:
    names = {"type": "object", "propertyNames": {"pattern": "^(a|aa)+$"}}
    [slow] = validation_errors(names, {"a" * 60 + "!": 1})
    assert "ran longer than" in slow
    assert validation_errors({"propertyNames": {"pattern": "^(a+)+$"}}, {"a" * 30: 1}) == []


def test_patterns_still_match() -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string", "pattern": r"^\d+$"}},
              "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False}
    assert validation_errors(schema, {"v": "123", "x-a": 1}) == []
    errors = validation_errors(schema, {"v": "12a", "x-a": "s", "other": 1})
    assert len(errors) == 3
    joined = " ".join(errors)
    assert "does not match" in joined
    assert '"other"' in joined
    bounded_validator({"type": "integer"}).validate(3)


def test_an_invalid_output_schema_is_placed_on_the_offending_key(tmp_path: Path) -> None:
    from runner.compiler import Compiler

    path = tmp_path / "w.yaml"
    path.write_text("start: a\nnodes:\n  a:\n    agent:\n      prompt: hi\n      output:\n"
                    "        type: object\n        properties:\n          name:\n"
                    "            type: strnig\n")
    result = Compiler(None).compile_path(path)
    [diag] = [d for d in result.diagnostics if d.code == "invalid-schema"]
    assert (diag.line, diag.column) == (10, 19)


@pytest.mark.parametrize("pattern", ["^[0-9a-f]{7,64}$", "(", "a{2,1}", 7, "(?P<x>a)(?P<x>b)"])
def test_a_pattern_is_judged_as_the_meta_schema_check_judges_it(pattern: object) -> None:
    """`pattern` takes the fast path (no jsonschema import) only when valid; the verdict
    is the full check's either way (jsonschema's regex format is `re.compile`)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    from runner.compiler._jsonschemas import _plainly_valid

    schema = {"type": "object", "properties": {"sha": {"type": "string", "pattern": pattern}}}
    try:
        Draft202012Validator.check_schema(schema)
        valid = True
    except SchemaError:
        valid = False
    assert _plainly_valid(schema) is valid
    assert (schema_problem_at(schema) is None) is valid
