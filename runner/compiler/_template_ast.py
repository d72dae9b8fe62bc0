"""One parse per template text at validate time, and the names it reads.

The syntax check, the reference check (references.py) and the budget check
(template_checks.py) each used to parse the text again, and the last two ran
`jinja2.meta.find_undeclared_variables`, which runs Jinja's whole code generator
to learn which names a template reads: 42 % of a cold `wfrun validate` (issue 34
item 18). `parsed` parses once per text (cached); `free_names` walks that tree.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any, NamedTuple

from jinja2 import TemplateSyntaxError, nodes

from ._simple_tags import MAPPING_METHODS, ROOTS
from ._templates import _text_env


class Parsed(NamedTuple):
    """The tree (as the sandbox parses it, loops instrumented), or (line, message)."""
    tree: nodes.Template | None
    problem: tuple[int, str] | None


@lru_cache(maxsize=4096)
def parsed(text: str) -> Parsed:
    """The one parse of `text` validate does. Callers must not change the tree (the
    budget check's compile of an all-constant template may fold constant parts into
    constants, which changes no name or reference the other checks read)."""
    try:
        return Parsed(_text_env().parse(text), None)
    except TemplateSyntaxError as exc:
        return Parsed(None, (exc.lineno or 1, exc.message or "invalid template"))
    except (RecursionError, MemoryError):
        return Parsed(None, (1, "the template is nested too deeply to parse"))


class Summary(NamedTuple):
    """What the reference check needs of one text: small, so many are kept (a 5,000
    node file has 5,000 templates; the trees are kept for only the last 4,096)."""
    problem: tuple[int, str] | None
    free: frozenset[str]
    refs: tuple[tuple[str, str, int], ...]  # (root, key, line) for `root.key`


@lru_cache(maxsize=65536)
def summary(text: str) -> Summary:
    """The syntax problem, the names read and the `root.key` references of `text`."""
    tree, problem = parsed(text)
    if tree is None:
        return Summary(problem, frozenset(), ())
    scan = _Scan()
    scan.body([tree], set())
    return Summary(None, frozenset(scan.free), tuple(scan.refs))


def reference(node: nodes.Node) -> tuple[str, str] | None:
    """(root, key) when `node` reads `root.key`, `root['key']` or `root.get('key')`."""
    key: Any = None
    if isinstance(node, nodes.Getattr):
        if node.attr in MAPPING_METHODS:
            return None
        key, target = node.attr, node.node
    elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        key, target = node.arg.value, node.node
    elif isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr) \
            and node.node.attr == "get" and node.args and isinstance(node.args[0], nodes.Const):
        key, target = node.args[0].value, node.node.node
    else:
        return None
    if isinstance(key, str) and isinstance(target, nodes.Name) and target.ctx == "load" \
            and target.name in ROOTS:
        return target.name, key
    return None


def walk(node: nodes.Node) -> Iterator[nodes.Node]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.iter_child_nodes())


def free_names(tree: nodes.Node) -> frozenset[str]:
    """The names `tree` reads from its context: loaded before anything in the
    template binds them. Jinja's scoping: `for`, `with`, macros, call blocks and
    filter blocks scope what they bind to their bodies; `set` binds from there on
    in the enclosing scope; `if` is no scope."""
    scan = _Scan()
    scan.body([tree], set())
    return frozenset(scan.free)


_MACRO_NAMES = frozenset({"caller", "varargs", "kwargs"})  # what a macro body sees


class _Scan:
    """One walk: the free names, and the `root.key` references on the way."""

    def __init__(self) -> None:
        self.free: set[str] = set()
        self.refs: list[tuple[str, str, int]] = []

    def body(self, statements: Iterable[nodes.Node], bound: set[str]) -> None:
        """Statements in order; what they bind stays bound in `bound` after them."""
        for node in statements:
            self.statement(node, bound)

    def statement(self, node: nodes.Node, bound: set[str]) -> None:
        if isinstance(node, nodes.For):
            self.expr(node.iter, bound)
            inner = bound | _targets(node.target) | {"loop"}
            if node.test is not None:
                self.expr(node.test, inner)
            self.body(node.body, set(inner))
            self.body(node.else_, set(bound))
        elif isinstance(node, nodes.Assign):
            self.expr(node.node, bound)
            self._store(node.target, bound)
        elif isinstance(node, nodes.AssignBlock):
            if node.filter is not None:
                self.expr(node.filter, bound)
            self.body(node.body, set(bound))
            self._store(node.target, bound)
        elif isinstance(node, nodes.With):
            for value in node.values:
                self.expr(value, bound)
            inner = set(bound)
            for target in node.targets:
                inner |= _targets(target)
            self.body(node.body, inner)
        elif isinstance(node, nodes.Macro):
            bound.add(node.name)
            self._callable(node.args, node.defaults, node.body, bound)
        elif isinstance(node, nodes.CallBlock):
            self.expr(node.call, bound)
            self._callable(node.args, node.defaults, node.body, bound)
        elif isinstance(node, nodes.FilterBlock):
            self.expr(node.filter, bound)
            self.body(node.body, set(bound))
        elif isinstance(node, (nodes.Import, nodes.FromImport)):
            self.expr(node.template, bound)
            if isinstance(node, nodes.Import):
                bound.add(node.target)
            else:
                bound.update(n if isinstance(n, str) else n[1] for n in node.names)
        elif isinstance(node, nodes.If):
            self.expr(node.test, bound)
            self.body(node.body, bound)
            for elif_ in node.elif_:
                self.statement(elif_, bound)
            self.body(node.else_, bound)
        elif isinstance(node, nodes.Expr):
            self.expr(node, bound)
        else:  # Template, Output, Scope, Block, ExprStmt, ...: children in order
            for child in node.iter_child_nodes():
                self.statement(child, bound)

    def _callable(self, args: list[nodes.Name], defaults: list[nodes.Expr],
                  body: list[nodes.Node], bound: set[str]) -> None:
        for default in defaults:
            self.expr(default, bound)
        self.body(body, bound | {a.name for a in args} | _MACRO_NAMES)

    def _store(self, target: nodes.Node, bound: set[str]) -> None:
        if isinstance(target, nodes.NSRef):  # `set ns.attr = ...` reads `ns`
            if target.name not in bound:
                self.free.add(target.name)
        else:
            bound |= _targets(target)

    def expr(self, node: nodes.Node, bound: set[str]) -> None:
        for n in walk(node):
            if isinstance(n, nodes.Name):
                if n.ctx == "load" and n.name not in bound:
                    self.free.add(n.name)
            elif isinstance(n, (nodes.Getattr, nodes.Getitem, nodes.Call)):
                ref = reference(n)
                if ref is not None:
                    self.refs.append((*ref, n.lineno))


def _targets(target: nodes.Node) -> set[str]:
    return {n.name for n in walk(target) if isinstance(n, nodes.Name)}
