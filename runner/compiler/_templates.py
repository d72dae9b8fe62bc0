"""Sandboxed Jinja2 templates: syntax checks at load, rendering at run time.

Two environments share one policy: `ImmutableSandboxedEnvironment` with
`StrictUndefined`. Text templates (prompts, titles, messages) render to
strings; expressions (`compute`, `parse`, include `input`) render natively so
`{{ 3 }}` yields the integer 3. Neither can reach Python internals or mutate
the context.
"""

from __future__ import annotations

import json
import threading
import types
from collections.abc import Mapping
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
from ._budget import DEFAULT_BUDGET, Guard, Scope

__all__ = [
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


def _tojson(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _guard() -> Guard:
    # Renders always run under a guard (see _render); a bare env call (a test, the
    # optimizer) still gets sizes checked against the default budget.
    return _b.ACTIVE.get() or Guard(_default_scope())


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


def _estimate_replace(s: str, old: str, new: str) -> int:
    if not old:
        return len(s) + (len(s) + 1) * len(new)
    return len(s) + (len(s) // len(old)) * len(new)


def _join_items(guard: Guard, items: Any, sep: str) -> list[Any]:
    listed = list(_e.materialize(guard, items, "a join's input"))
    guard.size(_e.joined_size(listed, sep, guard.budget.max_size), "a join")
    return listed


# Filters that read their whole input at once (a lazy one is built first, counted).
_CONSUMING = frozenset({"list", "sort", "unique", "join", "batch", "slice", "reverse", "sum",
                        "min", "max", "groupby", "tojson", "string", "pprint", "length",
                        "count", "last", "random", "dictsort", "urlencode", "xmlattr"})
# Filters that make an object per character or item of their input.
_ITEM_MAKERS = frozenset({"list", "sort", "unique", "batch", "slice", "groupby", "dictsort",
                          "items"})


def _check_filter(guard: Guard, name: str, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Size pre-checks per filter; returns the arguments to call it with."""
    _b.check_int_args(guard, args[1:], kwargs, f"the filter '{name}'")
    if not args:
        return args
    value = args[0]
    if name in _CONSUMING:
        value = _e.materialize(guard, value, f"the input of '{name}'")
        args = (value, *args[1:])
    if name in _ITEM_MAKERS:
        _e.items_made(guard, value, f"the result of '{name}'")
    elif name in ("map", "reverse"):
        guard.value(value, f"the input of '{name}'")
    made = _e.filter_size(name, value, guard.budget.max_size)
    if made is not None:  # escapes, case mappings, percent-encoding: more out than in
        guard.size(made, f"the result of '{name}'")
    if name == "format" and isinstance(value, str):
        if _b.check_format_widths(guard, value, braces=False):
            _b.check_int_args(guard, args[1:], kwargs, "a format width")
        guard.size(_e.percent_size(guard, value, tuple(args[1:]) or dict(kwargs)),
                   "a formatted string")
    elif name == "replace" and len(args) >= 3:
        old, new = str(args[1]), str(args[2])
        guard.size(_estimate_replace(str(value), old, new), "a replace")
    elif name == "join":
        sep = str(args[1]) if len(args) > 1 else str(kwargs.get("d", ""))
        return (_join_items(guard, value, sep), *args[1:])
    elif name == "indent":
        width = args[1] if len(args) > 1 else kwargs.get("width", 4)
        each = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        text = str(value)  # an int width is as many spaces, on every line
        guard.size(len(text) + abs(each) * (text.count("\n") + 1), "an indent")
    elif name == "center" and len(args) > 1 and isinstance(args[1], int):
        guard.size(args[1], "a centred string")
    return args


def _checked_sum(guard: Guard, fn: Any, lead: tuple[Any, ...], args: tuple[Any, ...],
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
        size += _b.weight(item, guard.budget.max_size)
        guard.size(size, "a sum")
        if text:
            parts.append(item)
        else:
            total.extend(item)
    return "".join(parts) if text else total


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
        args = _check_filter(guard, name, args, kwargs)
        if name == "sum":
            result = _checked_sum(guard, fn, lead, args, kwargs)
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


_STR_WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill"})


def _check_call(guard: Guard, obj: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> tuple[Any, ...]:
    target = getattr(obj, "__wrapped__", obj)
    owner = getattr(target, "__self__", None)
    if not isinstance(owner, str):
        return args
    name = getattr(target, "__name__", "")
    if name in _STR_WIDTH_METHODS:
        _b.check_int_args(guard, args, kwargs, f"str.{name}")
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        if isinstance(size, int):
            guard.size(len(owner) + owner.count("\t") * abs(size), "str.expandtabs")
    elif name == "replace" and len(args) >= 2:
        guard.size(_estimate_replace(owner, str(args[0]), str(args[1])), "str.replace")
    elif name == "join" and args:
        return (_join_items(guard, args[0], owner), *args[1:])
    elif name in ("format", "format_map") and _b.check_format_widths(guard, owner, braces=True):
        _b.check_int_args(guard, args, kwargs, "a format width")
    else:
        made = _e.str_method_size(guard, owner, name, args, kwargs)
        if made is not None:
            guard.size(made, f"str.{name}")
    return args


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
        guard = _guard()
        _b.check_binop(guard, operator, left, right)
        if operator == "%" and isinstance(left, str):
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
        args = _check_call(guard, __obj, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        return guard.value(result, "a call's result")

    def getattr(self, obj: Any, attribute: str) -> Any:
        guard = _b.ACTIVE.get()
        if guard is not None:
            guard.tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        guard = _b.ACTIVE.get()
        if guard is not None:
            guard.tick()
        return super().getitem(obj, argument)


def _finalize(value: Any) -> Any:
    guard = _guard()
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
# no per-render state (the budget guard is a ContextVar, budget.py) and Jinja's
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
    ctx = template.new_context(dict(context))
    parts: list[Any] = []
    for chunk in template.root_render_func(ctx):
        guard.tick()
        if isinstance(chunk, str):
            guard.emitted(chunk)
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
    guard = Guard(_b.SCOPE.get() or _default_scope())
    try:
        with guard:
            guard.tick()
            template = _CACHES[native].get(text) or _compile(text, native=native)
            return _collect(template, context, guard, native=native)
    except Exception as exc:
        raise _failure(exc) from None


def render_text(text: str, context: Mapping[str, Any]) -> str:
    if not is_template(text):
        return text
    result: str = _render(text, context, native=False)
    return result


def render_native(value: Any, context: Mapping[str, Any]) -> Any:
    """Render a template expression (or a mapping/list of them) to native values."""
    if isinstance(value, str):
        if not is_template(value):
            return value
        path = _PLAIN_PATHS.get(value, _UNPARSED)
        if path is _UNPARSED:
            path = _parse_plain(value)
        if path is not None:
            found = _render_plain(path, context)
            if found is not _plain.MISS:
                return found
        return _render_jinja_native(value, context)
    if isinstance(value, dict):
        return {k: render_native(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [render_native(v, context) for v in value]
    return value


def _render_jinja_native(text: str, context: Mapping[str, Any]) -> Any:
    """One template expression rendered natively by the sandbox."""
    result = _render(text, context, native=True)
    if isinstance(result, Undefined):
        # A lone undefined expression comes back as the Undefined object itself.
        try:
            str(result)
        except (UndefinedError, SecurityError) as exc:  # `input.__class__`: unsafe
            raise TemplateError(str(exc)) from None
        raise TemplateError("expression is undefined")
    # A scalar is whole: only a built mapping or list can hide an undefined part.
    missing = _first_undefined(result) if isinstance(result, (dict, list, tuple)) else None
    if missing is not None:
        where, undefined = missing
        raise TemplateError(f"{where}: {_undefined_message(undefined)}")
    return result


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
    guard = Guard(_b.SCOPE.get() or _default_scope())
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


def _undefined_message(value: Undefined) -> str:
    try:
        str(value)
    except (UndefinedError, SecurityError) as exc:
        return str(exc)
    return "a value is undefined"


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
