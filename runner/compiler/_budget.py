"""The per-render template budget: time, output size, intermediate sizes, iterations.

A template is user code run on user data (agent output, other people's YAML), so
every render is bounded without a thread that could outlive it: the sandbox in
`templates.py` calls its `Guard` before each call, filter, operator, loop iteration
and output chunk (a cooperative deadline plus size checks made *before* the
allocation). See docs/adr/0005-template-budget-in-process.md for why this and not
a subprocess. Here: the limits (`TemplateBudget`, a workflow's `template_budget:`),
what going over them raises, a value's weight, and the pre-checks that need no more
of the guard than `Sizes`; the guard itself lives with the render it guards.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any, Protocol

MIB = 1024 * 1024
# Python refuses int <-> str conversions past 4,300 digits; no template needs an
# integer that cannot be printed, so arithmetic stops there (about 14,300 bits).
MAX_INT_BITS = 14_300


@dataclass(frozen=True)
class TemplateBudget:
    """Per render. Sizes are in characters (strings) or items (lists, mappings),
    counted through nested values and shared references."""

    seconds: float = 5.0
    max_output: int = 16 * MIB  # characters a text render produces
    max_size: int = 16 * MIB  # the weight of any one value the template builds
    max_iterations: int = 1_000_000  # loop iterations, all loops of one render

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


DEFAULT_BUDGET = TemplateBudget()
#: What a workflow's `template_budget:` may raise the budget to, and no further.
CEILING = TemplateBudget(seconds=300.0, max_output=256 * MIB, max_size=256 * MIB,
                         max_iterations=100_000_000)
# A constant template is tried at validate time for at most this long.
VALIDATE_SECONDS = 1.0


class RenderBudgetError(Exception):
    """The render went over its budget; the message names the limit and the key."""


class RenderStopped(Exception):
    """The run was cancelled or parked while a template rendered."""


class RenderTimedOut(Exception):
    """The node's `timeout` passed while a template rendered."""


class Stoppable(Protocol):
    """What a render asks of its run (the engine's RunControl): read, never called, so
    the budget's check per operation does not call back up into the engine."""

    @property
    def stopping(self) -> bool:
        """True once the run is cancelled or parked."""
        ...


class Sizes(Protocol):
    """What a size pre-check asks of the render's running guard (`Guard`, in
    compiler/_templates.py, with the render it guards): the budget, the clock check per
    operation, and a refusal before an allocation."""

    @property
    def budget(self) -> TemplateBudget: ...

    def tick(self) -> None: ...

    def iterate(self) -> None: ...

    def size(self, n: int, what: str) -> None: ...

    def value(self, value: Any, what: str = "a value") -> Any: ...

    def bits(self, n: int, what: str) -> None: ...


def amount(n: int) -> str:
    """A count as a message says it (a huge one as a power of ten)."""
    return f"{n:,}" if n < 10**15 else f"about 10^{len(str(n)) - 1}"


def weight(value: Any, limit: int) -> int:
    """A value's size as it would be written out: nesting counted, a shared part once per
    place it stands (so `[x] * n` of a big `x` counts `n` times `x`). Each container is
    walked once (its weight remembered by identity), so a value that doubles itself 64
    times costs 64 steps, not 2^24 before the limit; a cycle weighs more than `limit`."""
    if not isinstance(value, CONTAINERS):
        return len(value) if isinstance(value, (str, bytes)) else 1
    memo: dict[int, int] = {}
    walking = {id(value)}
    # Frames of (container, its parts not yet counted, weight so far), deepest last.
    stack: list[tuple[Any, Iterator[Any], int]] = [(value, _parts(value), _own(value))]
    while stack:
        container, parts, total = stack.pop()
        for part in parts:
            if not isinstance(part, CONTAINERS):
                total += len(part) if isinstance(part, (str, bytes)) else 1
            elif (seen := memo.get(id(part))) is not None:
                total += seen
            elif id(part) in walking:
                return limit + 1  # it contains itself: written out, it never ends
            else:
                stack.append((container, parts, total))
                walking.add(id(part))
                stack.append((part, _parts(part), _own(part)))
                break
            if total > limit:
                return total
        else:
            walking.discard(id(container))
            memo[id(container)] = total
            if not stack or total > limit:
                return total
            outer, rest, so_far = stack.pop()
            stack.append((outer, rest, so_far + total))
    raise AssertionError("unreachable: the walk returns at its root")


CONTAINERS = (list, tuple, set, frozenset, dict)


def _own(container: Any) -> int:
    return 2 * len(container) + 1 if isinstance(container, dict) else len(container) + 1


def _parts(container: Any) -> Iterator[Any]:
    if isinstance(container, dict):
        return itertools.chain(container.keys(), container.values())
    return iter(container)


def budgeted_iter(guard: Sizes, iterable: Any) -> Iterator[Any]:
    for item in iterable:
        guard.iterate()
        yield item


# -- pre-checks for the operations that can multiply a size -----------------------

_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_BRACE_SPEC = re.compile(r"\{[^{}]*?:([^{}]*)\}")
_DIGITS = re.compile(r"\d+")


def check_format_widths(guard: Sizes, fmt: str, *, braces: bool) -> bool:
    """A `%`/`format` width or precision is an allocation the template asks for.
    True when a width comes from the arguments (`%*d`, `{:{}}`)."""
    if braces:
        specs = [m.group(1) for m in _BRACE_SPEC.finditer(fmt)]
        numbers = [int(d) for spec in specs for d in _DIGITS.findall(spec) if len(d) < 30]
        too_long = any(len(d) >= 30 for spec in specs for d in _DIGITS.findall(spec))
    else:
        groups = [g for m in _PERCENT_SPEC.finditer(fmt) for g in m.groups() if g]
        too_long = any(len(g) >= 30 for g in groups if g != "*")
        numbers = [int(g) for g in groups if g != "*" and len(g) < 30]
    if too_long:
        guard.size(10**30, "a format width")
    for n in numbers:
        guard.size(n, "a format width")
    return ("{" in "".join(specs)) if braces else "*" in groups


def check_int_args(guard: Sizes, args: tuple[Any, ...], kwargs: dict[str, Any],
                   what: str) -> None:
    """Widths, counts and lengths passed to filters and string methods."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > guard.budget.max_size:
            guard.size(abs(a), what)


# -- `template_budget:` in a workflow ---------------------------------------------------

BUDGET_KEYS = ("seconds", "max_output", "max_size", "max_iterations")


Problem = tuple[tuple[str, ...], str, bool]  # (key path, message, at the key)


def budget_from_yaml(value: Any) -> tuple[TemplateBudget, list[Problem]]:
    """The workflow's budget and its problems; unknown or bad keys keep their
    defaults. `seconds` is a number of seconds; sizes are counts."""
    problems: list[Problem] = []
    if not isinstance(value, dict):
        return DEFAULT_BUDGET, [((), "template_budget must be a mapping of "
                                     f"{', '.join(BUDGET_KEYS)}", False)]
    chosen: dict[str, Any] = {}
    for key, v in value.items():
        if key not in BUDGET_KEYS:
            problems.append(((str(key),), f"unknown key '{key}' in template_budget; expected "
                             f"one of: {', '.join(BUDGET_KEYS)}", True))
            continue
        ceiling = getattr(CEILING, key)
        number = (isinstance(v, (int, float)) if key == "seconds" else isinstance(v, int))
        if isinstance(v, bool) or not number or not 0 < v <= ceiling:
            kind = "a number of seconds" if key == "seconds" else "a whole number"
            most = f"{ceiling:g}" if key == "seconds" else f"{ceiling:,}"
            problems.append(((key,), f"template_budget.{key} must be {kind} above 0 and at "
                             f"most {most}", False))
            continue
        chosen[key] = float(v) if key == "seconds" else v
    return TemplateBudget(**chosen), problems
