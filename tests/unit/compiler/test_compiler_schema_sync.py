"""The published JSON Schema (`wfrun schema`) and the compiler agree on the format."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from compiler_corpus import INVALID_FILES, VALID_FILES, expectations

from runner.compiler import Compiler
from runner.compiler._checker import FILE_HOOK_RE, ID_RE, MODULE_HOOK_RE, STEP_NAME_RE
from runner.compiler._durations import DurationError, parse_duration
from runner.compiler._kinds import KINDS, authored_kinds
from runner.compiler._parse import PATH_RE
from runner.compiler._schema import (
    DEFAULTS_KEYS,
    EDGE_KEYS,
    EXIT_KEYS,
    INCLUDE_KEYS,
    NODE_COMMON_KEYS,
    RETRY_KEYS,
    SWITCH_KEYS,
    TOP_KEYS,
    workflow_schema,
)
from runner.compiler._yamlio import YamlProblem, load

SCHEMA = workflow_schema()
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
SHAPE_CODES = {"unknown-key", "missing-key", "wrong-type", "missing-kind", "multiple-kinds",
               "edge-form", "action-form", "compute-form"}


def _as_json(path: Path) -> Any:
    """The document as an editor's schema validator sees it: JSON, keys as strings."""
    text = path.read_bytes().decode("utf-8").lstrip("\ufeff")
    return json.loads(json.dumps(load(text, path.name)))


def _object(schema: dict[str, Any]) -> dict[str, Any]:
    """The mapping form of a schema that may also accept a shorthand (anyOf)."""
    if "properties" in schema:
        return schema
    objects = [s for s in schema.get("anyOf", []) if "properties" in s]
    assert len(objects) == 1, schema
    return objects[0]


def _keys(schema: dict[str, Any]) -> set[str]:
    obj = _object(schema)
    assert obj.get("additionalProperties") is False, "the schema must reject unknown keys"
    return set(obj["properties"])


def test_schema_is_valid_2020_12() -> None:
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    json.dumps(SCHEMA)  # and plain JSON


def test_key_sets_equal_the_compiler_tables() -> None:
    props = SCHEMA["properties"]
    assert _keys(SCHEMA) == set(TOP_KEYS)
    assert _keys(props["defaults"]) == set(DEFAULTS_KEYS)
    assert props["nodes"]["additionalProperties"] == {"$ref": "#/$defs/node"}
    node = SCHEMA["$defs"]["node"]
    assert _keys(node) == set(authored_kinds()) | set(NODE_COMMON_KEYS)
    assert _keys(node["properties"]["retry"]) == set(RETRY_KEYS)
    assert _keys(props["defaults"]["properties"]["retry"]) == set(RETRY_KEYS)
    for kind in authored_kinds():  # the body keys the parser suggests are the schema's
        assert _keys(node["properties"][kind]) == set(KINDS[kind].keys), kind
    edge = props["edges"]["items"]
    assert _keys(edge) == set(EDGE_KEYS)
    assert _keys(edge["properties"]["switch"]) == set(SWITCH_KEYS)
    assert _keys(props["includes"]["additionalProperties"]) == set(INCLUDE_KEYS)
    assert _keys(props["exits"]["additionalProperties"]) == set(EXIT_KEYS)


def test_patterns_equal_the_compiler_patterns() -> None:
    props = SCHEMA["properties"]
    assert props["nodes"]["propertyNames"]["pattern"] == ID_RE.pattern
    on = props["edges"]["items"]["properties"]["switch"]["properties"]["on"]["pattern"]
    samples = ["$", "$.a", "$output", "$output.a.b-c", "$result.outcome", "$result", "$.",
               "$x", "output.a", "$output.a b", "$.a.", "$$", "$result.outcome.x", "$.1"]
    for s in samples:
        assert bool(re.fullmatch(on, s)) == bool(PATH_RE.match(s)), s


@pytest.mark.parametrize("value", ["30s", "15m", "2h", "1h30m", "250ms", "2d", "1.5h",
                                   " 30s ", "1h 30m", 90, 0.5, None])
def test_every_duration_the_compiler_accepts_passes_the_schema(value: Any) -> None:
    parse_duration(value)  # accepted by the compiler...
    node = {"agent": "hi", "timeout": value}
    errors = list(VALIDATOR.iter_errors({"start": "a", "nodes": {"a": node}}))
    assert errors == [], [e.message for e in errors]  # ...so the schema accepts it too


@pytest.mark.parametrize("value", ["5 minutes", "soon", "-1s", "30", True, [], "0s", 0])
def test_durations_the_compiler_rejects(value: Any) -> None:
    with pytest.raises(DurationError):
        parse_duration(value)


@pytest.mark.parametrize("ref", ["json:dumps", "pkg.mod:run", "./hooks.py:f",
                                 "../shared/h.py:go_2", "pkg:bad name", "hooks.py", "./h.py",
                                 "./h.txt:f", "mod:1f", ":f", "http", "my-step", "1http"])
def test_hook_pattern_matches_the_compiler(ref: str) -> None:
    compiler_ok = bool(MODULE_HOOK_RE.match(ref) or FILE_HOOK_RE.match(ref)
                       or STEP_NAME_RE.match(ref))
    doc = {"start": "a", "nodes": {"a": {"compute": {"call": ref}}}}
    assert VALIDATOR.is_valid(doc) == compiler_ok


@pytest.mark.parametrize("path", VALID_FILES, ids=lambda p: p.name)
def test_every_valid_fixture_passes_the_schema(path: Path) -> None:
    errors = sorted(VALIDATOR.iter_errors(_as_json(path)), key=lambda e: list(e.path))
    assert errors == [], [f"{list(e.path)}: {e.message}" for e in errors]


def _own_codes(path: Path) -> set[str]:
    """Codes annotated for the file itself (not for a child it includes)."""
    return {code for file, code, _, _ in expectations(path) if file.endswith("/" + path.name)}


SHAPE_FIXTURES = [p for p in INVALID_FILES if _own_codes(p) & SHAPE_CODES]


def test_there_are_shape_fixtures_for_every_shape_code() -> None:
    seen = {code for p in SHAPE_FIXTURES for code in _own_codes(p)}
    assert seen >= SHAPE_CODES


@pytest.mark.parametrize("path", SHAPE_FIXTURES, ids=lambda p: p.name)
def test_every_shape_mistake_fails_the_schema(path: Path) -> None:
    try:
        data = _as_json(path)
    except YamlProblem as problem:  # pragma: no cover - shape fixtures are all YAML
        pytest.fail(f"{path.name} is not YAML: {problem}")
    assert not VALIDATOR.is_valid(data), f"the schema accepts {path.name}"


# The schema's required keys are the compiler's: dropping one is a missing-key error.
BASE: dict[str, Any] = {
    "start": "a",
    "nodes": {
        "a": {"agent": {"prompt": "hi"}, "retry": {"attempts": 2}},
        "b": {"decision": {"question": "q?", "choices": ["x"]}},
        "c": {"notify": {"message": "m"}},
        "m": {"agent": "x"},
    },
    "includes": {"inc": {"workflow": "./child.yaml"}},
    "edges": [{"from": "a", "to": "b"},
              {"from": "b", "switch": {"on": "$.route", "cases": {"x": "c"}}},
              {"from": "c", "to": "inc"}, {"from": "inc.out", "to": "m"}],
    "exits": {"out": {"from": "m"}},
}


def _required_paths(schema: dict[str, Any], doc: Any, prefix: tuple[Any, ...] = (),
                    ) -> list[tuple[Any, ...]]:
    """(path to key) for every required key the schema declares along the document."""
    out: list[tuple[Any, ...]] = []
    if not isinstance(doc, dict):
        return out
    if "$ref" in schema:  # the only one: a node ("#/$defs/node")
        schema = SCHEMA["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    candidates = [schema, *schema.get("anyOf", [])]
    for s in candidates:
        props = s.get("properties", {})
        extra = s.get("additionalProperties")
        extra = extra if isinstance(extra, dict) else None
        if not props and extra is None:
            continue
        out += [(*prefix, k) for k in s.get("required", []) if k in doc]
        for k, v in doc.items():
            sub = props.get(k, extra)
            if sub is None:
                continue
            if isinstance(v, list) and "items" in sub:
                for i, item in enumerate(v):
                    out += _required_paths(sub["items"], item, (*prefix, k, i))
            else:
                out += _required_paths(sub, v, (*prefix, k))
    return out


REQUIRED = _required_paths(SCHEMA, BASE)


def test_base_document_is_valid_everywhere(tmp_path: Path) -> None:
    assert VALIDATOR.is_valid(BASE)
    (tmp_path / "child.yaml").write_text("start: m\nnodes:\n  m: {agent: x}\nexits:\n  out: m\n")
    path = tmp_path / "base.yaml"
    path.write_text(json.dumps(BASE))
    result = Compiler().compile_path(path)
    assert result.valid, result.diagnostics
    assert len(REQUIRED) >= 10


@pytest.mark.parametrize("key_path", REQUIRED, ids=lambda kp: "/".join(map(str, kp)))
def test_dropping_a_required_key_is_a_missing_key(tmp_path: Path,
                                                  key_path: tuple[Any, ...]) -> None:
    doc = json.loads(json.dumps(BASE))
    parent = doc
    for part in key_path[:-1]:
        parent = parent[part]
    del parent[key_path[-1]]
    assert not VALIDATOR.is_valid(doc)
    (tmp_path / "child.yaml").write_text("start: m\nnodes:\n  m: {agent: x}\nexits:\n  out: m\n")
    path = tmp_path / "base.yaml"
    path.write_text(json.dumps(doc))
    codes = {d.code for d in Compiler().compile_path(path).diagnostics}
    assert "missing-key" in codes, codes
