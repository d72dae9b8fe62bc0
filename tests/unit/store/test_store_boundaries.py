"""runner.store stands alone: no imports from the rest of runner but the shared policy
modules (runner._safety, runner._canonical, runner._private, runner._leases, runner.clock)
and the one error tree (runner.errors, whose StoreError branch the store defines);
time comes from the injected Clock."""

from __future__ import annotations

import ast
from pathlib import Path

import runner.store

STORE = Path(runner.store.__file__).parent
MODULES = sorted(STORE.rglob("*.py"))  # the Postgres package too


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


#: The root-level modules (standard library only) every layer shares.
SHARED_POLICIES = {"runner._safety", "runner._canonical", "runner._private", "runner._leases",
                   "runner.clock", "runner.errors"}


def test_the_store_imports_nothing_from_the_rest_of_runner_but_the_shared_policies() -> None:
    assert MODULES
    for path in MODULES:
        outside = {
            n
            for n in _imports(path)
            if n.split(".")[0] == "runner" and not n.startswith("runner.store")
            and n not in SHARED_POLICIES
        }
        assert outside == set(), path.name


def test_only_sqlite_modules_import_sqlite3() -> None:
    for path in MODULES:
        if "sqlite3" in _imports(path):
            assert path.parent.name == "sqlite", path.name


def test_only_the_postgres_package_imports_psycopg() -> None:
    for path in MODULES:
        if {"psycopg", "psycopg_pool"} & {n.split(".")[0] for n in _imports(path)}:
            assert path.parent.name == "postgres", path.name


def test_time_is_injected_the_wall_clock_is_only_a_default() -> None:
    """`time` appears only in sqlite/_store.py, as the constructor's default `now`."""
    for path in MODULES:
        tree = ast.parse(path.read_text())
        calls = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id in ("time", "datetime")
        ]
        assert calls == [], path.name
        if path.relative_to(STORE).as_posix() != "sqlite/_store.py":
            assert not {"time", "datetime"} & _imports(path), path.name


def test_modules_stay_small() -> None:
    for path in MODULES:
        assert len(path.read_text().splitlines()) <= 600, path.name
