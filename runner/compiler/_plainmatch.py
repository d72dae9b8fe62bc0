"""Whether a value plainly matches a simple JSON Schema, without loading jsonschema.

Importing jsonschema (and referencing, attrs, rpds behind it) costs a short command
more CPU than the rest of its start-up together, and most run inputs are checked
against schemas such as `{type: object, properties: {name: {type: string}}}`. This
check answers True only when it is sure the 2020-12 validator would report no error:
every keyword it meets is one of the few below and the value satisfies it. Anything
else (another keyword, a value that fails, a number type it does not know) answers
False, and the caller asks jsonschema, which also words the errors. So a True here
never changes a verdict; tests/unit/compiler/test_plain_match.py compares the two.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Keywords that only annotate: the validator asserts nothing for them.
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "deprecated",
                          "readOnly", "writeOnly", "$comment"})
_MAX_DEPTH = 32


def _number(v: Any) -> bool:
    return type(v) in (int, float)


_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": _number,
    # As jsonschema's draft 2020-12 type checker: 1.0 is an integer, True is not.
    "integer": lambda v: type(v) is int or (type(v) is float and v.is_integer()),
}


def plainly_matches(schema: Any, value: Any, depth: int = 0) -> bool:
    """True only if `value` surely matches `schema` (False: ask jsonschema)."""
    if schema is True:
        return True
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return False
    for key, rule in schema.items():
        if key in _ANNOTATIONS:
            continue
        check = _KEYWORDS.get(key)
        if check is None or not check(schema, rule, value, depth):
            return False
    return True


def _type(schema: dict[str, Any], rule: Any, value: Any, depth: int) -> bool:
    names = [rule] if isinstance(rule, str) else rule
    if not isinstance(names, list):
        return False
    return any(isinstance(n, str) and n in _TYPES and _TYPES[n](value) for n in names)


def _properties(schema: dict[str, Any], rule: Any, value: Any, depth: int) -> bool:
    if not isinstance(rule, dict):
        return False
    if not isinstance(value, dict):
        return True  # applies to objects only
    return all(plainly_matches(rule[k], v, depth + 1) for k, v in value.items() if k in rule)


def _additional(schema: dict[str, Any], rule: Any, value: Any, depth: int) -> bool:
    if "patternProperties" in schema:
        return False
    if not isinstance(value, dict):
        return True
    named = schema.get("properties", {})
    if not isinstance(named, dict):
        return False
    return all(plainly_matches(rule, v, depth + 1) for k, v in value.items() if k not in named)


def _required(schema: dict[str, Any], rule: Any, value: Any, depth: int) -> bool:
    if not isinstance(rule, list) or not all(isinstance(k, str) for k in rule):
        return False
    return not isinstance(value, dict) or all(k in value for k in rule)


def _items(schema: dict[str, Any], rule: Any, value: Any, depth: int) -> bool:
    if "prefixItems" in schema:
        return False
    return not isinstance(value, list) or all(plainly_matches(rule, v, depth + 1)
                                              for v in value)


def _enum(schema: dict[str, Any], rule: Any, value: Any, depth: int) -> bool:
    # Strings only: JSON equality of numbers, booleans and containers is jsonschema's.
    return isinstance(rule, list) and isinstance(value, str) and value in (
        e for e in rule if isinstance(e, str))


def _length(least: bool) -> Callable[[dict[str, Any], Any, Any, int], bool]:
    def check(schema: dict[str, Any], rule: Any, value: Any, depth: int) -> bool:
        if type(rule) is not int:
            return False
        if not isinstance(value, str):
            return True
        return len(value) >= rule if least else len(value) <= rule
    return check


def _bound(least: bool) -> Callable[[dict[str, Any], Any, Any, int], bool]:
    def check(schema: dict[str, Any], rule: Any, value: Any, depth: int) -> bool:
        if not _number(rule):
            return False
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return isinstance(value, (bool, str, list, dict)) or value is None
        return bool(value >= rule if least else value <= rule)
    return check


_KEYWORDS: dict[str, Callable[[dict[str, Any], Any, Any, int], bool]] = {
    "type": _type, "properties": _properties, "additionalProperties": _additional,
    "required": _required, "items": _items, "enum": _enum,
    "minLength": _length(True), "maxLength": _length(False),
    "minimum": _bound(True), "maximum": _bound(False),
}
