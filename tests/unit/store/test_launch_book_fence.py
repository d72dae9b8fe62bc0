"""The launch queue has one facade above the store: `runner.store.LaunchBook`.

Like procrastinate's `JobManager`, the book is the only caller of the store's
`launches` (the `LaunchQueue`) outside the store's own modules, so what the other
layers ask of the queue is listed, typed, in one place (runner/store/_book.py). An
AST scan of every module under runner/ outside runner/store/: no `<x>.launches.<y>`
and no `<store>.launches` (however the store is named). import-linter follows
imports, not attribute reads, so this ratchet keeps the rule; the contract
`launch-queue-behind-book` keeps the queue's implementation module private.
"""

from __future__ import annotations

import ast
from pathlib import Path

RUNNER = Path(__file__).resolve().parents[3] / "runner"


def queue_reads(root: Path) -> list[str]:
    """`file:line` of every read of a store's `launches` outside runner/store/."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("store/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [f"runner/{rel}:{node.lineno}" for node in ast.walk(tree)
                  if _reads_queue(node)]
    return sorted(set(found))


def _reads_queue(node: ast.AST) -> bool:
    """`<store>.launches`, `<x>.launches.<y>`, or `getattr(<x>, "launches")`."""
    if isinstance(node, ast.Attribute):
        if node.attr == "launches" and _names_a_store(node.value):
            return True
        return isinstance(node.value, ast.Attribute) and node.value.attr == "launches"
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "getattr" and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant) and node.args[1].value == "launches")


def _names_a_store(value: ast.expr) -> bool:
    name = value.attr if isinstance(value, ast.Attribute) else (
        value.id if isinstance(value, ast.Name) else "")
    return name.lstrip("_").endswith("store")


def test_only_the_launch_book_reads_the_stores_launch_queue() -> None:
    assert queue_reads(RUNNER) == []


def test_the_scan_finds_a_direct_read(tmp_path: Path) -> None:
    # The shapes the layers above used before the book: a CLI module, a session.
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "status.py").write_text(
        "def f(store):\n    return store.launches.counts()\n")
    (tmp_path / "session.py").write_text(
        "class S:\n    def f(self):\n        q = self._store.launches\n"
        "        return self.coordinator.store.launches.get('x'), q\n")
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "book.py").write_text("def f(store):\n    return store.launches\n")
    assert queue_reads(tmp_path) == ["runner/cli/status.py:2", "runner/session.py:3",
                                     "runner/session.py:4"]
