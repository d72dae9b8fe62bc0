"""How a YAML value reads in a message and as a switch key: stdlib only, so the run
loop's routing (engine/_routing.py) and the kind rows use them without loading the
checker and the template checks behind it.
"""

from __future__ import annotations

from typing import Any


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def case_key(value: Any) -> str:
    """Switch values compare as strings: true -> 'true', 3 -> '3', null -> 'null'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
