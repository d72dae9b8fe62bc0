"""Reading and finding definition files: every bad file is a diagnostic, never an exception."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.compiler import Compiler, CompileResult, build_catalog
from runner.compiler._sources import MAX_DEFINITION_BYTES, read_source
from runner.compiler._yamlio import MAX_DEPTH

VALID_TEXT = "start: a\nnodes:\n  a: {agent: hi}\n"


def _codes(path: Path) -> list[tuple[str, int, int]]:
    result = Compiler().compile_path(path)
    assert not result.valid
    return [(d.code, d.line, d.column) for d in result.diagnostics]


def test_missing_file(tmp_path: Path) -> None:
    assert _codes(tmp_path / "nope.yaml") == [("file-not-found", 0, 0)]


def test_directory_is_not_a_file(tmp_path: Path) -> None:
    folder = tmp_path / "dir.yaml"
    folder.mkdir()
    assert _codes(folder) == [("not-a-file", 0, 0)]


def test_oversized_file(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("wb") as f:
        f.write(VALID_TEXT.encode())
        f.truncate(MAX_DEFINITION_BYTES + 1)
    result = Compiler().compile_path(path)
    assert [d.code for d in result.diagnostics] == ["file-too-large"]
    assert f"{MAX_DEFINITION_BYTES:,}" in result.diagnostics[0].message
    # Exactly at the limit is still read (and here fails only as YAML: NUL bytes).
    with path.open("r+b") as f:
        f.truncate(MAX_DEFINITION_BYTES)
    assert "file-too-large" not in {d.code for d in Compiler().compile_path(path).diagnostics}


def test_symlink_loop(tmp_path: Path) -> None:
    link = tmp_path / "loop.yaml"
    link.symlink_to(link)
    assert _codes(link) == [("symlink-loop", 0, 0)]
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.symlink_to(b)
    b.symlink_to(a)
    assert _codes(a) == [("symlink-loop", 0, 0)]


def test_symlink_to_a_valid_file_compiles(tmp_path: Path) -> None:
    target = tmp_path / "real.yaml"
    target.write_text(VALID_TEXT)
    link = tmp_path / "alias.yaml"
    link.symlink_to(target)
    assert Compiler().compile_path(link).valid


def test_utf8_error_column_counts_characters(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_bytes(b"start: a\n# \xc3\xa9\xc3\xa9 \xff\n")
    got = read_source(path)
    assert not hasattr(got, "text")
    assert (got.code, got.line, got.column) == ("invalid-utf8", 2, 6)  # type: ignore[union-attr]


def test_include_of_a_directory_or_missing_child(tmp_path: Path) -> None:
    (tmp_path / "sub.yaml").mkdir()
    (tmp_path / "p.yaml").write_text(
        "start: s\nincludes:\n  s: ./sub.yaml\nnodes:\n  a: {agent: hi}\n"
        "edges:\n  - {from: s.x, to: a}\n")
    result = Compiler().compile_path(tmp_path / "p.yaml")
    codes = {(Path(d.path).name, d.code) for d in result.diagnostics}
    assert codes == {("p.yaml", "include-invalid"), ("sub.yaml", "not-a-file")}


@pytest.mark.parametrize(("text", "code"), [
    ("a: " + "{b: " * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1) + "\n", "yaml-too-deep"),
    ("a: &x [*x]\n", "yaml-too-deep"),
    ("a: &x {b: {c: *x}}\n", "yaml-too-deep"),
])
def test_pathological_yaml_is_a_diagnostic(tmp_path: Path, text: str, code: str) -> None:
    """Recursive aliases once recursed forever. (Nesting deep enough to crash the C
    composer is tested through the CLI in a subprocess, tests/e2e.)"""
    path = tmp_path / "w.yaml"
    path.write_text(text)
    result = Compiler().compile_path(path)
    assert [d.code for d in result.diagnostics] == [code]
    assert result.diagnostics[0].line >= 1  # positioned at the offending bracket or alias


@pytest.mark.parametrize(("levels", "ok"), [(MAX_DEPTH, True), (MAX_DEPTH + 1, False)])
def test_nesting_limit_is_exact(tmp_path: Path, levels: int, ok: bool) -> None:
    # The root mapping is one level; `input` holds the rest (unknown keywords are fine
    # in a JSON Schema).
    k = levels - 1
    path = tmp_path / "w.yaml"
    path.write_text("input: " + "{a: " * k + "1" + "}" * k + "\nstart: a\nnodes:\n"
                    "  a: {agent: hi}\n")
    result = Compiler().compile_path(path)
    assert result.valid is ok, result.diagnostics
    if not ok:
        assert [(d.code, d.line, d.column) for d in result.diagnostics] == [
            ("yaml-too-deep", 1, 8 + 4 * (k - 1))]


def test_deep_output_schema_within_the_limit(tmp_path: Path) -> None:
    # Deep, but inside the limit: JSON Schema checks recurse without trouble.
    n = (MAX_DEPTH - 5) // 2
    schema = "{type: object, properties: {x: " * n + "{}" + "}}" * n
    path = tmp_path / "w.yaml"
    path.write_text(f"start: a\nnodes:\n  a:\n    agent:\n      prompt: hi\n"
                    f"      output: {schema}\n")
    result = Compiler().compile_path(path)
    assert result.valid, result.diagnostics


def test_shared_aliases_are_fine_until_they_explode(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("x: &s {type: string}\nstart: a\nnodes:\n  a:\n    agent:\n      prompt: hi\n"
                    "      output: {type: object, properties: {p: *s, q: *s}}\n")
    result = Compiler().compile_path(path)
    assert [d.code for d in result.diagnostics] == ["unknown-key"]  # only the stray 'x'


def test_catalog_rejects_bad_names(tmp_path: Path) -> None:
    folder = tmp_path / ".wfrun" / "workflows"
    folder.mkdir(parents=True)
    (folder / "good.yaml").write_text(VALID_TEXT)
    (folder / "bad name.yaml").write_text(VALID_TEXT)
    (folder / ".hidden.yaml").write_text(VALID_TEXT)
    (folder / "notes.txt").write_text("not a workflow")
    catalog = build_catalog("workflows", tmp_path, None)
    project = [e.name for e in catalog.entries if e.origin == "project"]
    assert project == ["good"]
    assert [(Path(d.path).name, d.code) for d in catalog.problems] == [
        ("bad name.yaml", "invalid-name")]


def test_catalog_reports_yaml_and_yml_twins(tmp_path: Path) -> None:
    folder = tmp_path / ".wfrun" / "workflows"
    folder.mkdir(parents=True)
    (folder / "twin.yaml").write_text(VALID_TEXT)
    (folder / "twin.yml").write_text(VALID_TEXT)
    catalog = build_catalog("workflows", tmp_path, None)
    assert [e.path.name for e in catalog.entries if e.origin == "project"] == ["twin.yaml"]
    assert [(Path(d.path).name, d.code) for d in catalog.problems] == [
        ("twin.yml", "duplicate-name")]


def test_unreadable_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real thing runs unprivileged in tests/e2e; here the listing itself fails."""
    folder = tmp_path / ".wfrun" / "workflows"
    folder.mkdir(parents=True)
    real_listdir = os.listdir

    def deny(path: object) -> list[str]:
        if Path(str(path)) == folder:
            raise PermissionError(13, "Permission denied")
        return real_listdir(path)  # type: ignore[arg-type]

    monkeypatch.setattr("runner.compiler._workflows.os.listdir", deny)
    catalog = build_catalog("workflows", tmp_path, None)
    assert [(d.code, d.path) for d in catalog.problems] == [
        ("unreadable-folder", folder.as_posix())]


def test_hook_that_is_a_link_loop_fifo_or_folder(tmp_path: Path) -> None:
    """Each once crashed (RuntimeError from resolve) or hung (reading a FIFO)."""
    (tmp_path / "loop.py").symlink_to(tmp_path / "loop.py")
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "folder.py").mkdir()
    path = tmp_path / "w.yaml"
    path.write_text("start: a\nnodes:\n"
                    "  a: {compute: {call: './loop.py:f'}}\n"
                    "  b: {action: {call: './pipe.py:f'}}\n"
                    "  c: {compute: {call: './folder.py:f'}}\n"
                    "edges:\n  - {from: a, to: b}\n  - {from: b, to: c}\n")
    result = Compiler().compile_path(path)
    assert [(d.code, d.line, d.column) for d in result.diagnostics] == [
        ("hook-not-found", 3, 23), ("hook-not-found", 4, 22), ("hook-not-found", 5, 23)]


def test_include_that_is_a_link_loop(tmp_path: Path) -> None:
    (tmp_path / "child.yaml").symlink_to(tmp_path / "child.yaml")
    path = tmp_path / "w.yaml"
    path.write_text("start: c\nincludes:\n  c: ./child.yaml\nnodes:\n  a: {agent: hi}\n"
                    "edges:\n  - {from: c.done, to: a}\n")
    result = Compiler().compile_path(path)
    got = {(Path(d.path).name, d.code, d.line, d.column) for d in result.diagnostics}
    assert got == {("w.yaml", "include-invalid", 3, 6), ("child.yaml", "symlink-loop", 0, 0)}


def test_compile_name_with_a_link_loop_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            ) -> None:
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    monkeypatch.chdir(tmp_path)
    result = Compiler().compile_name("./loop.yaml")
    assert isinstance(result, CompileResult)
    assert [d.code for d in result.diagnostics] == ["symlink-loop"]
