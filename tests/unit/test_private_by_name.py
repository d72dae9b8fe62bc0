"""Private by name (issue 36.3), as kopf's `_cogs`/`_core` and httpx's `_client.py`:
every module is `_private` but the public ones, and a package's __init__ lists only
the names other layers use, so an internal (a bundle class) cannot be imported
through its package. A one-off rename made the tree so; this keeps it so."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parents[2] / "runner"
#: Modules that keep their names: the package faces, the public root modules, and
#: the CLI (its command modules load by name from `COMMANDS`; it is the app's edge),
#: and `runner.steps`, the hook API and wfrun's own steps, written as plugins are (an
#: entry point of the `wfrun.steps` group names `runner.steps.http`).
PUBLIC = {"__init__.py", "__main__.py", "errors.py", "clock.py", "testing.py"}


def test_every_internal_module_is_private_by_name() -> None:
    public = sorted(
        path.relative_to(RUNNER).as_posix() for path in RUNNER.rglob("*.py")
        if "__pycache__" not in path.parts and not path.name.startswith("_")
        and path.name not in PUBLIC and path.parent.name not in ("cli", "steps"))
    assert public == [], "name new internal modules `_name.py`"


@pytest.mark.parametrize(("package", "name"), [
    ("runner.engine", "FolderBundle"),  # the bundle is behind the reader
    ("runner.engine", "BundleWriter"),
    ("runner.launch", "safe_message"),  # runner._safety's, not the launch layer's
    ("runner.store", "RESET_INSTRUCTION"),
])
def test_an_internal_is_not_importable_through_its_package(package: str, name: str) -> None:
    module = importlib.import_module(package)
    with pytest.raises(AttributeError):
        getattr(module, name)
    assert name not in getattr(module, "__all__", ())


@pytest.mark.parametrize(("package", "name"), [
    ("runner.engine", "RunReader"),
    ("runner.engine", "RunControl"),
    ("runner.store", "SqliteStore"),
    ("runner.store", "StoreError"),
    ("runner.launch", "LaunchCoordinator"),
    ("runner.controllers", "define_controller"),
])
def test_the_faces_keep_what_other_layers_use(package: str, name: str) -> None:
    assert getattr(importlib.import_module(package), name) is not None
