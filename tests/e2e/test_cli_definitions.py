"""`wfrun list/validate/graph/schema` through the real CLI, in subprocesses.

Bad input of every kind must end in a one-line error (never a traceback) and the
exit code DESIGN §9 assigns: 0 valid, 1 invalid, 2 usage or bad input, 3 not found.
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.compiler import Compiler
from runner.compiler._discovery import builtin_folder
from runner.compiler._schema import workflow_schema
from runner.compiler._sources import MAX_DEFINITION_BYTES

REPO = Path(__file__).resolve().parents[2]
VALID = REPO / "fixtures" / "definitions" / "valid"
VALID_TEXT = "start: a\nnodes:\n  a: {agent: hi}\n"


def wfrun(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
          preexec_fn: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=cwd,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=60, preexec_fn=preexec_fn, check=False)


def assert_clean_failure(proc: subprocess.CompletedProcess[str], code: int) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert "Traceback" not in proc.stdout
    assert proc.stderr.strip(), "an error must say something"


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if re.search(r"error(\[[a-z0-9-]+\])?: ", line)]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    return root


def _workflows(project: Path) -> Path:
    return project / ".wfrun" / "workflows"


# -- bad files -------------------------------------------------------------------------

def _big(path: Path) -> None:
    with path.open("wb") as f:
        f.write(VALID_TEXT.encode())
        f.truncate(50 * 1024 * 1024)


BAD_FILES: dict[str, tuple[bytes | Callable[[Path], None], str]] = {
    "empty": (b"", "empty-file"),
    "toplist": (b"- start: a\n- nodes: {}\n", "wrong-type"),
    "tabs": (b"start: a\nnodes:\n\ta: {agent: hi}\n", "yaml-tab"),
    "dupkey": (b"start: a\nstart: b\nnodes:\n  a: {agent: hi}\n", "duplicate-key"),
    "latin1": (b"start: a\ntitle: caf\xe9\nnodes:\n  a: {agent: hi}\n", "invalid-utf8"),
    "huge": (_big, "file-too-large"),
    # 200,000 levels once crashed the C YAML composer with SIGSEGV.
    "deep": (b"a: " + b"[" * 200_000 + b"]" * 200_000 + b"\n", "yaml-too-deep"),
    "bomb": (b"a: &a [x, x, x, x, x, x, x, x, x, x]\n"
             + b"".join(b"b%d: &b%d [" % (i, i) + b", ".join([b"*a" if i == 0 else b"*b%d" % (
                 i - 1)] * 10) + b"]\n" for i in range(8))
             + b"start: s\nnodes:\n  s: {agent: hi}\n", "yaml-too-large"),
}


def _write_bad(folder: Path, name: str) -> Path:
    content, _ = BAD_FILES[name]
    path = folder / f"{name}.yaml"
    if callable(content):
        content(path)
    else:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_file_is_one_line_error_exit_1(project: Path, name: str) -> None:
    path = _write_bad(_workflows(project), name)
    code = BAD_FILES[name][1]
    proc = wfrun("--project", str(project), "validate", str(path))  # names: the next test
    assert_clean_failure(proc, 1)
    errors = error_lines(proc.stderr)
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith(f"{path.as_posix()}")
    assert f"error[{code}]" in errors[0]
    assert proc.stdout == ""
    assert proc.stderr.rstrip().endswith("1 error, 0 warnings in 1 file")
    if name == "huge":
        assert f"{MAX_DEFINITION_BYTES:,} bytes" in errors[0]


def test_validate_all_reports_each_bad_file_and_passes_good_ones(project: Path) -> None:
    for name in BAD_FILES:
        _write_bad(_workflows(project), name)
    (_workflows(project) / "good.yaml").write_text(VALID_TEXT)
    proc = wfrun("--project", str(project), "validate", "--format", "json")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    files = {Path(f["path"]).stem: f for f in json.loads(proc.stdout)["files"]}
    assert files["good"]["valid"] is True
    for name, (_, code) in BAD_FILES.items():
        assert files[name]["valid"] is False
        assert [d["code"] for d in files[name]["diagnostics"]] == [code], name


def test_symlink_loop_in_the_project_folder(project: Path) -> None:
    loop = _workflows(project) / "loop.yaml"
    loop.symlink_to(loop)
    (_workflows(project) / "good.yaml").write_text(VALID_TEXT)

    proc = wfrun("--project", str(project), "validate")
    assert_clean_failure(proc, 1)
    assert [line for line in error_lines(proc.stderr)] == [
        f"{loop.as_posix()}: error[symlink-loop]: symbolic link loop; fix or remove the link"]
    assert re.search(r"^ok good sha256:[0-9a-f]{64}", proc.stdout, re.M)

    listed = wfrun("--project", str(project), "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)["workflows"]
            if r["source"] == "project"}
    assert rows["loop"]["valid"] is False
    assert rows["good"]["valid"] is True

    graph = wfrun("--project", str(project), "graph", "loop")
    assert_clean_failure(graph, 1)
    assert "error[symlink-loop]" in graph.stderr
    assert graph.stderr.splitlines()[-1].startswith("wfrun: error: workflow 'loop' has 1 error")


def _read_blocker() -> Callable[[], None] | None:
    """A preexec_fn under which chmod 000 really blocks reads, or None if it already does.

    Root reads anything, so the one subprocess runs as `nobody` when that user can
    reach the interpreter; otherwise it stays root but drops the capabilities that
    bypass file permissions (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) from its
    bounding set, which takes effect at exec.
    """
    if os.geteuid() != 0:
        return None
    nobody = pwd.getpwnam("nobody")

    def as_nobody() -> None:
        os.setgroups([])
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)

    try:
        subprocess.run([sys.executable, "-c", "import runner"], preexec_fn=as_nobody,
                       check=True, capture_output=True, timeout=60)
        return as_nobody
    except (OSError, subprocess.CalledProcessError):
        pass
    libc = ctypes.CDLL(None, use_errno=True)

    def without_dac_override() -> None:
        for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

    return without_dac_override


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temp folder every user can traverse (pytest's own is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="wfrun-e2e-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for p in folder.rglob("*"):
            if not p.is_symlink():
                p.chmod(0o755 if p.is_dir() else 0o644)
        shutil.rmtree(folder)


def test_unreadable_file(shared_tmp: Path) -> None:
    project = shared_tmp / "proj"
    workflows = _workflows(project)
    workflows.mkdir(parents=True)
    for p in (project, project / ".wfrun", workflows):
        p.chmod(0o755)
    secret = workflows / "secret.yaml"
    secret.write_text(VALID_TEXT)
    secret.chmod(0o000)
    (workflows / "open.yaml").write_text(VALID_TEXT)
    (workflows / "open.yaml").chmod(0o644)
    home = shared_tmp / "home"
    (home / "workflows").mkdir(parents=True)
    home.chmod(0o755)
    (home / "workflows").chmod(0o000)  # the user folder cannot even be listed

    preexec = _read_blocker()
    if preexec is None:
        try:
            secret.read_bytes()
        except PermissionError:
            pass
        else:  # pragma: no cover - e.g. a file system that ignores modes
            pytest.skip("chmod 000 does not block reads here")
    env = {"WFRUN_HOME": str(home), "HOME": str(shared_tmp)}
    proc = wfrun("--project", str(project), "validate", cwd=shared_tmp, env=env,
                 preexec_fn=preexec)
    assert_clean_failure(proc, 1)
    assert error_lines(proc.stderr) == [
        f"{secret.as_posix()}: error[unreadable-file]: permission denied; make the file "
        "readable",
        f"{(home / 'workflows').as_posix()}: error[unreadable-folder]: cannot list "
        "definitions folder: Permission denied"]
    assert re.search(r"^ok open sha256:", proc.stdout, re.M)


# -- usage and not-found ---------------------------------------------------------------

def test_project_without_wfrun_folder_is_a_usage_error(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    for args in (["validate"], ["list", "--json"], ["graph", "x"]):
        proc = wfrun("--project", str(bare), *args)
        assert_clean_failure(proc, 2)
        assert proc.stderr.splitlines() == [
            f"wfrun: error: '{bare}' has no .wfrun/ folder; create it with: "
            f"mkdir -p {bare}/.wfrun/workflows"]
    proc = wfrun("--project", str(tmp_path / "missing"), "validate")
    assert_clean_failure(proc, 2)
    assert len(proc.stderr.splitlines()) == 1


@pytest.mark.parametrize("args", [["validate", "no_such_flow"], ["graph", "no_such_flow"],
                                  ["validate", "./no_such_file.yaml"],
                                  ["graph", "./no_such_file.yaml"]])
def test_unknown_names_and_paths_exit_3(project: Path, args: list[str]) -> None:
    proc = wfrun("--project", str(project), *args, cwd=project)
    assert_clean_failure(proc, 3)
    assert len(error_lines(proc.stderr)) == 1


def test_not_found_suggests_the_near_name(project: Path) -> None:
    (_workflows(project) / "deploy.yaml").write_text(VALID_TEXT)
    proc = wfrun("--project", str(project), "graph", "deploi")
    assert_clean_failure(proc, 3)
    assert "did you mean 'deploy'?" in proc.stderr


@pytest.mark.parametrize("args", [["validate", "--format", "xml"], ["graph"],
                                  ["graph", "x", "--format", "png"], ["nonsense-command"]])
def test_usage_errors_exit_2(project: Path, args: list[str]) -> None:
    proc = wfrun("--project", str(project), *args)
    assert_clean_failure(proc, 2)


def test_invalid_definition_lists_every_problem_with_a_caret(project: Path) -> None:
    path = _workflows(project) / "broken.yaml"
    path.write_text("start: plan\nnodes:\n  plan:\n    agnet: hi\n  b: {agent: x, tmeout: 3s}\n")
    proc = wfrun("--project", str(project), "validate", "broken")
    assert_clean_failure(proc, 1)
    assert error_lines(proc.stderr) == [
        f"{path.as_posix()}:4:5: error[unknown-key]: unknown key 'agnet' in node 'plan'",
        f"{path.as_posix()}:5:17: error[unknown-key]: unknown key 'tmeout' in node 'b'"]
    assert "4 |     agnet: hi\n  |     ^ did you mean 'agent'?" in proc.stderr
    assert proc.stderr.rstrip().endswith("2 errors, 0 warnings in 1 file")


# -- list, validate --format json, graph, schema ---------------------------------------

def _builtin_name() -> str:
    names = sorted(p.stem for p in builtin_folder("workflows").glob("*.yaml"))
    if not names:  # pragma: no cover - the repository ships built-ins
        pytest.skip("no built-in workflows to shadow")
    return names[0]


def test_list_shows_precedence_and_shadowed_entries(project: Path, tmp_path: Path) -> None:
    name = _builtin_name()
    home = tmp_path / "home"
    (home / "workflows").mkdir(parents=True)
    (_workflows(project) / f"{name}.yaml").write_text(
        "title: from the project\nstart: p\nnodes:\n  p: {agent: project}\n")
    (home / "workflows" / f"{name}.yaml").write_text(
        "title: from the user\nstart: u\nnodes:\n  u: {agent: user}\n")
    (home / "workflows" / "mine.yaml").write_text(VALID_TEXT)
    env = {"WFRUN_HOME": str(home)}

    proc = wfrun("--project", str(project), "list", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["project"] == str(project.resolve())
    rows = [r for r in out["workflows"] if r["name"] == name]
    assert [(r["source"], r["shadowed_by"]) for r in rows] == [
        ("project", None), ("user", "project"), ("builtin", "project")]
    assert rows[0]["title"] == "from the project"
    assert rows[0]["valid"] is True
    assert rows[0]["path"] == (_workflows(project) / f"{name}.yaml").as_posix()
    assert rows[1]["path"] == (home / "workflows" / f"{name}.yaml").as_posix()
    assert [(r["source"], r["shadowed_by"]) for r in out["workflows"]
            if r["name"] == "mine"] == [("user", None)]
    for r in out["workflows"]:
        assert set(r) == {"name", "source", "path", "valid", "shadowed_by", "digest", "title",
                          "description", "inputs"}

    # The name resolves to the winner everywhere.
    graph = wfrun("--project", str(project), "graph", name, env=env)
    assert graph.returncode == 0
    assert "p [agent]" in graph.stdout

    # Without the project's copy, the user's wins and shadows the built-in.
    (_workflows(project) / f"{name}.yaml").unlink()
    proc = wfrun("--project", str(project), "list", "--json", env=env)
    rows = [r for r in json.loads(proc.stdout)["workflows"] if r["name"] == name]
    assert [(r["source"], r["shadowed_by"]) for r in rows] == [
        ("user", None), ("builtin", "user")]
    graph = wfrun("--project", str(project), "graph", name, env=env)
    assert graph.returncode == 0
    assert "u [agent]" in graph.stdout


def test_list_text_table_runs(project: Path) -> None:
    (_workflows(project) / "good.yaml").write_text(VALID_TEXT)
    proc = wfrun("--project", str(project), "list")
    assert proc.returncode == 0, proc.stderr
    assert "good" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_validate_json_shape(project: Path) -> None:
    (_workflows(project) / "good.yaml").write_text(VALID_TEXT)
    bad = _workflows(project) / "bad.yaml"
    bad.write_text("start: a\nnodes:\n  a: {agent: hi, tmeout: 3s}\n")
    proc = wfrun("--project", str(project), "validate", "good", "bad", "--format", "json")
    assert proc.returncode == 1
    assert proc.stderr == ""
    out = json.loads(proc.stdout)
    assert set(out) == {"files", "problems", "valid"}
    assert out["valid"] is False
    assert out["problems"] == []
    good, broken = out["files"]
    assert set(good) == set(broken) == {"path", "name", "valid", "digest", "diagnostics"}
    assert (good["name"], good["valid"], good["diagnostics"]) == ("good", True, [])
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", good["digest"])
    expected_digest = Compiler().compile_path(_workflows(project) / "good.yaml").definition
    assert expected_digest is not None
    assert good["digest"] == expected_digest.digest
    assert (broken["name"], broken["valid"], broken["digest"]) == ("bad", False, None)
    assert broken["path"] == bad.as_posix()
    assert broken["diagnostics"] == [{
        "path": bad.as_posix(), "line": 3, "column": 18, "severity": "error",
        "code": "unknown-key", "message": "unknown key 'tmeout' in node 'a'",
        "hint": "did you mean 'timeout'?"}]

    ok = wfrun("--project", str(project), "validate", "good", "--format", "json")
    assert ok.returncode == 0
    assert json.loads(ok.stdout)["valid"] is True


def test_validate_a_folder_of_fixtures() -> None:
    proc = wfrun("validate", str(VALID), "--format", "json", cwd=VALID)
    files = {Path(f["path"]).name: f for f in json.loads(proc.stdout)["files"]}
    assert set(files) >= {"review.yaml", "nested_outer.yaml", "yml_suffix.yml"}
    # Outside a project no catalog knows 'child_repair', so only the by-name include fails.
    assert [n for n, f in files.items() if not f["valid"]] == ["include_by_name.yaml"]
    assert [d["code"] for d in files["include_by_name.yaml"]["diagnostics"]] == [
        "workflow-not-found"]
    assert proc.returncode == 1


def _compiled(name: str) -> Any:
    result = Compiler().compile_path(VALID / name)
    assert result.definition is not None
    return result.definition


def test_graph_text() -> None:
    proc = wfrun("graph", str(VALID / "review.yaml"))
    assert proc.returncode == 0, proc.stderr
    d = _compiled("review.yaml")
    lines = proc.stdout.splitlines()
    assert lines[0] == f"review  {d.digest}"
    assert lines[1] == "start: plan  max_steps: 20"
    assert "● review [decision]" in lines
    assert "    $result.outcome == failed -> report" in lines
    assert "    -> fix/diagnose" in lines  # the include is flattened with qualified ids
    for nid in d.nodes:
        assert any(line.split(" ")[1:2] == [nid] for line in lines), nid


def test_graph_mermaid() -> None:
    proc = wfrun("graph", str(VALID / "review.yaml"), "--format", "mermaid")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "flowchart TD"
    assert '    n_lint -->|"ok"| n_count' in lines
    assert "    n_plan --> n_lint" in lines
    d = _compiled("review.yaml")
    edges = sum(len(e.targets) if e.to is None else 1 for e in d.edges.values())
    arrows = [line for line in lines if "-->" in line]
    assert len(arrows) >= edges
    assert len([line for line in lines if line.endswith('"]')]) == len(d.nodes)


def test_graph_dot() -> None:
    proc = wfrun("graph", str(VALID / "decision_mapping.yaml"), "--format", "dot")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.strip()
    assert text.startswith('digraph "decision_mapping" {')
    assert text.endswith("}")
    assert '"triage" [label="triage [decision]", shape=diamond];' in text
    assert '"triage" -> "page" [label="high"];' in text
    assert '"triage" -> "page" [label="3"];' in text
    assert text.count("{") == text.count("}")


def test_graph_of_an_invalid_file_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("start: nowhere\nnodes:\n  a: {agent: hi}\n")
    proc = wfrun("graph", str(path))
    assert_clean_failure(proc, 1)
    assert "error[unknown-node]" in proc.stderr
    assert proc.stdout == ""


def test_schema_command_prints_the_schema() -> None:
    proc = wfrun("schema")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == workflow_schema()


def test_project_flag_on_a_symlink_loop_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    res = wfrun("--project", str(tmp_path / "a"), "list")
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert res.stderr.strip().count("\n") == 0
    assert "symlink loop" in res.stderr


def test_graph_draws_a_fan_out_nodes_branches_and_body_in_every_format() -> None:
    text = wfrun("graph", str(VALID / "fanout.yaml")).stdout.splitlines()
    assert "    | each file (max 2 at once, fail_fast): $ action" in text
    assert "    | branch security: ƒ compute" in text
    assert "    | branch style: workflow style-review" in text
    mermaid = wfrun("graph", str(VALID / "fanout.yaml"), "--format", "mermaid").stdout
    assert '    b0_n_files(["each file (max 2 at once, fail_fast): $ action"])' in mermaid
    assert "    n_reviews -.- b1_n_reviews" in mermaid.splitlines()
    assert '    b1_n_reviews(["branch style: workflow style-review"])' in mermaid
    dot = wfrun("graph", str(VALID / "fanout.yaml"), "--format", "dot").stdout
    assert ('"reviews[security]" [label="branch security: ƒ compute", shape=box, '
            'style="rounded,dashed"];') in dot
    assert '"files" -> "files[each]" [style=dashed, arrowhead=none];' in dot
