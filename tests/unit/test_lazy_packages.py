"""runner.compiler, runner.engine and runner.controllers load their public names on
first use (PEP 562).

The public API stays as it was: every name in `__all__` resolves to the object its
submodule defines, `from runner.engine import Engine` works, and an unknown name is
an AttributeError. Importing the package alone loads none of its submodules (in a
fresh interpreter, as a command would).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

PACKAGES = ("runner.compiler", "runner.engine", "runner.controllers")
#: Public names a package imports at once (a stdlib-only module outside the package).
EAGER = {"runner.controllers": {"backoff_delay"}}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves_to_its_submodule_object(package: str) -> None:
    module = importlib.import_module(package)
    lazy: dict[str, str] = module._LAZY
    eager = EAGER.get(package, set())
    assert sorted(lazy) == sorted(set(module.__all__) - eager)
    for name in lazy:
        defining = importlib.import_module(f"{package}.{lazy[name]}")
        assert getattr(module, name) is getattr(defining, name), name
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        module.nope  # noqa: B018


def test_from_imports_keep_working() -> None:
    from runner.compiler import Compiler, WorkflowDefinition
    from runner.controllers import ControllerManager, Result
    from runner.controllers._manager import ControllerManager as DefinedManager
    from runner.engine import Engine, RunReader
    from runner.engine._engine import Engine as DefinedEngine
    from runner.engine._reader import RunReader as DefinedReader

    assert Engine is DefinedEngine
    assert RunReader is DefinedReader
    assert ControllerManager is DefinedManager
    assert Result.__module__ == "runner.controllers._conditions"
    assert Compiler.__module__ == "runner.compiler._compile"
    assert WorkflowDefinition.__module__ == "runner.compiler._model"


@pytest.mark.parametrize("package", PACKAGES)
def test_importing_the_package_loads_no_submodule(package: str) -> None:
    code = (f"import json, sys, {package}\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m.startswith('{package}.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert json.loads(out.stdout) == []
