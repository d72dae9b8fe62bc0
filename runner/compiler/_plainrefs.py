"""Plain references rendered without Jinja: `{{ event.body.ref }}`, `{{ a['b'][0] }}`.

Most expressions a run's or a trigger's input maps are one reference into the
context (`{{ event.body.pull_request.number }}`). Rendering one through the
sandbox costs a context copy, a generator, a guard per attribute and, for a
string value, a parse by `ast.literal_eval` (Jinja's native mode turns a lone
string that reads as a Python literal, `"42"` or `"[1, 2]"`, into that value).
`resolve` gives the same value directly, and `MISS` (render it with Jinja)
wherever the two could differ: a name the context does not hold as a plain key,
an attribute that is also a method of `dict` (`event.body.items` is the method
in Jinja), a value that is not a `dict` or `list`, an index out of range, a
missing key (Jinja's message for it is the one shown). Results are checked
side by side with Jinja in tests/unit/compiler/test_plain_refs.py.
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Mapping
from typing import Any

#: Rendered by Jinja, not here: a sentinel no context value can be.
MISS: Any = object()

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_STEP = rf"\.{_NAME}|\[(?:'[^'\\\n]*'|\"[^\"\\\n]*\"|-?(?:0|[1-9][0-9]*))\]"
_WHOLE = re.compile(rf"\{{\{{\s*({_NAME})((?:{_STEP})*)\s*\}}\}}\Z", re.ASCII)
_STEPS = re.compile(rf"\.({_NAME})|\[(?:'([^'\\\n]*)'|\"([^\"\\\n]*)\"|(-?[0-9]+))\]",
                    re.ASCII)
#: Names Jinja reads as something else than a context key (constants, operators,
#: the template's own `self`, loop and macro names): always Jinja's.
_JINJA_NAMES = frozenset({"true", "false", "none", "True", "False", "None", "and", "or",
                          "not", "in", "is", "if", "else", "self", "loop", "caller",
                          "varargs", "kwargs", "super"})
#: `obj.name` on a dict is its method when dict has one (the sandbox tries the
#: attribute first), the key only otherwise.
_DICT_ATTRS = frozenset(dir(dict))
#: A string `ast.literal_eval` cannot read, told by its start without a parse (a
#: parse costs ~25 us): a literal opens with a digit, a sign, a point, a bracket, a
#: quote or a word (True, False, None, set(), a string's b/r/u/f prefix and its
#: quote), a comment or a line's continuation (`"#\\n42"` reads as 42); any other
#: word is a name, any other punctuation no literal at all.
_NOT_LITERAL_START = frozenset(string.punctuation) - frozenset(".+-([{'\"#\\")
_LITERAL_WORD = re.compile(r"True|False|None|set\b|[bBrRuUfF]{1,2}['\"]")

#: (is an item read, key): `.name` is an attribute read (the sandbox tries the
#: attribute first), `['key']` and `[0]` item reads.
Step = tuple[bool, str | int]
Path = tuple[str, tuple[Step, ...]]


def parse(text: str) -> Path | None:
    """(head name, steps) when `text` is one plain reference, else None."""
    found = _WHOLE.match(text)
    if found is None:
        return None
    head, rest = found.group(1), found.group(2)
    if head in _JINJA_NAMES:
        return None
    steps: list[Step] = []
    for step in _STEPS.finditer(rest):
        attr, single, double, index = step.groups()
        if attr is not None:
            if attr in _JINJA_NAMES:
                return None
            steps.append((False, attr))
        elif index is not None:
            steps.append((True, int(index)))
        else:
            steps.append((True, single if single is not None else double))
    return head, tuple(steps)


def resolve(path: Path, context: Mapping[str, Any]) -> Any:
    """The value the reference reads, as Jinja's sandbox reads it, or MISS. Jinja's
    native mode then reads a string as a literal (`literal`) and the budget checks
    both: the caller's part."""
    if type(context) is not dict:
        return MISS  # Jinja copies a Mapping with dict(); a plain dict reads the same
    head, steps = path
    value = context.get(head, MISS)
    for item, key in steps:
        if value is MISS:
            return MISS
        if item:
            value = _item(value, key)
        elif type(value) is dict and key not in _DICT_ATTRS:
            value = value.get(key, MISS)
        else:
            return MISS
    return value


def _item(value: Any, key: str | int) -> Any:
    """`value[key]` as the sandbox reads it (the item first) where it has one."""
    if type(value) is dict:
        return value.get(key, MISS)
    if type(value) is list and type(key) is int:
        return value[key] if -len(value) <= key < len(value) else MISS
    return MISS


def literal(raw: str) -> Any:
    """What Jinja's native mode makes of a lone string: the Python literal it reads
    as (`"42"` is 42), else the string itself (jinja2.nativetypes.native_concat)."""
    first = raw[:1]
    if first in _NOT_LITERAL_START or (first.isascii() and first.isalpha()
                                       and _LITERAL_WORD.match(raw) is None):
        return raw
    try:
        return ast.literal_eval(ast.parse(raw, mode="eval"))
    except (ValueError, SyntaxError, MemoryError):
        return raw
