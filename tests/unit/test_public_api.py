"""The public surface is exactly what `runner.__all__` lists (httpx-style)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import runner

# A submodule shows in dir(runner) once anything imported it (the suite's order
# decides which): every module of the package, and the names __init__ imports.
SUBPACKAGES = {m.name for m in pkgutil.iter_modules(runner.__path__)} | {
    "annotations", "importlib"}


def test_all_names_resolve() -> None:
    for name in runner.__all__:
        assert getattr(runner, name) is not None, name


def test_public_names_are_exactly_all() -> None:
    listed = {n for n in dir(runner) if not n.startswith("_") and n not in SUBPACKAGES
              and n not in {"TYPE_CHECKING", "Any"}}
    assert listed == set(runner.__all__) - {"__version__"}


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = runner.Nope  # type: ignore[attr-defined]


def test_importing_runner_does_not_load_the_engine_or_store() -> None:
    code = ("import sys, runner; print(sorted(m for m in ('runner.engine', 'runner.store', "
            "'networkx', 'sqlite3') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=30)
    assert out.stdout.strip() == "[]"


def test_errors_are_classified_by_exit_code() -> None:
    assert runner.InputError("x").exit_code == 2
    assert runner.NotFoundError("x").exit_code == 3
    assert runner.OperationFailed("x").exit_code == 1
    assert issubclass(runner.ClaimLost, runner.TemporaryError)
    assert runner.TemporaryError("x", delay=3).delay == 3
    assert runner.TemporaryError("x").exit_code == 1


def test_permanent_error_is_a_public_operation_failure() -> None:
    # A reconciler imports both retry signals from the package root, as kopf users do.
    assert "PermanentError" in runner.__all__
    assert "TemporaryError" in runner.__all__
    assert issubclass(runner.PermanentError, runner.OperationFailed)
    assert not issubclass(runner.PermanentError, runner.TemporaryError)
    assert runner.PermanentError("no such repository").exit_code == 1
    assert runner.PermanentError().message == (
        "A failure that retrying cannot fix; nothing is retried until the input changes.")


def test_agent_session_is_public_and_loads_lazily() -> None:
    # The in-process host for agent frameworks (docs/hosts.md): exported, and only
    # importing it pulls in the session machinery.
    assert "AgentSession" in runner.__all__
    code = ("import sys, runner; before = 'runner.host.inprocess' in sys.modules; "
            "cls = runner.AgentSession; print(before, cls.__module__, callable(cls.open))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=30)
    assert out.stdout.split() == ["False", "runner.host.inprocess._agent_session", "True"]
