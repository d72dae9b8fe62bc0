"""What a C-level call of a template will allocate, estimated before the call.

`str.format`, `%`, `translate`, `split`, `list(...)` and friends run in C: once
called, nothing can stop them until they return, so a check of the result comes
after the gigabytes (issue 35 item 3). Each estimate here is an upper bound, or
close to one, computed from the arguments without building anything; `Guard.size`
refuses it before the call. The results are checked as well (`Guard.value`), so a
loop that grows a value a little per step still stops at the budget. The sandbox's
filters and str methods have their arguments checked here (`check_filter`,
`check_call`), through the part of the guard they need (`budget.Sizes`).

A list a call builds from a string holds a new object per item: an item weighs
`ITEM` characters here (pointer and object header), so `(s * 32) | list` is refused
at about a million items rather than at sixteen million (over 1 GB).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jinja2.sandbox import SandboxedFormatter

from ._budget import Sizes, check_format_widths, check_int_args, weight

#: The weight of one item a call creates (a list slot and a small object's header).
ITEM = 16
# The digits Python prints for the largest float ('%f' % 1e308), with sign and point.
_FLOAT_DIGITS = 330
# Any other object printed: its repr is refused past this many characters per item.
_OBJECT_TEXT = 200


def text_size(value: Any, limit: int) -> int:
    """At least the length of `str(value)` (its repr inside containers), counting
    past `limit` no further. A string that is not printable may be escaped in a repr
    (`\\U000e0001` is ten characters for one)."""
    total = 0
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack and total <= limit:
        v, inner = stack.pop()
        if isinstance(v, str):
            total += len(v) if not inner else _repr_size(v)
        elif isinstance(v, (bytes, bytearray)):
            total += 4 * len(v) + 3
        elif isinstance(v, bool) or v is None:
            total += 5
        elif isinstance(v, int):
            total += v.bit_length() * 3 // 10 + 2
        elif isinstance(v, float):
            total += 25
        elif isinstance(v, (list, tuple, set, frozenset)):
            total += 2 * len(v) + 2
            if total <= limit:  # past it, the stack would only copy a big container
                stack.extend((item, True) for item in v)
        elif isinstance(v, dict):
            total += 4 * len(v) + 2
            if total <= limit:
                stack.extend((item, True) for item in v)
                stack.extend((item, True) for item in v.values())
        else:
            total += _OBJECT_TEXT
    return total


# Up to this length a string's repr is made to measure it (at most ten times as long).
_MEASURED = 65_536


def _repr_size(text: str) -> int:
    if text.isprintable():
        return len(text) + 2 + text.count("\\") + text.count("'")
    if len(text) <= _MEASURED:  # a line break or a tab: the usual case, measured
        return len(repr(text))
    return 10 * len(text) + 2


def materialize(guard: Sizes, value: Any, what: str) -> Any:
    """A lazy iterable (a generator from `map`, `select`, `dict.items()`...) as a list,
    built here one counted item at a time, so the C call after it gets a sized input.
    Strings and sized containers come back as they are."""
    if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset, range)) \
            or not isinstance(value, Iterable):
        return value
    limit = guard.budget.max_size
    out: list[Any] = []
    for item in value:
        if (len(out) + 1) * ITEM > limit:
            guard.size((len(out) + 1) * ITEM, what)
        if len(out) & 1023 == 0:
            guard.tick()
        out.append(item)
    return out


def items_made(guard: Sizes, value: Any, what: str) -> None:
    """A call that makes one object per character or item of `value` (`list`, `sort`,
    `unique`, `batch`... of a string; `split` is `pieces`)."""
    if isinstance(value, str):
        guard.size(len(value) * (ITEM + 1), what)
    else:
        guard.size(weight(value, guard.budget.max_size) + _length(value) * ITEM, what)


def _length(value: Any) -> int:
    try:
        return len(value)
    except TypeError:
        return 0


def pieces(text: str, sep: Any) -> int:
    """The most pieces `split`/`rsplit`/`splitlines` can make of `text`."""
    if isinstance(sep, str) and sep:
        return text.count(sep) + 1
    return len(text) // 2 + 1  # whitespace: a piece needs a separator after it


# -- format specs: `{:>{w}.{p}f}`, resolved, before `format(value, spec)` -----------------

_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>\d*)[,_]?(?:\.(?P<precision>\d*))?"
                   r"[a-zA-Z%]?", re.DOTALL)
_MAX_DIGITS = 30  # a width or precision this long is refused without parsing it


def spec_size(guard: Sizes, value: Any, spec: str) -> int:
    """The most characters `format(value, spec)` can make."""
    natural = text_size(value, guard.budget.max_size)
    if not spec:
        return natural
    found = _SPEC.fullmatch(spec)
    if found is None:  # not the standard mini-language: Python will refuse it
        return natural + len(spec)
    numbers = []
    for key in ("width", "precision"):
        digits = found[key] or ""
        if len(digits) >= _MAX_DIGITS:
            guard.size(10**_MAX_DIGITS, "a format width")
        numbers.append(int(digits) if digits else 0)
    width, precision = numbers
    if isinstance(value, float) or (isinstance(value, int) and found[0][-1:] in "eEfFgG%"):
        natural = _FLOAT_DIGITS
    grouped = natural + natural // 3  # `,` or `_` every three digits
    return max(width, grouped + precision)


class BoundedFormatter(SandboxedFormatter):
    """`str.format` and `format_map` in the sandbox, with every field's size known
    before `format()` runs, and the whole string's too."""

    def __init__(self, env: Any, guard: Sizes) -> None:
        super().__init__(env)
        self.guard = guard
        self.total = 0

    def vformat(self, format_string: str, args: Sequence[Any],
                kwargs: Mapping[str, Any]) -> str:
        self.total = len(format_string)
        self.guard.size(self.total, "a format string")
        return super().vformat(format_string, args, kwargs)

    def format_field(self, value: Any, format_spec: str) -> Any:
        self.guard.tick()
        self.total += spec_size(self.guard, value, format_spec)
        self.guard.size(self.total, "a formatted string")
        return super().format_field(value, format_spec)


# -- printf-style: `'%s%s' % (x, x)`, `'%08.3f' | format(x)` -----------------------------

_PERCENT = re.compile(r"%(?:\((?P<key>[^)]*)\))?[-#0 +]*(?P<width>\*|\d+)?"
                      r"(?:\.(?P<precision>\*|\d+))?[hlL]?(?P<kind>.)?", re.DOTALL)


def percent_size(guard: Sizes, fmt: str, args: Any) -> int:
    """The most characters `fmt % args` can make: the format's own text, each value
    printed, and every width and precision (literal or `*`)."""
    limit = guard.budget.max_size
    values = list(args) if isinstance(args, tuple) else [args]
    total = len(fmt)
    star = iter(values)
    for m in _PERCENT.finditer(fmt):
        if m["kind"] == "%":
            continue
        for key in ("width", "precision"):
            given = m[key]
            if given == "*":
                n = next(star, 0)
                total += abs(n) if isinstance(n, int) else 0
            elif given:
                if len(given) >= _MAX_DIGITS:
                    guard.size(10**_MAX_DIGITS, "a format width")
                total += int(given)
        if total > limit:
            break
    if isinstance(args, Mapping):
        total += text_size(dict(args), limit)
    else:
        total += sum(text_size(v, limit) for v in values)
    return total


# -- text filters: how many characters they can make of their input ---------------------

_HTML = ("&", "<", ">", '"', "'")  # each becomes up to five characters (`&#39;`)


def filter_size(name: str, value: Any, limit: int) -> int | None:
    """The most characters the text filter `name` makes of `value`; None for a filter
    that makes nothing bigger than its input (or is checked elsewhere)."""
    text = value if isinstance(value, str) else None
    if name in ("upper", "lower", "title", "capitalize"):
        if text is not None:  # ASCII maps one to one; 'ß' is 'SS', 'ŉ' is 'ʼN'
            return len(text) if text.isascii() else 3 * len(text)
        return 3 * text_size(value, limit)
    if name in ("escape", "e", "forceescape"):
        if text is not None:
            return len(text) + 4 * sum(text.count(c) for c in _HTML)
        return 6 * text_size(value, limit)
    if name == "shell_quote":
        if text is not None:  # `'` is written `'"'"'`
            return len(text) + 2 + 4 * text.count("'")
        return 5 * text_size(value, limit)
    if name in ("tojson", "pprint"):  # within twice the repr bound (`"` is `\"`)
        return 2 * text_size(value, limit)
    if name == "string":
        return text_size(value, limit)
    if name in ("urlencode", "xmlattr"):  # %XX per UTF-8 byte
        if text is not None:
            return 3 * len(text) if text.isascii() else 12 * len(text)
        return 12 * text_size(value, limit)
    if name == "urlize":
        return 8 * text_size(value, limit)
    if name == "wordwrap":
        return 2 * text_size(value, limit)
    return None


def joined_size(items: Sequence[Any], sep: str, limit: int) -> int:
    """`sep.join(map(str, items))`: strings as they are, anything else printed."""
    total = len(sep) * max(len(items) - 1, 0)
    for item in items:
        total += len(item) if isinstance(item, str) else text_size(item, limit)
        if total > limit:
            break
    return total


# -- str methods ---------------------------------------------------------------------

# Case mappings can make up to three characters of one ('ß'.upper() is 'SS', 'ŉ' 'ʼN').
_CASE = frozenset({"upper", "lower", "title", "capitalize", "swapcase", "casefold"})


def str_method_size(guard: Sizes, owner: str, name: str, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> int | None:
    """What `owner.<name>(*args)` makes, in characters and items; None when the
    method is checked elsewhere or makes nothing bigger than its inputs."""
    limit = guard.budget.max_size
    if name in _CASE:
        return len(owner) if owner.isascii() else 3 * len(owner)
    if name in ("split", "rsplit"):
        sep = args[0] if args else kwargs.get("sep")
        most = args[1] if len(args) > 1 else kwargs.get("maxsplit", -1)
        count = pieces(owner, sep)
        if isinstance(most, int) and most >= 0:
            count = min(count, most + 1)
        return len(owner) + count * ITEM
    if name == "splitlines":
        return len(owner) + (owner.count("\n") + owner.count("\r") + 1) * ITEM
    if name in ("partition", "rpartition"):
        return len(owner) + 3 * ITEM
    if name == "translate" and args:
        return len(owner) * _widest(args[0], limit)
    if name == "encode":
        return 4 * len(owner)
    return None


def _widest(table: Any, limit: int) -> int:
    """The longest replacement in a `translate` table (at least 1)."""
    if isinstance(table, Mapping):
        replacements: Iterable[Any] = table.values()
    elif isinstance(table, (list, tuple, str)):
        replacements = table
    else:
        return limit + 1  # an object of unknown size: refuse
    widest = 1
    for v in replacements:
        if isinstance(v, str):
            widest = max(widest, len(v))
    return widest


# -- the sandbox's filters and str methods: their arguments checked before the call --

def replace_size(s: str, old: str, new: str) -> int:
    """The length of `s.replace(old, new)` at most."""
    if not old:
        return len(s) + (len(s) + 1) * len(new)
    return len(s) + (len(s) // len(old)) * len(new)


def join_items(guard: Sizes, items: Any, sep: str) -> list[Any]:
    """A join's items, built counted, once the joined string's size is known."""
    listed = list(materialize(guard, items, "a join's input"))
    guard.size(joined_size(listed, sep, guard.budget.max_size), "a join")
    return listed


# Filters that read their whole input at once (a lazy one is built first, counted).
_CONSUMING = frozenset({"list", "sort", "unique", "join", "batch", "slice", "reverse", "sum",
                        "min", "max", "groupby", "tojson", "string", "pprint", "length",
                        "count", "last", "random", "dictsort", "urlencode", "xmlattr"})
# Filters that make an object per character or item of their input.
_ITEM_MAKERS = frozenset({"list", "sort", "unique", "batch", "slice", "groupby", "dictsort",
                          "items"})


def check_filter(guard: Sizes, name: str, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Size pre-checks per filter; returns the arguments to call it with."""
    check_int_args(guard, args[1:], kwargs, f"the filter '{name}'")
    if not args:
        return args
    value = args[0]
    if name in _CONSUMING:
        value = materialize(guard, value, f"the input of '{name}'")
        args = (value, *args[1:])
    if name in _ITEM_MAKERS:
        items_made(guard, value, f"the result of '{name}'")
    elif name in ("map", "reverse"):
        guard.value(value, f"the input of '{name}'")
    made = filter_size(name, value, guard.budget.max_size)
    if made is not None:  # escapes, case mappings, percent-encoding: more out than in
        guard.size(made, f"the result of '{name}'")
    if name == "format" and isinstance(value, str):
        if check_format_widths(guard, value, braces=False):
            check_int_args(guard, args[1:], kwargs, "a format width")
        guard.size(percent_size(guard, value, tuple(args[1:]) or dict(kwargs)),
                   "a formatted string")
    elif name == "replace" and len(args) >= 3:
        old, new = str(args[1]), str(args[2])
        guard.size(replace_size(str(value), old, new), "a replace")
    elif name == "join":
        sep = str(args[1]) if len(args) > 1 else str(kwargs.get("d", ""))
        return (join_items(guard, value, sep), *args[1:])
    elif name == "indent":
        width = args[1] if len(args) > 1 else kwargs.get("width", 4)
        each = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        text = str(value)  # an int width is as many spaces, on every line
        guard.size(len(text) + abs(each) * (text.count("\n") + 1), "an indent")
    elif name == "center" and len(args) > 1 and isinstance(args[1], int):
        guard.size(args[1], "a centred string")
    return args


def checked_sum(guard: Sizes, fn: Any, lead: tuple[Any, ...], args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
    """`sum` of lists or strings is quadratic in C; add them up here, checked."""
    start = args[3] if len(args) > 3 else kwargs.get("start", 0)
    if not isinstance(start, (list, tuple, str)):
        return fn(*lead, *args, **kwargs)
    attribute = args[1] if len(args) > 1 else kwargs.get("attribute")
    if attribute is not None:
        return fn(*lead, *args, **kwargs)
    total: list[Any] = list(start) if not isinstance(start, str) else []
    text = isinstance(start, str)
    parts: list[Any] = [start] if text else []
    size = len(start)
    for item in args[0]:
        guard.iterate()
        size += weight(item, guard.budget.max_size)
        guard.size(size, "a sum")
        if text:
            parts.append(item)
        else:
            total.extend(item)
    return "".join(parts) if text else total


_STR_WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill"})


def check_call(guard: Sizes, obj: Any, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Size pre-checks of a str method the template calls; returns the arguments."""
    target = getattr(obj, "__wrapped__", obj)
    owner = getattr(target, "__self__", None)
    if not isinstance(owner, str):
        return args
    name = getattr(target, "__name__", "")
    if name in _STR_WIDTH_METHODS:
        check_int_args(guard, args, kwargs, f"str.{name}")
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        if isinstance(size, int):
            guard.size(len(owner) + owner.count("\t") * abs(size), "str.expandtabs")
    elif name == "replace" and len(args) >= 2:
        guard.size(replace_size(owner, str(args[0]), str(args[1])), "str.replace")
    elif name == "join" and args:
        return (join_items(guard, args[0], owner), *args[1:])
    elif name in ("format", "format_map") and check_format_widths(guard, owner, braces=True):
        check_int_args(guard, args, kwargs, "a format width")
    else:
        made = str_method_size(guard, owner, name, args, kwargs)
        if made is not None:
            guard.size(made, f"str.{name}")
    return args
