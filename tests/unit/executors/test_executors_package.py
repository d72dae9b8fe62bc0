"""The executors package exports every executor and loads each one only when asked."""

from __future__ import annotations

import subprocess
import sys

import pytest

import runner.engine.executors as executors


def test_every_exported_name_resolves_to_a_class_with_a_name() -> None:
    for export in executors.__all__:
        cls = getattr(executors, export)
        assert isinstance(cls, type)
        assert isinstance(cls.name, str)


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchExecutor"):
        _ = executors.NoSuchExecutor  # type: ignore[attr-defined]


def test_scripted_executor_does_not_import_httpx() -> None:
    code = ("import sys; from runner.engine.executors._scripted import ScriptedExecutor; "
            "print('httpx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30, check=True)
    assert out.stdout.strip() == "False"
