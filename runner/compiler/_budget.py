"""The per-render template budget: time, output size, intermediate sizes, iterations.

A template is user code run on user data (agent output, other people's YAML), so
every render is bounded without a thread that could outlive it: the sandbox in
`templates.py` calls `Guard` before each call, filter, operator, loop iteration and
output chunk (a cooperative deadline plus size checks made *before* the
allocation). See docs/adr/0005-template-budget-in-process.md for why this and not
a subprocess.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar, Token
from dataclasses import dataclass, field, fields
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


@dataclass(slots=True)
class Scope:
    """What the engine sets around a node: its budget, clock, deadline and stop flag.
    `with Scope(...):` every render on this thread (or task) uses it; enter it once."""

    budget: TemplateBudget
    monotonic: Callable[[], float]
    deadline: float | None = None  # the node's timeout, on `monotonic`
    stop: Stoppable | None = None  # `stopping` once the run is cancelled or parked
    _token: Token[Scope | None] | None = field(default=None, init=False, repr=False,
                                                compare=False)

    def __enter__(self) -> Scope:
        self._token = SCOPE.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        SCOPE.reset(self._token)


class Guard:
    """One render's running totals; every check is cheap so it can run per operation."""

    def __init__(self, scope: Scope, seconds: float | None = None, *,
                 validating: bool = False) -> None:
        self.validating = validating
        self.budget = budget = scope.budget
        self.monotonic = scope.monotonic
        self.stop = scope.stop
        self.seconds = budget.seconds if seconds is None else min(seconds, budget.seconds)
        own = self.monotonic() + self.seconds
        self.node_deadline = scope.deadline
        self.deadline = own if scope.deadline is None else min(own, scope.deadline)
        self.iterations = 0
        self.output = 0
        self._token: Token[Guard | None] | None = None

    def __enter__(self) -> Guard:
        """`with guard:` makes it the active one (`ACTIVE`) for one render."""
        self._token = ACTIVE.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        ACTIVE.reset(self._token)

    def tick(self) -> None:
        if self.stop is not None and self.stop.stopping:
            raise RenderStopped("the run was stopped while a template rendered")
        if self.monotonic() > self.deadline:
            if self.node_deadline is not None and self.deadline >= self.node_deadline:
                raise RenderTimedOut("the node's timeout passed while a template rendered")
            if self.validating:
                raise RenderBudgetError(f"its constant parts take over {self.seconds:g} s "
                                        "to evaluate")
            raise RenderBudgetError(
                f"the template ran longer than its budget of {self.seconds:g} s "
                f"(template_budget.seconds, at most {CEILING.seconds:g})")

    def iterate(self) -> None:
        self.iterations += 1
        if self.iterations > self.budget.max_iterations:
            raise RenderBudgetError(
                f"the template's loops ran more than {self.budget.max_iterations:,} "
                f"iterations (template_budget.max_iterations)")
        if self.iterations & 63 == 0:  # the clock every 64 iterations: loops are hot
            self.tick()

    def emitted(self, chunk: str) -> None:
        self.output += len(chunk)
        if self.output > self.budget.max_output:
            raise RenderBudgetError(
                f"the template's output passed {self.budget.max_output:,} characters "
                f"(template_budget.max_output)")

    # -- sizes, checked before the allocation --------------------------------------
    def size(self, n: int, what: str) -> None:
        if n > self.budget.max_size:
            raise RenderBudgetError(
                f"{what} would hold {_amount(n)} characters or items, over the budget of "
                f"{self.budget.max_size:,} (template_budget.max_size)")

    def value(self, value: Any, what: str = "a value") -> Any:
        n = weight(value, self.budget.max_size)
        if n > self.budget.max_size:
            self.size(n, what)  # raises, in its words
        return value

    def bits(self, n: int, what: str) -> None:
        if n > MAX_INT_BITS:
            raise RenderBudgetError(f"{what} would have about {_amount(n * 3 // 10)} digits; "
                                    f"templates stop at 4,300")


def _amount(n: int) -> str:
    return f"{n:,}" if n < 10**15 else f"about 10^{len(str(n)) - 1}"


def weight(value: Any, limit: int) -> int:
    """A value's size as it would be written out: nesting counted, a shared part once per
    place it stands (so `[x] * n` of a big `x` counts `n` times `x`). Each container is
    walked once (its weight remembered by identity), so a value that doubles itself 64
    times costs 64 steps, not 2^24 before the limit; a cycle weighs more than `limit`."""
    if not isinstance(value, _CONTAINERS):
        return len(value) if isinstance(value, (str, bytes)) else 1
    memo: dict[int, int] = {}
    walking = {id(value)}
    # Frames of (container, its parts not yet counted, weight so far), deepest last.
    stack: list[tuple[Any, Iterator[Any], int]] = [(value, _parts(value), _own(value))]
    while stack:
        container, parts, total = stack.pop()
        for part in parts:
            if not isinstance(part, _CONTAINERS):
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


_CONTAINERS = (list, tuple, set, frozenset, dict)


def _own(container: Any) -> int:
    return 2 * len(container) + 1 if isinstance(container, dict) else len(container) + 1


def _parts(container: Any) -> Iterator[Any]:
    if isinstance(container, dict):
        return itertools.chain(container.keys(), container.values())
    return iter(container)


#: The guard of the render under way (`with guard:`), and the scope a node's renders
#: run in (`with Scope(...):`); read with `.get()`, a C call on every operation.
ACTIVE: ContextVar[Guard | None] = ContextVar("wfrun_template_guard", default=None)
SCOPE: ContextVar[Scope | None] = ContextVar("wfrun_template_scope", default=None)


def budgeted_iter(guard: Guard, iterable: Any) -> Iterator[Any]:
    for item in iterable:
        guard.iterate()
        yield item


# -- pre-checks for the operations that can multiply a size -----------------------

_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_BRACE_SPEC = re.compile(r"\{[^{}]*?:([^{}]*)\}")
_DIGITS = re.compile(r"\d+")


def check_format_widths(guard: Guard, fmt: str, *, braces: bool) -> bool:
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


def check_int_args(guard: Guard, args: tuple[Any, ...], kwargs: dict[str, Any],
                   what: str) -> None:
    """Widths, counts and lengths passed to filters and string methods."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > guard.budget.max_size:
            guard.size(abs(a), what)


def check_binop(guard: Guard, op: str, left: Any, right: Any) -> None:
    guard.tick()
    ints = (isinstance(left, int) and isinstance(right, int)
            and not isinstance(left, bool) and not isinstance(right, bool))
    if op == "**":
        if ints and right > 1 and abs(left) > 1:
            guard.bits(abs(left).bit_length() * right, f"{left} ** {right}")
    elif op == "*":
        if ints:
            guard.bits(abs(left).bit_length() + abs(right).bit_length(), "a product")
            return
        seq, n = (left, right) if isinstance(right, int) else (right, left)
        if isinstance(n, int) and isinstance(seq, (str, bytes, list, tuple)) and n > 1:
            limit = guard.budget.max_size
            guard.size(weight(seq, limit) * n, "a repetition")
    elif op == "+":
        if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
            limit = guard.budget.max_size
            guard.size(weight(left, limit) + weight(right, limit), "a concatenation")
    elif op == "%" and isinstance(left, str) and check_format_widths(guard, left, braces=False):
        star = right if isinstance(right, tuple) else (right,)
        check_int_args(guard, star, {}, "a format width")


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
