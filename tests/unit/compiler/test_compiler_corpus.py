"""The fixture corpus: valid files compile clean, each invalid file yields exactly its
annotated diagnostics, and every diagnostic code the compiler can emit is exercised."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from compiler_corpus import (
    INVALID_FILES,
    REPO,
    VALID_FILES,
    compile_fixture,
    expectations,
    observed,
)

from runner.compiler import render_text

# Codes about the file itself rather than its content: no committed fixture can hold
# them, so other tests cover them (the test named next to each).
FILE_LEVEL_CODES = {
    "file-not-found": "test_compiler_sources.py::test_missing_file",
    "not-a-file": "test_compiler_sources.py::test_directory_is_not_a_file",
    "file-too-large": "test_compiler_sources.py::test_oversized_file",
    "symlink-loop": "test_compiler_sources.py::test_symlink_loop",
    "unreadable-file": "test_cli_definitions.py::test_unreadable_file",
    "invalid-name": "test_compiler_sources.py::test_catalog_rejects_bad_names",
    "duplicate-name": "test_compiler_sources.py::test_catalog_reports_yaml_and_yml_twins",
    "unreadable-folder": "test_compiler_sources.py::test_unreadable_folder",
    "unknown-folder": "test_cli_everyday_output.py::test_a_misnamed_workflow_folder_is_warned",
    "too-many-errors": "test_cli_hostile_yaml.py::test_a_file_with_a_hundred_thousand_errors_is_"
                       "capped",
    # Needs a broken package installed: a plugin's .dist-info on the path of a real wfrun.
    "step-unloadable": "test_step_calls.py::test_plugin_mistakes_are_positioned_with_did_you_mean",
}


def _id(path: Path) -> str:
    return path.name


def test_corpus_is_big_enough() -> None:
    assert len(VALID_FILES) >= 12
    assert len(INVALID_FILES) >= 45
    for path in INVALID_FILES:
        assert expectations(path), f"{path.name} has no '# expect:' annotation"


@pytest.mark.parametrize("path", VALID_FILES, ids=_id)
def test_valid_fixture_compiles(path: Path) -> None:
    result = compile_fixture(path)
    assert result.errors == [], render_text(result.diagnostics, result.texts)
    assert result.valid
    assert result.definition is not None
    assert result.graph is not None
    assert result.definition.digest.startswith("sha256:")
    # Warnings, if any, are annotated like the invalid files' errors.
    assert observed(result) == expectations(path)
    assert set(result.graph.nodes) == set(result.definition.nodes)


@pytest.mark.parametrize("path", INVALID_FILES, ids=_id)
def test_invalid_fixture_yields_exactly_its_diagnostics(path: Path) -> None:
    result = compile_fixture(path)
    expected = expectations(path)
    got = observed(result)
    assert got == expected, (
        f"missing: {sorted(expected - got)}\nunexpected: {sorted(got - expected)}\n"
        + render_text(result.diagnostics, result.texts))
    assert not result.valid
    assert result.definition is None
    assert result.graph is None
    # Every diagnostic renders as one `path:line:col: severity[code]: message` line first.
    for d in result.diagnostics:
        first = render_text([d], result.texts).splitlines()[0]
        where = f"{d.path}:{d.line}:{d.column}" if d.line else d.path
        assert first == f"{where}: {d.severity}[{d.code}]: {d.message}"
        assert "\n" not in d.message


def _emitted_codes() -> set[str]:
    """Every literal diagnostic code in runner/compiler (sink.error, Diagnostic(...), ...)."""
    codes: set[str] = set()
    for source in (REPO / "runner" / "compiler").glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            index = {"error": 0, "warning": 0, "_Limit": 0, "Diagnostic": 1}.get(name)
            if index is None or len(node.args) <= index:
                continue
            arg = node.args[index]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                codes.add(arg.value)
    return codes


def test_every_emitted_code_is_exercised() -> None:
    emitted = _emitted_codes()
    # The scan itself must find the well-known codes, or it proves nothing.
    assert {"unknown-key", "yaml-tab", "invalid-utf8", "include-cycle", "unrouted-exit",
            "file-too-large", "yaml-too-large"} <= emitted
    annotated = {code for p in [*VALID_FILES, *INVALID_FILES] for _, code, _, _ in
                 expectations(p)}
    missing = emitted - annotated - set(FILE_LEVEL_CODES)
    assert not missing, f"no fixture exercises: {sorted(missing)}"
    assert set(FILE_LEVEL_CODES) <= emitted, "a listed file-level code no longer exists"
