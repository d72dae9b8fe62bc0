"""Sandboxed Jinja2 templates: syntax checks at load, rendering at run time.

Two environments share one policy: `ImmutableSandboxedEnvironment` with
`StrictUndefined`. Text templates (prompts, titles, messages) render to
strings; expressions (`compute`, `parse`, include `input`) render natively so
`{{ 3 }}` yields the integer 3. Neither can reach Python internals or mutate
the context.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateSyntaxError, Undefined, UndefinedError
from jinja2.exceptions import SecurityError
from jinja2.nativetypes import NativeEnvironment
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = [
    "SecurityError",
    "TemplateError",
    "UndefinedError",
    "check_syntax",
    "is_template",
    "render_native",
    "render_text",
]


class TemplateError(Exception):
    """A template failed to render; the message is safe to show the author."""


class _NativeSandbox(NativeEnvironment, ImmutableSandboxedEnvironment):
    """Native values with the immutable sandbox's attribute and call checks."""


def _tojson(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _make_text() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False,
                                        keep_trailing_newline=True)
    env.filters["tojson"] = _tojson
    env.policies["json.dumps_function"] = _tojson
    return env


def _make_native() -> _NativeSandbox:
    env = _NativeSandbox(undefined=StrictUndefined, autoescape=False)
    env.filters["tojson"] = _tojson
    return env


_local = threading.local()


def _text_env() -> ImmutableSandboxedEnvironment:
    env: ImmutableSandboxedEnvironment | None = getattr(_local, "text", None)
    if env is None:
        env = _local.text = _make_text()
    return env


def _native_env() -> _NativeSandbox:
    env: _NativeSandbox | None = getattr(_local, "native", None)
    if env is None:
        env = _local.native = _make_native()
    return env


_MARKERS = ("{{", "{%", "{#")


def is_template(text: str) -> bool:
    return any(m in text for m in _MARKERS)


# `{{ name.attr | filter }}`: the shape of most prompt and message substitutions.
# Jinja's lexer starts a tag at the leftmost `{{`, `{%` or `{#`; a text whose every
# tag is one of these (ASCII names, no whitespace control, no `not` prefix) always
# parses, so it skips the parser. Anything else takes the full parse below.
_SIMPLE_TAG = re.compile(r"\{\{\s*(?!not\b)[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
                         r"(?:\s*\|\s*[A-Za-z_]\w*)*\s*\}\}", re.ASCII)
_TAG_START = re.compile(r"\{[{%#]")


def _only_simple_tags(text: str) -> bool:
    pos = 0
    while True:
        start = _TAG_START.search(text, pos)
        if start is None:
            return True
        tag = _SIMPLE_TAG.match(text, start.start())
        if tag is None:
            return False
        pos = tag.end()


def check_syntax(text: str) -> tuple[int, str] | None:
    """None when the template parses; else (1-based line within it, message)."""
    if not is_template(text) or _only_simple_tags(text):
        return None
    return _parse_problem(text)


@lru_cache(maxsize=2048)
def _parse_problem(text: str) -> tuple[int, str] | None:
    try:
        _text_env().parse(text)
    except TemplateSyntaxError as exc:
        return (exc.lineno or 1, exc.message or "invalid template")
    return None


_CACHE_SIZE = 512


def _compiled(text: str, *, native: bool) -> Template:
    """A compiled template, cached per thread: compiling costs far more than rendering,
    and a run renders the same few templates node after node."""
    key = "native" if native else "text"
    cache: dict[str, Template] | None = getattr(_local, f"cache_{key}", None)
    if cache is None:
        cache = {}
        setattr(_local, f"cache_{key}", cache)
    template = cache.get(text)
    if template is None:
        env = _native_env() if native else _text_env()
        template = env.from_string(text)
        if len(cache) >= _CACHE_SIZE:
            cache.pop(next(iter(cache)))  # drop the oldest entry
        cache[text] = template
    return template


def render_text(text: str, context: Mapping[str, Any]) -> str:
    if not is_template(text):
        return text
    try:
        return _compiled(text, native=False).render(**context)
    except (UndefinedError, SecurityError, TemplateSyntaxError) as exc:
        raise TemplateError(str(exc)) from None
    except Exception as exc:  # a filter on the wrong type, a division by zero...
        raise TemplateError(f"{type(exc).__name__}: {exc}") from None


def render_native(value: Any, context: Mapping[str, Any]) -> Any:
    """Render a template expression (or a mapping/list of them) to native values."""
    if isinstance(value, str):
        if not is_template(value):
            return value
        try:
            result = _compiled(value, native=True).render(**context)
        except (UndefinedError, SecurityError, TemplateSyntaxError) as exc:
            raise TemplateError(str(exc)) from None
        except Exception as exc:
            raise TemplateError(f"{type(exc).__name__}: {exc}") from None
        if isinstance(result, Undefined):
            # A lone undefined expression comes back as the Undefined object itself.
            try:
                str(result)
            except UndefinedError as exc:
                raise TemplateError(str(exc)) from None
            raise TemplateError("expression is undefined")
        return result
    if isinstance(value, dict):
        return {k: render_native(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [render_native(v, context) for v in value]
    return value
