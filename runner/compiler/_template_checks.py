"""Validate time: the parts of a template that do not depend on the run are tried
under the workflow's budget (for at most `budget.VALIDATE_SECONDS`), and constant
loop nests are counted without running them (`template-budget` diagnostics); and
template values put into shell code with quoting that does not hold (`shell-quoting`
warnings)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from jinja2 import nodes

from . import _budget as _b
from ._budget import DEFAULT_BUDGET, TemplateBudget
from ._simple_tags import only_simple_tags  # validate time only: runs never load it
from ._template_ast import parsed, summary
from ._templates import (
    ACTIVE,
    Guard,
    Scope,
    _collect,
    _Guarded,
    _native_env,
    _text_env,
    is_template,
)

_RISKY = (nodes.BinExpr, nodes.Call, nodes.Filter, nodes.Concat)
_CONSTANT_LEAVES = (nodes.Const, nodes.TemplateData)


@lru_cache(maxsize=2048)
def constant_problem(text: str, budget: TemplateBudget) -> tuple[int, str] | None:
    tree = parsed(text).tree
    if tree is None:  # a syntax error: reported as template-syntax already
        return None
    free = summary(text).free - _text_env().globals.keys()
    problem = _walk_constants(tree, budget, 1)
    if problem is None and not free:  # nothing from the run: all of it is a constant
        problem = _evaluate(tree, budget, native=False)[1]
    return problem


def _walk_constants(node: nodes.Node, budget: TemplateBudget,
                    loops: int) -> tuple[int, str] | None:
    if isinstance(node, nodes.For):
        count = _constant_length(node.iter, budget)
        if isinstance(count, tuple):
            return count
        if count is not None:
            loops *= max(count, 1)
            if loops > budget.max_iterations:
                return (node.lineno, f"these loops would run {loops:,} iterations, over the "
                        f"budget of {budget.max_iterations:,} (template_budget.max_iterations)")
        for child in (*node.body, *node.else_):
            problem = _walk_constants(child, budget, loops)
            if problem:
                return problem
        return None
    if isinstance(node, nodes.Expr) and _is_constant(node) and _is_risky(node):
        return _evaluate(node, budget, native=True)[1]
    for child in node.iter_child_nodes():
        problem = _walk_constants(child, budget, loops)
        if problem:
            return problem
    return None


def _constant_length(expr: nodes.Node, budget: TemplateBudget) -> int | tuple[int, str] | None:
    inner = expr.node if isinstance(expr, nodes.Filter) and expr.name == "wfrun_iter" else expr
    if not (isinstance(inner, nodes.Expr) and _is_constant(inner)):
        return None
    counted = nodes.Filter(nodes.Filter(inner, "list", [], [], None, None, lineno=inner.lineno),
                           "length", [], [], None, None, lineno=inner.lineno)
    value, problem = _evaluate(counted, budget, native=True)
    if problem is not None:
        return problem
    return value if isinstance(value, int) else None


def _is_constant(node: nodes.Node) -> bool:
    if isinstance(node, nodes.Name):
        return node.name in ("range", "lipsum", "dict", "joiner", "cycler")
    if isinstance(node, (nodes.Concat, nodes.Filter, nodes.Call, nodes.BinExpr,
                         nodes.UnaryExpr, nodes.List, nodes.Tuple, nodes.Dict, nodes.Pair,
                         nodes.Getattr, nodes.Getitem, nodes.CondExpr, nodes.Compare,
                         nodes.Operand, nodes.Slice, nodes.Keyword, nodes.Test, nodes.And,
                         nodes.Or, nodes.Not, *_CONSTANT_LEAVES)):
        return all(_is_constant(c) for c in node.iter_child_nodes())
    return False


def _is_risky(node: nodes.Node) -> bool:
    return isinstance(node, _RISKY) or any(_is_risky(c) for c in node.iter_child_nodes())


_NOT_CONSTANT = object()


def _evaluate(node: nodes.Node, budget: TemplateBudget, *,
              native: bool) -> tuple[Any, tuple[int, str] | None]:
    """Render a constant part under the budget (for at most VALIDATE_SECONDS): its
    value, or (line, message) when it goes over the budget."""
    from runner.clock import SystemClock

    env: _Guarded = _native_env() if native else _text_env()
    tree = node if isinstance(node, nodes.Template) else nodes.Template(
        [nodes.Output([node], lineno=node.lineno)], lineno=node.lineno)
    guard = Guard(Scope(budget, SystemClock().monotonic), seconds=_b.VALIDATE_SECONDS,
                  validating=True)
    token = ACTIVE.set(guard)
    try:
        code = env.compile(tree.set_environment(env))  # type: ignore[call-overload]
        template = env.template_class.from_code(env, code, env.make_globals(None))
        return _collect(template, {}, guard, native=native), None
    except _b.RenderBudgetError as exc:
        return None, (getattr(node, "lineno", 1) or 1, str(exc))
    except Exception:  # an undefined name, a type error: the run reports it in context
        return _NOT_CONSTANT, None
    finally:
        ACTIVE.reset(token)


# -- shell code: quoting mistakes that let a value inject ------------------------------

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"})
_DASH_C = re.compile(r"-[A-Za-z]*c[A-Za-z]*")
_QUOTED_LAST = re.compile(r"\|\s*shell_quote\s*(?:-)?$")


def shell_code_items(argv: Sequence[str]) -> list[int]:
    """Which items of an argv list are shell code: what follows `-c` of a shell."""
    if not argv or argv[0].rsplit("/", 1)[-1] not in _SHELLS:
        return []
    for i, arg in enumerate(argv[1:], 1):
        if _DASH_C.fullmatch(arg):
            return [i + 1] if i + 1 < len(argv) else []
    return []


def shell_quoting_problems(code: str) -> list[str]:
    """Warnings for template values placed in shell code so that quoting does not hold:
    `shell_quote` inside double quotes (its single quotes are literal there, so `$(…)`
    in the value runs) and `tojson` not followed by `shell_quote` (JSON keeps `"`,
    `$` and backticks)."""
    problems: list[str] = []
    quote = ""  # the shell quote open at this point: "", "'" or '"'
    i = 0
    while i < len(code):
        if code.startswith(("{{", "{%", "{#"), i):
            end = code.find({"{{": "}}", "{%": "%}", "{#": "#}"}[code[i:i + 2]], i + 2)
            end = len(code) if end < 0 else end
            if code[i + 1] == "{":
                problems.extend(_expression_problems(code[i + 2:end].strip(" -+"), quote))
            i = end + 2
            continue
        ch = code[i]
        if ch == "\\" and quote != "'":
            i += 2
            continue
        if ch in "'\"" and quote in ("", ch):
            quote = "" if quote == ch else ch
        i += 1
    return problems


def _expression_problems(expr: str, quote: str) -> list[str]:
    out = []
    if "shell_quote" in expr and quote == '"':
        out.append("'shell_quote' inside double quotes: its single quotes are literal there, "
                   "so $(…) or `…` in the value still runs; put {{ … | shell_quote }} outside "
                   "the quotes")
    if "tojson" in expr and not _QUOTED_LAST.search(expr):
        out.append("'tojson' in shell code: JSON keeps \", $ and backticks, so the value can "
                   "run commands; end the expression with '| shell_quote'")
    return out


def check_syntax(text: str) -> tuple[int, str] | None:
    """None when the template parses; else (1-based line within it, message)."""
    if not is_template(text) or only_simple_tags(text):
        return None
    return _parse_problem(text)


def check_budget(text: str, budget: TemplateBudget = DEFAULT_BUDGET) -> tuple[int, str] | None:
    """For a template that parses: None when the parts of it that do not depend on the
    run fit the budget (tried for at most 1 s); else (line, message)."""
    if not is_template(text) or only_simple_tags(text):
        return None
    return constant_problem(text, budget)


def _parse_problem(text: str) -> tuple[int, str] | None:
    return summary(text).problem  # the one parse: what the reference check reads is kept
