"""How a YAML value reads in a message and as a switch key: stdlib only, so the run
loop's routing (engine/_routing.py) and the kind rows use them without loading the
checker and the template checks behind it.
"""

from __future__ import annotations

from typing import Any

#: In order: bool before int, as a bool is an int to isinstance.
_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
    (list, "a list"), (dict, "a mapping"))


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    for kind, name in _TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def case_key(value: Any) -> str:
    """Switch values compare as strings: true -> 'true', 3 -> '3', null -> 'null'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
