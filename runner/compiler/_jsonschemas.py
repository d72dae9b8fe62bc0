"""JSON Schemas inside definitions (`input`, agent `output`): checked and applied.

Checking a schema against the 2020-12 meta-schema is the slow part of loading a
file, and the same small schemas recur across a corpus, so results are cached
by canonical text.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from runner._canonical import canonical_json

from ._plainmatch import plainly_matches
from ._schemarefs import ref_problem

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

# jsonschema is imported where it is first needed: it takes a noticeable share of
# a short command's start-up, and most definitions never need it (see below).


def canonical(value: Any) -> str:
    """The cache key of a schema: its canonical JSON (`runner._canonical`)."""
    return canonical_json(value)


def schema_problem(schema: dict[str, Any]) -> str | None:
    found = schema_problem_at(schema)
    return found[0] if found else None


def schema_problem_at(schema: dict[str, Any]) -> tuple[str, tuple[str | int, ...]] | None:
    """(message, path of the offending key inside the schema), or None when valid."""
    try:
        key = canonical(schema)
    except (TypeError, ValueError):
        return "it contains values that are not JSON", ()
    return _problem(key)


@lru_cache(maxsize=4096)
def _problem(key: str) -> tuple[str, tuple[str | int, ...]] | None:
    schema = json.loads(key)
    if _plainly_valid(schema):
        return None
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        path = tuple(exc.absolute_path)
        where = "/".join(str(p) for p in path)
        return f"{exc.message}" + (f" (at {where})" if where else ""), path
    except RecursionError:
        return "it is nested too deeply", ()
    return ref_problem(schema)


# The meta-schema check walks `$dynamicRef`s and costs about a millisecond per
# schema. Most schemas in definitions use only the keywords below; one built
# from them alone whose values pass these checks is valid against the 2020-12
# meta-schema, so it skips the walk. Anything else (another keyword, a value
# that fails a check) takes the full check, which also words the message.
_SIMPLE_TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})


def _is_type(v: Any) -> bool:
    if isinstance(v, str):
        return v in _SIMPLE_TYPES
    return (isinstance(v, list) and bool(v)
            and all(isinstance(t, str) and t in _SIMPLE_TYPES for t in v)
            and len(set(v)) == len(v))


def _is_unique_strings(v: Any) -> bool:
    return (isinstance(v, list) and all(isinstance(s, str) for s in v)
            and len(set(v)) == len(v))


def _is_count(v: Any) -> bool:
    return type(v) is int and v >= 0


def _is_number(v: Any) -> bool:
    return type(v) in (int, float)


def _is_regex(v: Any) -> bool:
    """What the meta-schema's `format: regex` asks of `pattern`: jsonschema's check is
    `re.compile` too. (A controller's spec usually has one: the built-in pull-request
    controller's does, and every host compiles it.)"""
    if not isinstance(v, str):
        return False
    import re

    try:
        re.compile(v)
    except (re.error, RecursionError, OverflowError):
        return False  # the full check words the message
    return True


_VALUE_CHECKS: dict[str, Any] = {
    "type": _is_type,
    "enum": lambda v: isinstance(v, list),
    "const": lambda v: True,
    "default": lambda v: True,
    "examples": lambda v: isinstance(v, list),
    "title": lambda v: isinstance(v, str),
    "description": lambda v: isinstance(v, str),
    "format": lambda v: isinstance(v, str),
    "pattern": _is_regex,
    "required": _is_unique_strings,
    **dict.fromkeys(("minLength", "maxLength", "minItems", "maxItems", "minProperties",
                     "maxProperties"), _is_count),
    **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"),
                    _is_number),
    **dict.fromkeys(("uniqueItems", "deprecated", "readOnly", "writeOnly"),
                    lambda v: isinstance(v, bool)),
}
_SUBSCHEMA_KEYS = frozenset({"items", "additionalProperties", "not", "if", "then", "else"})
_SUBSCHEMA_LIST_KEYS = frozenset({"anyOf", "oneOf", "allOf"})


def _plainly_valid(schema: Any, depth: int = 0) -> bool:
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict) or depth > 32:
        return False
    for k, v in schema.items():
        check = _VALUE_CHECKS.get(k)
        if check is not None:
            if not check(v):
                return False
        elif k in _SUBSCHEMA_KEYS:
            if not _plainly_valid(v, depth + 1):
                return False
        elif k == "properties":
            if not isinstance(v, dict) or not all(
                    _plainly_valid(sub, depth + 1) for sub in v.values()):
                return False
        elif k in _SUBSCHEMA_LIST_KEYS:
            if not isinstance(v, list) or not v or not all(
                    _plainly_valid(sub, depth + 1) for sub in v):
                return False
        else:
            return False
    return True


@lru_cache(maxsize=1024)
def _validator(key: str) -> Draft202012Validator:
    from ._schemarefs import bounded_validator

    return bounded_validator(json.loads(key))


def validator_for(schema: dict[str, Any]) -> Draft202012Validator:
    """A cached validator with wfrun's bounds (regexes under a timeout, local refs)."""
    return _validator(canonical(schema))


def validation_errors(schema: dict[str, Any] | Any, value: Any, limit: int = 5) -> list[str]:
    """Human messages for why `value` does not match `schema` (empty when it does), each
    one short line that quotes no more than a few characters of the value."""
    if plainly_matches(schema, value):  # sure of a match: jsonschema need not load
        return []
    from referencing.exceptions import Unresolvable

    validator = _validator(canonical(schema))
    try:
        errors = sorted(validator.iter_errors(value),
                        key=lambda e: [str(p) for p in e.absolute_path])
    except Unresolvable as exc:  # compiled schemas are checked; a hand-made one may not be
        return [f"value: the schema refers to something it does not hold ({exc})"]
    except RecursionError:
        return ["value: the schema or the value nests too deeply to check"]
    if not errors:
        return []
    from jsonschema.exceptions import best_match

    from ._schemamessages import describe, location

    out = []
    first: ValidationError | None = best_match(errors)
    ordered = [first, *[e for e in errors if e is not first]] if first else errors
    for err in ordered[:limit]:
        # Bounded, JSON-quoted lines: never the value itself (it may be 100 KB).
        out.append(f"{location(err.absolute_path)}: {describe(err)}")
    return out
