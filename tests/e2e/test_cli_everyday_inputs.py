"""Issue 13 item 6: `--input @FILE`, `--input -`, `-i key=@FILE`; `-i` values are strings
unless the input schema types them; where runs outside a project go."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from everyday import Project

ECHO = """\
    start: echo
    nodes:
      echo: {compute: "{{ input }}"}
    """
TYPED = """\
    input:
      type: object
      properties: {n: {type: integer}, name: {type: string}, ok: {type: [boolean, "null"]}}
    start: echo
    nodes:
      echo: {compute: "{{ input }}"}
    """


@pytest.fixture
def project(tmp_path: Path) -> Project:
    p = Project(tmp_path / "proj")
    p.workflow("echo", ECHO)
    p.workflow("typed", TYPED)
    return p


def _output(project: Project, *args: str, stdin: str | None = None) -> object:
    done = project.wfrun("run", *args, "--json", "-q", stdin=stdin)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["final_output"]


def test_pairs_without_a_schema_stay_strings(project: Project) -> None:
    assert _output(project, "echo", "-i", "version=1.10", "-i", "n=3", "-i", "flag=true") == {
        "version": "1.10", "n": "3", "flag": "true"}


def test_pairs_follow_the_declared_types(project: Project) -> None:
    assert _output(project, "typed", "-i", "n=3", "-i", "name=007", "-i", "ok=true") == {
        "n": 3, "name": "007", "ok": True}


def test_input_from_a_file_from_stdin_and_a_field_from_a_file(project: Project) -> None:
    project.file("in.json", '{"version": 1.1, "list": [1, 2]}\n')
    project.file("notes.txt", "line one\nline two\n")
    assert _output(project, "echo", "--input", "@in.json") == {"version": 1.1, "list": [1, 2]}
    assert _output(project, "echo", "--input", "-", stdin='{"from": "stdin"}') == {
        "from": "stdin"}
    assert _output(project, "echo", "-i", "notes=@notes.txt", "-i", "at=@@home") == {
        "notes": "line one\nline two\n", "at": "@home"}
    # `start` reads input the same way: the queued launch holds the file's value.
    queued = project.json("start", "echo", "--input", "@in.json", "--json")
    assert queued["queued"] is True


@pytest.mark.parametrize(("args", "stdin", "needle"), [
    (("--input", "@missing.json"), None, "--input: cannot read 'missing.json'"),
    (("--input", "-"), "{nope", "--input (stdin) is not valid JSON"),
    (("-i", "notes=@missing.txt"), None, "-i notes=@FILE: cannot read 'missing.txt'"),
])
def test_unreadable_or_bad_input_files_are_one_line_errors(
        project: Project, args: tuple[str, ...], stdin: str | None, needle: str) -> None:
    done = project.wfrun("run", "echo", *args, stdin=stdin)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert needle in done.stderr
    assert "Traceback" not in done.stderr
    assert not project.runs_dir.exists() or not any(
        p for p in project.runs_dir.iterdir() if not p.name.startswith("."))


def test_runs_outside_a_project_go_to_the_wfrun_home_folder(tmp_path: Path) -> None:
    home = tmp_path / "home"
    outside = Project(tmp_path / "nowhere", create=False)
    outside.root.mkdir()
    wf = outside.file("solo.yaml", ECHO)
    done = outside.wfrun("run", str(wf), "-i", "a=b", "-q", project=False,
                         env={"WFRUN_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    assert [p.name.split("-")[0] for p in (home / "runs").iterdir()
            if not p.name.startswith(".")] == ["solo"]
    assert not (outside.root / ".wfrun").exists()


@pytest.mark.parametrize(("text", "says"), [
    ('{"a": ' + "[" * 1000 + "]" * 1000 + "}", "nested deeper than 100 levels"),
    ('{"n": 1e400}', "the number 1e400 is not finite"),
    ('{"n": NaN}', "the number NaN is not finite"),
])
def test_input_nested_too_deep_or_not_finite_is_a_one_line_error(
        project: Project, tmp_path: Path, text: str, says: str) -> None:
    # Issue 35.6: `--input @deep.json` died in a RecursionError traceback.
    path = tmp_path / "deep.json"
    path.write_text(text)
    for args in (("--input", f"@{path}"), ("--input", "-")):
        done = project.wfrun("run", "echo", *args, stdin=text)
        assert done.returncode == 2, done.stderr
        assert says in done.stderr
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not project.runs_dir.exists() or not list(project.runs_dir.iterdir())
