"""Sandboxed Jinja2 templates rendered at run time, each under its budget guard.

Two environments share one policy: `ImmutableSandboxedEnvironment` with
`StrictUndefined`. Text templates (prompts, titles, messages) render to
strings; expressions (`compute`, `parse`, include `input`) render natively so
`{{ 3 }}` yields the integer 3. Neither can reach Python internals or mutate
the context. Every render runs under a `Guard` (its running totals against the
node's `Scope`: budget, clock, deadline, stop flag), checked per operation; the
limits are budget.py's, the size estimates estimates.py's, validate-time checks
template_checks.py's.
"""

from __future__ import annotations

import json
import threading
import types
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from functools import cache, update_wrapper
from typing import Any

from jinja2 import (
    StrictUndefined,
    Template,
    TemplateSyntaxError,
    Undefined,
    UndefinedError,
    nodes,
    pass_context,
)
from jinja2.exceptions import SecurityError
from jinja2.nativetypes import NativeEnvironment, native_concat
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range
from jinja2.utils import generate_lorem_ipsum
from jinja2.visitor import NodeTransformer

from . import _budget as _b
from . import _estimates as _e
from . import _plainrefs as _plain
from ._budget import (
    CONTAINERS,
    DEFAULT_BUDGET,
    Stoppable,
    TemplateBudget,
    amount,
    check_format_widths,
    check_int_args,
    weight,
)

__all__ = [
    "Guard",
    "Scope",
    "SecurityError",
    "TemplateBudgetExceeded",
    "TemplateError",
    "TemplateStopped",
    "TemplateTimedOut",
    "UndefinedError",
    "is_template",
    "render_native",
    "render_text",
]


class TemplateError(Exception):
    """A template failed to render; the message is safe to show the author."""


class TemplateBudgetExceeded(TemplateError):
    """The render went over its `template_budget`."""


class TemplateStopped(TemplateError):
    """The run was cancelled or parked during the render."""


class TemplateTimedOut(TemplateError):
    """The node's timeout passed during the render."""


# -- the guard: one render's running totals, checked per operation ----------------------

@dataclass(slots=True)
class Scope:
    """What the engine sets around a node: its budget, clock, deadline and stop flag.
    `with Scope(...):` every render on this thread (or task) uses it; enter it once.
    A read at each render's start: the run loop sets one per run (`SCOPE.set`) and
    moves its `deadline` per attempt."""

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
    """One render's running totals; every check is cheap so it can run per operation.
    A render makes it the active one (`ACTIVE.set`) for as long as it runs."""

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

    def tick(self) -> None:
        if self.stop is not None and self.stop.stopping:
            raise _b.RenderStopped("the run was stopped while a template rendered")
        if self.monotonic() > self.deadline:
            if self.node_deadline is not None and self.deadline >= self.node_deadline:
                raise _b.RenderTimedOut("the node's timeout passed while a template rendered")
            if self.validating:
                raise _b.RenderBudgetError(f"its constant parts take over {self.seconds:g} s "
                                           "to evaluate")
            raise _b.RenderBudgetError(
                f"the template ran longer than its budget of {self.seconds:g} s "
                f"(template_budget.seconds, at most {_b.CEILING.seconds:g})")

    def iterate(self) -> None:
        self.iterations += 1
        if self.iterations > self.budget.max_iterations:
            raise _b.RenderBudgetError(
                f"the template's loops ran more than {self.budget.max_iterations:,} "
                f"iterations (template_budget.max_iterations)")
        if self.iterations & 63 == 0:  # the clock every 64 iterations: loops are hot
            self.tick()

    # -- sizes, checked before the allocation --------------------------------------
    def size(self, n: int, what: str) -> None:
        if n > self.budget.max_size:
            raise _b.RenderBudgetError(
                f"{what} would hold {amount(n)} characters or items, over the budget of "
                f"{self.budget.max_size:,} (template_budget.max_size)")

    def value(self, value: Any, what: str = "a value") -> Any:
        # `weight`'s rule for a scalar, without the call (most values of most renders).
        if isinstance(value, (str, bytes)):
            n = len(value)
        elif isinstance(value, CONTAINERS):
            n = weight(value, self.budget.max_size)
        else:
            return value  # a number, a bool, None: weight 1, under any budget
        if n > self.budget.max_size:
            self.size(n, what)  # raises, in its words
        return value

    def bits(self, n: int, what: str) -> None:
        if n > _b.MAX_INT_BITS:
            raise _b.RenderBudgetError(f"{what} would have about {amount(n * 3 // 10)} "
                                       "digits; templates stop at 4,300")


#: The guard of the render under way (set by `_render`), and the scope a node's renders
#: run in (`with Scope(...):`, or the run loop's own); read with `.get()`, a C call on
#: every operation.
ACTIVE: ContextVar[Guard | None] = ContextVar("wfrun_template_guard", default=None)
SCOPE: ContextVar[Scope | None] = ContextVar("wfrun_template_scope", default=None)


def _tojson(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _guard() -> Guard:
    """The active guard. Renders always run under one (see _render); a bare env call (a
    test, the optimizer) still gets sizes checked against the default budget."""
    return ACTIVE.get() or _default_guard()


def _default_guard() -> Guard:
    return Guard(_default_scope())


@cache  # one per process: every render outside a node's scope shares it
def _default_scope() -> Scope:
    from runner.clock import SystemClock

    return Scope(DEFAULT_BUDGET, SystemClock().monotonic)


# -- the instrumented AST: every loop iteration and `~` concatenation is counted --------

class _Instrument(NodeTransformer):
    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Filter(node.iter, "wfrun_iter", [], [], None, None,
                                 lineno=node.iter.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Filter(node, "wfrun_sized", [], [], None, None, lineno=node.lineno)


@pass_context
def _iter_filter(_ctx: Context, value: Any) -> Any:
    return _b.budgeted_iter(_guard(), value)


@pass_context
def _sized_filter(_ctx: Context, value: Any) -> Any:
    guard = _guard()
    guard.tick()
    return guard.value(value, "a concatenation")


def _wrap_filter(name: str, fn: Any) -> Any:
    from jinja2.utils import _PassArg

    pass_arg = _PassArg.from_obj(fn)

    def wrapper(context: Context, *args: Any, **kwargs: Any) -> Any:
        guard = _guard()
        guard.tick()
        lead: tuple[Any, ...] = ()
        if pass_arg is _PassArg.context:
            lead = (context,)
        elif pass_arg is _PassArg.eval_context:
            lead = (context.eval_ctx,)
        elif pass_arg is _PassArg.environment:
            lead = (context.environment,)
        args = _e.check_filter(guard, name, args, kwargs)
        if name == "sum":
            result = _e.checked_sum(guard, fn, lead, args, kwargs)
        else:
            result = fn(*lead, *args, **kwargs)
        return guard.value(result, f"the result of '{name}'")

    update_wrapper(wrapper, fn)
    # pass_context marks the wrapper as never constant-folded at compile time, when
    # no guard is active (`{{ 'a' | center(10**10) }}` would otherwise run in the parser).
    wrapper.jinja_pass_arg = _PassArg.context  # type: ignore[attr-defined]
    return wrapper


def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    # About 12 characters per word, `max` words per paragraph, `n` paragraphs.
    _guard().size(abs(int(n)) * abs(int(max)) * 12, "lipsum")
    return str(generate_lorem_ipsum(n, html, min, max))


def _range(*args: int) -> range:
    _guard().tick()
    return safe_range(*args)


class _Guarded(ImmutableSandboxedEnvironment):
    """The immutable sandbox plus the budget: checked calls, operators and attribute
    reads, counted loops, sized outputs."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.filters = {name: _wrap_filter(name, fn) for name, fn in self.filters.items()}
        self.filters["wfrun_iter"] = _iter_filter
        self.filters["wfrun_sized"] = _sized_filter
        self.globals["range"] = _range
        self.globals["lipsum"] = _lipsum
        self.finalize = _finalize

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        result: nodes.Template = _Instrument().visit(tree)
        return result

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        """The operators that can multiply a size (`intercepted_binops`): what each
        would make is sized before it is made, and its result after."""
        guard = ACTIVE.get() or _default_guard()
        guard.tick()
        ints = (isinstance(left, int) and isinstance(right, int)
                and not isinstance(left, bool) and not isinstance(right, bool))
        if operator == "**":
            if ints and right > 1 and abs(left) > 1:
                guard.bits(abs(left).bit_length() * right, f"{left} ** {right}")
        elif operator == "*":
            if ints:
                guard.bits(abs(left).bit_length() + abs(right).bit_length(), "a product")
            else:
                seq, n = (left, right) if isinstance(right, int) else (right, left)
                if isinstance(n, int) and isinstance(seq, (str, bytes, list, tuple)) and n > 1:
                    guard.size(weight(seq, guard.budget.max_size) * n, "a repetition")
        elif operator == "+":
            if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                limit = guard.budget.max_size
                guard.size(weight(left, limit) + weight(right, limit), "a concatenation")
        elif operator == "%" and isinstance(left, str):
            if check_format_widths(guard, left, braces=False):
                star = right if isinstance(right, tuple) else (right,)
                check_int_args(guard, star, {}, "a format width")
            guard.size(_e.percent_size(guard, left, right), "a formatted string")
        return guard.value(self.binop_table[operator](left, right), "an operation's result")

    def wrap_str_format(self, value: Any) -> Any:
        """`str.format`/`format_map` through `estimates.BoundedFormatter`: each field's
        width and precision (nested `{:{w}}` ones too) are known before it is made."""
        if not isinstance(value, (types.MethodType, types.BuiltinMethodType)) \
                or value.__name__ not in ("format", "format_map") \
                or not isinstance(value.__self__, str):
            return None
        text, is_map = str(value.__self__), value.__name__ == "format_map"

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument and no keywords")
                mapping: Any = args[0]
                return _e.BoundedFormatter(self, _guard()).vformat(text, (), mapping)
            return _e.BoundedFormatter(self, _guard()).vformat(text, args, kwargs)

        return update_wrapper(wrapper, value)

    def call(__self, __context: Context, __obj: Any, *args: Any,
             **kwargs: Any) -> Any:
        guard = _guard()
        guard.tick()
        args = _e.check_call(guard, __obj, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        return guard.value(result, "a call's result")

    def getattr(self, obj: Any, attribute: str) -> Any:
        guard = ACTIVE.get()
        if guard is not None:
            guard.tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        guard = ACTIVE.get()
        if guard is not None:
            guard.tick()
        return super().getitem(obj, argument)


def _finalize(value: Any) -> Any:
    guard = ACTIVE.get() or _default_guard()
    guard.tick()
    return guard.value(value, "an output value")


def _shell_quote(value: Any) -> str:
    """One shell word: the way to put a value into `sh -c` or `use_shell: true`."""
    import shlex

    if isinstance(value, (list, tuple)):
        return " ".join(shlex.quote(str(v)) for v in value)
    return shlex.quote(value if isinstance(value, str) else _tojson(value))


_EXTRA_FILTERS: dict[str, Any] = {"tojson": _tojson, "shell_quote": _shell_quote}


class _NativeSandbox(NativeEnvironment, _Guarded):
    """Native values with the immutable sandbox's attribute and call checks."""


def _make_text() -> _Guarded:
    env = _Guarded(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    env.policies["json.dumps_function"] = _tojson
    for name, fn in _EXTRA_FILTERS.items():
        env.filters[name] = _wrap_filter(name, fn)
    return env


def _make_native() -> _NativeSandbox:
    env = _NativeSandbox(undefined=StrictUndefined, autoescape=False)
    for name, fn in _EXTRA_FILTERS.items():
        env.filters[name] = _wrap_filter(name, fn)
    return env


# One text and one native environment per process, shared by every thread: they hold
# no per-render state (the active guard is a ContextVar, `ACTIVE`) and Jinja's
# compiled templates are safe to render from several threads at once. Per-thread
# copies meant every run thread of `wfrun host` recompiled every template.
_lock = threading.Lock()
_envs: dict[str, Any] = {}


def _text_env() -> _Guarded:
    env: _Guarded | None = _envs.get("text")
    if env is None:
        with _lock:
            env = _envs.get("text") or _make_text()
            _envs["text"] = env
    return env


def _native_env() -> _NativeSandbox:
    env: _NativeSandbox | None = _envs.get("native")
    if env is None:
        with _lock:
            env = _envs.get("native") or _make_native()
            _envs["native"] = env
    return env


def is_template(text: str) -> bool:
    """Whether `text` holds an expression, a statement or a comment."""
    return "{{" in text or "{%" in text or "{#" in text


def _collect(template: Template, context: Mapping[str, Any], guard: Guard, *,
             native: bool) -> Any:
    """`template` rendered chunk by chunk under `guard`: the clock read per chunk, the
    text counted against max_output; the concatenation's value when `native`."""
    ctx = template.new_context(dict(context))
    parts: list[Any] = []
    budget = guard.budget
    for chunk in template.root_render_func(ctx):
        guard.tick()
        if isinstance(chunk, str):
            guard.output += len(chunk)
            if guard.output > budget.max_output:
                raise _b.RenderBudgetError(
                    f"the template's output passed {budget.max_output:,} characters "
                    f"(template_budget.max_output)")
        parts.append(chunk)
    if native:
        return guard.value(native_concat(parts), "the expression's value")
    return "".join(parts)


# A compiled template is ~3 KB: 8,192 of them (~25 MB) hold every template of a
# 5,000-node workflow, so repeated runs of it never recompile.
_CACHE_SIZE = 8192


_CACHES: dict[bool, dict[str, Template]] = {False: {}, True: {}}


def _compile(text: str, *, native: bool) -> Template:
    """Compile `text` into the per-process cache (`_CACHES`, looked up by `_render`
    first): compiling costs far more than rendering, and every run renders the same
    few templates node after node."""
    cache = _CACHES[native]
    env = _native_env() if native else _text_env()
    template = env.from_string(text)  # outside the lock: two threads may both compile
    with _lock:
        if len(cache) >= _CACHE_SIZE:
            cache.pop(next(iter(cache)), None)  # drop the oldest entry
        cache[text] = template
    return template


def _failure(exc: Exception) -> TemplateError:
    """A render's failure as the TemplateError it is (the budget's, Jinja's, a
    filter's own), the message safe to show the author."""
    if isinstance(exc, _b.RenderStopped):
        return TemplateStopped(str(exc))
    if isinstance(exc, _b.RenderTimedOut):
        return TemplateTimedOut(str(exc))
    if isinstance(exc, _b.RenderBudgetError):
        return TemplateBudgetExceeded(f"over the template budget: {exc}")
    if isinstance(exc, (UndefinedError, SecurityError, TemplateSyntaxError)):
        return TemplateError(str(exc))
    if isinstance(exc, MemoryError):
        return TemplateBudgetExceeded("the template ran out of memory")
    if isinstance(exc, RecursionError):
        return TemplateError("the template recursed too deeply")
    return TemplateError(f"{type(exc).__name__}: {exc}")  # a filter on the wrong type...


def _render(text: str, context: Mapping[str, Any], *, native: bool) -> Any:
    """`text` rendered by the sandbox under a guard of the current scope: a string, or
    (`native`) one expression's value, refused when it is or holds an undefined."""
    guard = Guard(SCOPE.get() or _default_scope())
    token = ACTIVE.set(guard)  # as `with guard:` does, without its two calls per render
    try:
        guard.tick()
        template = _CACHES[native].get(text) or _compile(text, native=native)
        result = _collect(template, context, guard, native=native)
    except Exception as exc:
        raise _failure(exc) from None
    finally:
        ACTIVE.reset(token)
    if not native:
        return result
    if isinstance(result, Undefined):
        # A lone undefined expression comes back as the Undefined object itself.
        raise TemplateError(_undefined_message(result, "expression is undefined"))
    # A scalar is whole: only a built mapping or list can hide an undefined part.
    missing = _first_undefined(result) if isinstance(result, (dict, list, tuple)) else None
    if missing is not None:
        where, undefined = missing
        raise TemplateError(f"{where}: {_undefined_message(undefined)}")
    return result


def render_text(text: str, context: Mapping[str, Any]) -> str:
    if not is_template(text):
        return text
    result: str = _render(text, context, native=False)
    return result


def render_native(value: Any, context: Mapping[str, Any]) -> Any:
    """Render a template expression (or a mapping/list of them) to native values."""
    if isinstance(value, str):
        if "{{" not in value and "{%" not in value and "{#" not in value:
            return value  # not a template (`is_template`, inline: every value passes here)
        path = _PLAIN_PATHS.get(value, _UNPARSED)
        if path is _UNPARSED:
            path = _parse_plain(value)
        if path is not None:
            found = _render_plain(path, context)
            if found is not _plain.MISS:
                return found
        return _render(value, context, native=True)
    if isinstance(value, dict):
        return {k: render_native(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [render_native(v, context) for v in value]
    return value


# Each text as a plain reference (`_plainrefs`) or None, parsed once per process.
_PLAIN_PATHS: dict[str, _plain.Path | None] = {}
_UNPARSED: Any = object()


def _parse_plain(text: str) -> _plain.Path | None:
    """`text` as a plain reference, into `_PLAIN_PATHS` (looked up by `render_native`)."""
    path = _plain.parse(text)
    with _lock:
        if len(_PLAIN_PATHS) >= _CACHE_SIZE:
            _PLAIN_PATHS.pop(next(iter(_PLAIN_PATHS)), None)
        _PLAIN_PATHS[text] = path
    return path


def _render_plain(path: _plain.Path, context: Mapping[str, Any]) -> Any:
    """A plain reference's value as the sandbox renders it, the budget checked as
    there (the value as output, then the literal it reads as), or MISS."""
    guard = Guard(SCOPE.get() or _default_scope())
    try:
        guard.tick()
        value = _plain.resolve(path, context)
        if value is _plain.MISS or isinstance(value, Undefined) or (
                isinstance(value, (dict, list, tuple)) and _first_undefined(value)):
            return _plain.MISS  # Jinja says what is undefined, in its words
        guard.value(value, "an output value")
        if not isinstance(value, str):  # a str subclass is read as a literal too
            return guard.value(value, "the expression's value")
        read = _plain.literal(value)
        return read if read is value else guard.value(read, "the expression's value")
    except Exception as exc:
        raise _failure(exc) from None


def _undefined_message(value: Undefined, otherwise: str = "a value is undefined") -> str:
    """What Jinja says of an undefined value when it is read (`input.__class__`: unsafe)."""
    try:
        str(value)
    except (UndefinedError, SecurityError) as exc:
        return str(exc)
    return otherwise


def _first_undefined(value: Any) -> tuple[str, Undefined] | None:
    """An undefined value inside a built mapping or list (`{{ {'a': input.nope} }}`),
    with its place, so the error names the missing key instead of 'not JSON'."""
    stack: list[tuple[str, Any]] = [("$", value)]
    seen = 0
    while stack and seen < 100_000:
        where, v = stack.pop()
        seen += 1
        if isinstance(v, Undefined):
            return where, v
        if isinstance(v, dict):
            stack.extend((f"{where}.{k}", item) for k, item in v.items())
        elif isinstance(v, (list, tuple)):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(v))
    return None
