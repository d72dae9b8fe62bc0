"""JSON that comes in from outside: one bounded loader for every such text.

Run input (`--input`, `-i`, answers), a model's tool arguments and answers, a
client's bridge or MCP line, an agent CLI's submission lines and an endpoint's
replies are written by someone else. Python's `json.loads` takes them whole: a
document nested 1,000 levels deep dies in `RecursionError` (or parses, and breaks
the next recursive walk over it), and `1e400`, `NaN` or `Infinity` become floats
that no later encoder may write back. `loads` refuses all of those with the same
`json.JSONDecodeError` (a `ValueError`) a syntax error raises, so each caller's
existing one-line error covers them.

`read_line` reads one line of at most a given number of bytes from a binary
stream, so a line-oriented protocol never buffers an endless line.

This module imports only the standard library so every layer may use it.
"""

from __future__ import annotations

import json
import math
import re

TYPE_CHECKING = False  # no `typing` at run time: `wfrun mcp` and the hook start lean
if TYPE_CHECKING:
    from typing import IO, Any, Final

__all__ = ["MAX_DEPTH", "MAX_LINE", "TOO_LONG", "loads", "read_line", "too_deep"]

#: The longest line a line-delimited JSON protocol (`wfrun bridge`, `wfrun mcp`) takes.
MAX_LINE: Final = 16 * 1024 * 1024

#: Arrays and objects nested deeper than this are refused. No input, tool call or
#: protocol message wfrun knows needs more than a few dozen levels.
MAX_DEPTH: Final = 100

# Strings (skipped whole, so a bracket inside one does not count) and brackets.
# The closing quote is optional, so a match never fails and never backtracks.
_TOKENS = re.compile(r'"(?:[^"\\]+|\\.)*"?|[\[\]{}]', re.DOTALL)


class _NotFinite(ValueError):
    pass


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def _constant(name: str) -> float:
    raise _NotFinite(name)


def _too_deep_at(text: str, max_depth: int) -> int | None:
    """The index of the first bracket that opens level `max_depth + 1`, if any."""
    if text.count("[") + text.count("{") <= max_depth:
        return None  # the common case: too few brackets to be that deep at all
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > max_depth:
                return match.start()
        elif token in "]}":
            depth -= 1
    return None


def loads(data: str | bytes | bytearray, *, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads` for text from outside: at most `max_depth` levels of nesting and
    finite numbers only, else `json.JSONDecodeError` saying which."""
    text = data if isinstance(data, str) else bytes(data).decode(json.detect_encoding(data))
    at = _too_deep_at(text, max_depth)
    if at is not None:
        raise json.JSONDecodeError(f"nested deeper than {max_depth} levels", text, at)
    try:
        return json.loads(text, parse_float=_finite_float, parse_constant=_constant)
    except _NotFinite as exc:
        where = max(text.find(str(exc)), 0)
        raise json.JSONDecodeError(f"the number {str(exc)[:40]} is not finite; JSON "
                                   "numbers here must be finite", text, where) from None
    except RecursionError:  # unreachable after the scan, kept as a last line
        raise json.JSONDecodeError(f"nested deeper than {max_depth} levels", text,
                                   0) from None


def too_deep(value: Any, max_depth: int = MAX_DEPTH) -> bool:
    """Whether a decoded value (from a parser other than `loads`: an SDK's, a caller's
    own) nests arrays and objects deeper than `max_depth`. Iterative: any depth."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth + 1 > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class _TooLong:
    """What `read_line` returns for a line longer than its limit (read and dropped)."""

    def __repr__(self) -> str:
        return "TOO_LONG"


TOO_LONG: Final = _TooLong()


def read_line(stream: IO[bytes], max_bytes: int) -> bytes | _TooLong | None:
    """The next line of `stream` (with its newline), `TOO_LONG` when it has more than
    `max_bytes` bytes (the rest of it is consumed in pieces, never held), or None at
    the end of the stream."""
    line = stream.readline(max_bytes + 1)
    if not line:
        return None
    if len(line) <= max_bytes:
        return line
    while not line.endswith(b"\n"):  # drain the rest of the long line
        line = stream.readline(1 << 20)
        if not line:
            break
    return TOO_LONG
