"""Controller definitions (YAML): diagnostics with positions, loading, discovery (DESIGN §7).

The corpus lives in fixtures/controllers/{valid,invalid}/; each invalid file
names its expected diagnostics in `# expect: <code> <line>:<column>` lines.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from runner.compiler import build_catalog
from runner.compiler._controllers import DEFAULT_RECONCILE_TIMEOUT, compile_controller
from runner.controllers import define_controller, load_controller
from runner.errors import DefinitionInvalid, InputError, NotFoundError, OperationFailed
from runner.host.runtime._controllers import discover, find_controller, load_all
from runner.host.runtime._local import Workspace

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "fixtures" / "controllers"
VALID = sorted((CORPUS / "valid").glob("*.yaml"))
INVALID = sorted((CORPUS / "invalid").glob("*.yaml"))
EXPECT = re.compile(r"^# expect: ([a-z0-9-]+) (\d+):(\d+)\s*$")
BUILTIN_PR = REPO / "controllers" / "pull-request.yaml"


def expected(path: Path) -> set[tuple[str, int, int]]:
    out = set()
    for line in path.read_text().splitlines():
        if line.startswith("# expect:"):
            m = EXPECT.match(line)
            assert m, f"{path.name}: malformed annotation {line!r}"
            out.add((m[1], int(m[2]), int(m[3])))
    return out


def test_corpus_is_not_empty() -> None:
    assert len(VALID) >= 3
    assert len(INVALID) >= 12
    assert all(expected(p) for p in INVALID), "every invalid fixture names its diagnostics"


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_controller_reports_exactly_the_expected_diagnostics(path: Path) -> None:
    result = compile_controller(path)
    assert not result.valid
    assert result.definition is None
    got = {(d.code, d.line, d.column) for d in result.diagnostics}
    assert got == expected(path), [d.to_json() for d in result.diagnostics]
    assert all(d.path == path.as_posix() for d in result.diagnostics)
    assert result.to_json()["digest"] is None


@pytest.mark.parametrize("path", VALID, ids=[p.stem for p in VALID])
def test_valid_controller_has_no_diagnostics_and_a_digest(path: Path) -> None:
    result = compile_controller(path)
    assert result.valid, [d.to_json() for d in result.diagnostics]
    assert result.definition is not None
    assert result.definition.digest.startswith("sha256:")
    assert result.definition.name == path.stem


@pytest.mark.parametrize(("name", "bad", "hint"), [
    ("unknown_key", "reconcle_every", "did you mean 'reconcile'?"),
    ("unknown_key_typo", "timout", "did you mean 'timeout'?"),
])
def test_unknown_keys_suggest_the_nearest_key(name: str, bad: str, hint: str) -> None:
    (d,) = compile_controller(CORPUS / "invalid" / f"{name}.yaml").diagnostics
    assert f"unknown key '{bad}'" in d.message
    assert d.hint == hint


def test_full_definition_parses_every_field() -> None:
    d = compile_controller(CORPUS / "valid" / "full.yaml").definition
    assert d is not None
    assert (d.timeout, d.resync, d.description) == (90.0, 600.0, "A controller with every key set.")
    assert d.spec_schema == {"type": "object", "required": ["repository"],
                             "properties": {"repository": {"type": "string"}}}
    assert d.initial_status == {"phase": "new"}
    assert d.reconcile.file == str((CORPUS / "valid" / "hooks.py").resolve())
    minimal = compile_controller(CORPUS / "valid" / "minimal.yaml").definition
    assert minimal is not None
    assert (minimal.timeout, minimal.resync, minimal.spec_schema) == (
        DEFAULT_RECONCILE_TIMEOUT, None, None)


def test_digest_follows_content_not_location(tmp_path: Path) -> None:
    first = compile_controller(CORPUS / "valid" / "full.yaml").definition
    copy = tmp_path / "full.yaml"
    shutil.copy(CORPUS / "valid" / "full.yaml", copy)
    shutil.copy(CORPUS / "valid" / "hooks.py", tmp_path / "hooks.py")
    same = compile_controller(copy).definition
    copy.write_text(copy.read_text().replace("timeout: 90s", "timeout: 91s"))
    changed = compile_controller(copy).definition
    assert first is not None
    assert same is not None
    assert changed is not None
    assert first.digest == same.digest
    assert changed.digest != first.digest


def test_loaded_controller_checks_specs_against_its_schema() -> None:
    result = compile_controller(BUILTIN_PR)
    assert result.valid
    assert result.definition is not None
    ctl = load_controller(result.definition)
    assert ctl.name == "pull-request"
    assert ctl.timeout == 60.0
    good = {"api_base_url": "http://127.0.0.1:1", "repository": "o/r", "number": 1,
            "expected_head_sha": "abc1234"}
    assert ctl.check_spec(good) == good
    with pytest.raises(InputError, match="spec does not match controller 'pull-request'"):
        ctl.check_spec({**good, "number": 0})
    with pytest.raises(InputError, match="token"):
        ctl.check_spec({**good, "token": "ghp_x"})  # additionalProperties: false
    with pytest.raises(InputError, match="must be a mapping"):
        ctl.check_spec(["not", "a", "mapping"])


def test_a_module_hook_that_cannot_be_imported_fails_at_load_time() -> None:
    result = compile_controller(CORPUS / "valid" / "module-hook.yaml")
    assert result.valid
    assert result.definition is not None
    with pytest.raises(OperationFailed, match="controllers_fixture_module"):
        load_controller(result.definition)


def test_define_controller_is_the_python_api() -> None:
    ctl = define_controller("mine", lambda ctx, r: ctx.settled(), timeout=None, resync=30,
                            spec_schema={"type": "object", "required": ["x"]},
                            initial_status={"phase": "new"})
    assert (ctl.name, ctl.timeout, ctl.resync) == ("mine", None, 30)
    with pytest.raises(InputError):
        ctl.check_spec({})
    with pytest.raises(ValueError, match="needs a name"):
        define_controller("", lambda ctx, r: ctx.settled())


# -- discovery ------------------------------------------------------------------------------
def _controller(folder: Path, name: str, description: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(CORPUS / "valid" / "hooks.py", folder / "hooks.py")
    (folder / f"{name}.yaml").write_text(
        f"description: {description}\nreconcile: ./hooks.py:reconcile\n")


def test_discovery_precedence_is_project_then_user_then_builtin(tmp_path: Path) -> None:
    project, user = tmp_path / "proj", tmp_path / "home"
    _controller(project / ".wfrun" / "controllers", "pull-request", "project copy")
    _controller(user / "controllers", "pull-request", "user copy")
    _controller(user / "controllers", "user-only", "only in the user folder")
    _controller(project / ".wfrun" / "controllers", "broken", "x")
    (project / ".wfrun" / "controllers" / "broken.yaml").write_text("reconcile: 42\n")
    ws = Workspace(build_catalog("workflows", project, user), project, tmp_path / "state")
    entries = discover(ws, user)
    table = {(e.name, e.origin): e for e in entries}
    assert table[("pull-request", "project")].shadowed_by is None
    assert table[("pull-request", "user")].shadowed_by == "project"
    assert table[("pull-request", "builtin")].shadowed_by == "project"
    assert table[("user-only", "user")].shadowed_by is None
    assert not table[("broken", "project")].result.valid
    as_json = table[("pull-request", "user")].to_json()
    assert as_json["shadowed_by"] == "project"
    assert as_json["source"] == "user"
    assert as_json["valid"] is True

    loaded = {c.name: c for c in load_all(entries)}  # invalid ones are skipped
    assert set(loaded) == {"pull-request", "user-only"}
    assert loaded["pull-request"].spec_schema is None  # the project copy, not the built-in
    # The CLI verbs' name check compiles the one controller named, as discover did:
    # the active copy, the same errors.
    assert find_controller(ws, user, "pull-request").spec_schema is None  # the project's
    assert find_controller(ws, user, "user-only").name == "user-only"
    with pytest.raises(DefinitionInvalid, match=r"controller 'broken' is invalid: .*broken\.yaml"):
        find_controller(ws, user, "broken")
    with pytest.raises(NotFoundError, match="no controller named 'user-onyl'; did you mean "
                                            "'user-only'"):
        find_controller(ws, user, "user-onyl")


def test_builtin_pull_request_controller_is_discovered_without_a_project(tmp_path: Path) -> None:
    ws = Workspace(build_catalog("workflows", None, None), None, tmp_path / "state")
    entries = [e for e in discover(ws, None) if e.name == "pull-request"]
    assert [(e.origin, e.shadowed_by, e.result.valid) for e in entries] == [
        ("builtin", None, True)]
