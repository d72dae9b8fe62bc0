"""One exception tree (issue 36.5), checked as httpx checks its own.

The trees drawn in `runner.errors` and `runner.store._errors` are the real class
hierarchy (a reader picks an `except` level from them), every class wfrun raises on
purpose is a `WfrunError`, the caller-side table covers every store class, and the
CLI prints each one as its one line with the exit code its class asks for.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import click
import pytest
from click.testing import CliRunner

import runner.errors as errors
import runner.store._errors as store_errors
from runner.cli.app import cli
from runner.host.runtime._errors import BUSY_MESSAGE, STORE_ERRORS, translate

RUNNER = Path(__file__).resolve().parents[2] / "runner"
_NODE = re.compile(r"^(?P<lead>[ │]*)(?:[├└]── )?(?P<name>[A-Z]\w+)\b")


def drawn_tree(module: ModuleType) -> dict[str, str | None]:
    """class name -> its parent's name, read from the tree in `module`'s docstring
    (the first block of lines drawn with box characters)."""
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    lines = (module.__doc__ or "").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    ") and
                 _NODE.match(line.strip()))
    for line in lines[start:]:
        if not line.strip():
            break
        body = line[4:]
        match = _NODE.match(body)
        if match is None or ("──" not in body and stack):
            continue  # a note continued on the next line
        depth = (len(match.group("lead")) + (4 if "──" in body else 0)) // 4
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[match.group("name")] = stack[-1][1] if stack else None
        stack.append((depth, match.group("name")))
    return parents


def classes(module: ModuleType) -> dict[str, type[BaseException]]:
    return {name: cls for name, cls in vars(module).items()
            if inspect.isclass(cls) and issubclass(cls, BaseException)
            and cls.__module__ == module.__name__}


@pytest.mark.parametrize("module", [errors, store_errors], ids=lambda m: m.__name__)
def test_the_drawn_tree_is_the_class_hierarchy(module: ModuleType) -> None:
    drawn = drawn_tree(module)
    defined = classes(module)
    assert set(defined) <= set(drawn), "a class the tree does not draw"
    known = {**classes(errors), **classes(store_errors)}
    for name, parent in drawn.items():
        if parent is None:
            continue
        assert known[name].__bases__ == (known[parent],), f"{name} is not under {parent}"


def test_every_error_wfrun_raises_on_purpose_is_a_wfrun_error() -> None:
    for cls in {**classes(errors), **classes(store_errors)}.values():
        assert issubclass(cls, errors.WfrunError), cls.__name__
    assert issubclass(store_errors.StoreError, errors.WfrunError)
    assert issubclass(store_errors.StoreUnreachable, store_errors.StoreUnavailable)
    assert store_errors.StoreError("x").exit_code == 1


def test_the_table_gives_every_store_class_a_caller_side_class() -> None:
    for cls in classes(store_errors).values():
        assert any(issubclass(cls, kind) for kind, _ in STORE_ERRORS), cls.__name__
    for i, (kind, _) in enumerate(STORE_ERRORS):  # first match wins: none is shadowed
        assert not any(issubclass(kind, earlier) for earlier, _ in STORE_ERRORS[:i]), kind


def test_code_asks_for_a_class_never_checks_the_exact_type() -> None:
    # `type(exc) is StoreUnavailable` stood for "the database went away" and missed
    # every subclass added later; StoreUnreachable says it by name.
    ours = {*classes(errors), *classes(store_errors)}
    found = []
    for path in sorted(RUNNER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Call)
                    and isinstance(node.left.func, ast.Name) and node.left.func.id == "type"
                    and any(isinstance(op, ast.Is | ast.IsNot) for op in node.ops)
                    and any(isinstance(c, ast.Name) and c.id in ours
                            for c in node.comparators)):
                found.append(f"{path.relative_to(RUNNER)}:{node.lineno}")
    assert found == []


def _instances() -> Iterator[BaseException]:
    special: dict[type[BaseException], BaseException] = {
        errors.MachineFault: errors.MachineFault("cannot write x: disk full", "free space"),
        store_errors.IncompatibleLayout: store_errors.IncompatibleLayout("s", "no table x"),
    }
    for cls in {**classes(errors), **classes(store_errors)}.values():
        yield special.get(cls) or cls(f"{cls.__name__} happened here")


@pytest.fixture
def raising() -> Iterator[click.Group]:
    """The real `wfrun` group with one more command that raises what it is given."""
    @click.command("raise-it", hidden=True)
    @click.argument("index", type=int)
    def raise_it(index: int) -> None:
        raise list(_instances())[index]

    cli.add_command(raise_it)
    try:
        yield cli
    finally:
        cli.commands.pop("raise-it")


@pytest.mark.parametrize("index", range(len(list(_instances()))),
                         ids=[type(e).__name__ for e in _instances()])
def test_the_cli_prints_each_error_as_its_one_line(raising: click.Group, index: int) -> None:
    error = list(_instances())[index]
    assert isinstance(error, errors.WfrunError)
    result = CliRunner().invoke(raising, ["raise-it", str(index)])
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    shown = translate(error)
    assert shown is not None
    assert line == f"wfrun: error: {' '.join(shown.message.split())}"
    assert result.exit_code == error.exit_code  # 2 bad input, 3 not found, else 1
    if isinstance(error, store_errors.StoreError):
        assert shown.message == (BUSY_MESSAGE if isinstance(error, store_errors.StoreBusy)
                                 else error.message)
