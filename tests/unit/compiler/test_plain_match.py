"""compiler/_plainmatch.py against jsonschema (issue 34 item 11): a value it calls a
match, the 2020-12 validator (wfrun's bounded one) finds no error in; and the common
run inputs are matched without jsonschema, so `validation_errors` need not load it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.compiler._jsonschemas import validation_errors
from runner.compiler._plainmatch import plainly_matches
from runner.compiler._schemarefs import bounded_validator

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from([0.0, 1.0, 2.5, -1.5])
    | st.sampled_from(["", "a", "ab", "abc", "x" * 6]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
    max_leaves=8)
TYPES = st.sampled_from(["string", "object", "array", "boolean", "null", "number",
                         "integer"])


def _schemas(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keyword = st.one_of(
        st.tuples(st.just("type"), TYPES | st.lists(TYPES, min_size=1, max_size=3,
                                                    unique=True)),
        st.tuples(st.just("properties"),
                  st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)),
        st.tuples(st.just("additionalProperties"), inner),
        st.tuples(st.just("required"), st.lists(st.sampled_from(["a", "b", "c"]),
                                                unique=True, max_size=3)),
        st.tuples(st.just("items"), inner),
        st.tuples(st.just("enum"), st.lists(JSON_VALUES, max_size=3)),
        st.tuples(st.sampled_from(["minLength", "maxLength"]), st.integers(0, 4)),
        st.tuples(st.sampled_from(["minimum", "maximum"]),
                  st.integers(-3, 3) | st.sampled_from([0.5, -0.5])),
        st.tuples(st.sampled_from(["description", "title"]), st.just("text")),
        st.tuples(st.just("default"), JSON_VALUES),
        st.tuples(st.just("pattern"), st.just("^a")),  # not plain: always jsonschema's
    )
    return st.lists(keyword, max_size=4).map(dict)


SCHEMAS = st.recursive(st.booleans() | _schemas(st.just(True)), _schemas, max_leaves=6)


@SETTINGS
@given(schema=SCHEMAS, value=JSON_VALUES)
def test_a_plain_match_is_a_match_for_jsonschema(schema: Any, value: Any) -> None:
    errors = list(bounded_validator(schema).iter_errors(value))
    if plainly_matches(schema, value):
        assert errors == [], (schema, value)
    # Either way the answer is jsonschema's.
    assert (validation_errors(schema, value) == []) == (errors == [])


GREET = {"type": "object", "properties": {"name": {"type": "string"}}}
TYPICAL = [
    (GREET, {"name": "bench"}),
    (GREET, {}),
    ({"type": "object", "required": ["repo"], "additionalProperties": False,
      "properties": {"repo": {"type": "string", "minLength": 1},
                     "count": {"type": "integer", "minimum": 1, "maximum": 10},
                     "mode": {"enum": ["fast", "slow"]},
                     "tags": {"type": "array", "items": {"type": "string"}},
                     "dry_run": {"type": "boolean", "default": False}}},
     {"repo": "r", "count": 3, "mode": "fast", "tags": ["a"], "dry_run": True}),
    ({"type": ["string", "null"]}, None),
    ({"type": "integer"}, 2.0),  # 2.0 is an integer for the 2020-12 type checker
]


def test_typical_run_inputs_match_plainly() -> None:
    for schema, value in TYPICAL:
        assert plainly_matches(schema, value), (schema, value)
        assert list(bounded_validator(schema).iter_errors(value)) == []


def test_what_is_not_plain_is_left_to_jsonschema() -> None:
    assert not plainly_matches(GREET, {"name": 3})  # a mismatch: jsonschema words it
    assert not plainly_matches({"type": "integer"}, True)
    assert not plainly_matches({"type": "number"}, "1")
    assert not plainly_matches({"pattern": "^a"}, "abc")  # regexes run bounded there
    assert not plainly_matches({"$ref": "#/$defs/a", "$defs": {"a": True}}, 1)
    assert not plainly_matches({"enum": [1, 2]}, 1)  # JSON equality of numbers is its own
    assert not plainly_matches({"additionalProperties": True,
                                "patternProperties": {"^x": False}}, {"x": 1})
    assert validation_errors(GREET, {"name": 3}) == ["$.name: expected string, got integer"]


def test_a_plain_match_loads_no_jsonschema() -> None:
    code = ("import json, sys\n"
            "from runner.compiler._jsonschemas import validation_errors\n"
            f"assert validation_errors({GREET!r}, {{'name': 'x'}}) == []\n"
            "print(json.dumps(sorted(m for m in sys.modules\n"
            "                        if m.split('.')[0] in ('jsonschema', 'referencing'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert json.loads(out.stdout) == []
