"""The public surface is exactly what `runner.__all__` lists (httpx-style)."""

from __future__ import annotations

import runner


def test_all_names_exist() -> None:
    for name in runner.__all__:
        assert hasattr(runner, name), name


def test_public_names_are_exactly_all() -> None:
    public = {n for n in vars(runner) if not n.startswith("_") and n not in {
        "annotations", "compiler", "errors", "engine", "store", "launch", "controllers",
        "host", "cli", "clock"}}
    assert public == set(runner.__all__) - {"__version__"}


def test_errors_are_classified_by_exit_code() -> None:
    assert runner.InputError("x").exit_code == 2
    assert runner.NotFoundError("x").exit_code == 3
    assert runner.OperationFailed("x").exit_code == 1
    assert issubclass(runner.ClaimLost, runner.TemporaryError)
    assert runner.TemporaryError("x", delay=3).delay == 3
