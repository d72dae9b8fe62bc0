"""The seams are typed (issue 36.3): `open_store` gives a `ProjectStore`, and no
function in runner/ takes or returns a store, workspace, reader or transaction as
`Any` (an `Any` store let three CLI modules call `store.launches.*` unchecked)."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

from runner.host.runtime import _local as local
from runner.store import ProjectStore, SqliteStore

RUNNER = Path(__file__).resolve().parents[2] / "runner"
#: Parameter names that always hold one of the typed seams.
SEAMS = frozenset({"store", "ws", "workspace", "reader", "tx", "conn", "session",
                   "coordinator", "runs_dir"})


def _is_any(annotation: ast.expr | None) -> bool:
    return (isinstance(annotation, ast.Name) and annotation.id == "Any") or (
        isinstance(annotation, ast.Constant) and annotation.value == "Any")


def test_no_seam_is_typed_any() -> None:
    found = []
    for path in sorted(RUNNER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                if arg.arg in SEAMS and _is_any(arg.annotation):
                    found.append(f"{path.relative_to(RUNNER)}:{node.lineno} {node.name}"
                                 f"({arg.arg}: Any)")
            if node.name.startswith(("open_", "_open_")) and _is_any(node.returns):
                found.append(f"{path.relative_to(RUNNER)}:{node.lineno} {node.name} -> Any")
    assert found == []


def test_open_store_gives_a_project_store() -> None:
    hints = typing.get_type_hints(local.open_store, vars(local) | {"ProjectStore": ProjectStore})
    assert hints["return"] is ProjectStore
    # Both sides, as a structural protocol the SQLite store meets.
    names = {n for n, _ in inspect.getmembers(ProjectStore) if not n.startswith("_")}
    assert {"launches", "reconcile_queue", "resources", "retention", "close"} <= names
    assert names <= set(dir(SqliteStore))
