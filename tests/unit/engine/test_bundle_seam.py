"""One bundle seam (issue 36): the backend is chosen once, in `space_for`, and every
other module asks its space (engine/_space.py) instead of asking which space it has.

An AST scan of every module under runner/ for the two shapes a backend branch takes:
`isinstance(..., DatabaseBundle | FolderBundle | DatabaseSpace | FolderSpace)`, and a
test of bundle rows against None (`rows is None`, `self.rows is not None`). Each one
must be in `ALLOWED`, by file and enclosing function, with the reason. A new branch
fails here: give both spaces the method and call it.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

RUNNER = Path(__file__).resolve().parents[3] / "runner"

BACKEND_CLASSES = frozenset({"DatabaseBundle", "FolderBundle", "DatabaseSpace",
                             "FolderSpace"})

#: (file under runner/, enclosing function) -> why it may branch on the backend.
ALLOWED: dict[tuple[str, str], str] = {
    ("engine/_space.py", "space_for"): "the one place the backend is chosen",
}


def _named_rows(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "rows") or (
        isinstance(node, ast.Attribute) and node.attr == "rows")


def _none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _classes(node: ast.expr) -> set[str]:
    """The class names an isinstance's second argument names (a tuple or an `|`)."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.Tuple):
        return set().union(*(_classes(e) for e in node.elts))
    if isinstance(node, ast.BinOp):
        return _classes(node.left) | _classes(node.right)
    return set()


class _Scanner(ast.NodeVisitor):
    def __init__(self) -> None:
        self.scope: list[str] = []
        self.found: list[tuple[str, int, str]] = []

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def _here(self) -> str:
        return ".".join(self.scope) or "<module>"

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
                and len(node.args) == 2:
            named = _classes(node.args[1]) & BACKEND_CLASSES
            if named:
                self.found.append((self._here(), node.lineno,
                                   f"isinstance(..., {'|'.join(sorted(named))})"))
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        if any(isinstance(op, ast.Is | ast.IsNot) for op in node.ops) \
                and any(_named_rows(s) for s in sides) and any(_none(s) for s in sides):
            self.found.append((self._here(), node.lineno, "rows compared with None"))
        self.generic_visit(node)


def backend_branches(source: str) -> list[tuple[str, int, str]]:
    scanner = _Scanner()
    scanner.visit(ast.parse(source))
    return scanner.found


def test_no_module_branches_on_the_bundle_backend() -> None:
    branches = []
    for path in sorted(RUNNER.rglob("*.py")):
        rel = path.relative_to(RUNNER).as_posix()
        for scope, line, what in backend_branches(path.read_text()):
            if (rel, scope) not in ALLOWED:
                branches.append(f"runner/{rel}:{line} in {scope}: {what}")
    assert not branches, ("backend branches outside the bundle spaces; give FolderSpace "
                          "and DatabaseSpace (or both bundles) the method instead:\n"
                          + "\n".join(branches))


def test_every_allowance_is_still_needed() -> None:
    """An allowance whose branch is gone is removed, so the list only shrinks."""
    used = set()
    for path in sorted(RUNNER.rglob("*.py")):
        rel = path.relative_to(RUNNER).as_posix()
        used |= {(rel, scope) for scope, _, _ in backend_branches(path.read_text())}
    assert set(ALLOWED) <= used, sorted(set(ALLOWED) - used)


def test_the_scan_sees_each_shape_of_a_backend_branch() -> None:
    source = textwrap.dedent("""
        class Reader:
            def one(self, bundle):
                if isinstance(bundle, DatabaseBundle): ...
            def two(self):
                if self.rows is not None: ...
            def three(self, rows, b):
                return rows is None or isinstance(b, (engine.FolderSpace, int))
            def fine(self, rows, b):
                return rows == [] or isinstance(b, dict) or b.rows_seen is None
    """)
    assert backend_branches(source) == [
        ("Reader.one", 4, "isinstance(..., DatabaseBundle)"),
        ("Reader.two", 6, "rows compared with None"),
        ("Reader.three", 8, "rows compared with None"),
        ("Reader.three", 8, "isinstance(..., FolderSpace)"),
    ]
