"""The catalog follows the files, and a session reads workflows only from the project
and the user folder (paths relative to the project).

Before the fix a catalog was built once per process (a workflow written later could
not be started by name), relative paths resolved against the process's cwd and any
path on the machine was compiled (`/etc/shadow` answered with its size and YAML
errors).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from runner.compiler import Catalog, build_catalog
from runner.compiler._workflows import current
from runner.errors import DefinitionInvalid, NotFoundError
from runner.host.runtime._local import Workspace

WF = "start: only\nnodes:\n  only: {compute: \"{{ 1 }}\"}\n"


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "one.yaml").write_text(WF)
    return root


def _ours(catalog: Catalog) -> list[str]:
    """The names the project and user folders hold (not the built-ins)."""
    return [e.name for e in catalog.active if e.origin != "builtin"]


def _old(path: Path) -> None:
    """Date a folder well before any scan, as an untouched project's folders are."""
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))


def test_an_unchanged_catalog_is_the_same_object(tmp_path: Path) -> None:
    root = _project(tmp_path)
    for folder in (root / ".wfrun", root / ".wfrun" / "workflows"):
        _old(folder)
    catalog = build_catalog("workflows", root, None)
    assert current(catalog) is catalog


def test_a_file_written_after_the_scan_is_found_even_in_the_same_clock_tick(
        tmp_path: Path) -> None:
    root = _project(tmp_path)
    catalog = build_catalog("workflows", root, None)
    (root / ".wfrun" / "workflows" / "two.yaml").write_text(WF)  # no pause: same tick
    fresh = current(catalog)
    assert _ours(fresh) == ["one", "two"]
    (root / ".wfrun" / "workflows" / "one.yaml").unlink()
    assert _ours(current(fresh)) == ["two"]


def test_a_settled_catalog_that_rescans_checks_its_new_stamp_again(tmp_path: Path) -> None:
    """The not-racy answer is kept per stamp: a rescan that found the same files takes
    a new (racy) stamp, and a workflow written right after it, in the same clock tick
    of the folder's mtime, is still found."""
    root = _project(tmp_path)
    for folder in (root / ".wfrun", root / ".wfrun" / "workflows"):
        _old(folder)
    catalog = build_catalog("workflows", root, None)
    assert current(catalog) is catalog
    assert current(catalog) is catalog  # the settled answer, kept
    folder = root / ".wfrun" / "workflows"
    tick = time.time_ns()  # the folder's mtime for both writes below: one clock tick
    (folder / "notes.txt").write_text("not a workflow")
    os.utime(folder, ns=(tick, tick))
    assert current(catalog) is catalog  # rescanned: the same files, a new stamp
    (folder / "two.yaml").write_text(WF)
    os.utime(folder, ns=(tick, tick))
    assert _ours(current(catalog)) == ["one", "two"]


def test_a_workflows_folder_created_later_is_followed(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / ".wfrun").mkdir(parents=True)
    user = tmp_path / "home"
    catalog = build_catalog("workflows", root, user)
    assert _ours(catalog) == []
    (root / ".wfrun" / "workflows").mkdir()
    (root / ".wfrun" / "workflows" / "one.yaml").write_text(WF)
    (user / "workflows").mkdir(parents=True)
    (user / "workflows" / "mine.yaml").write_text(WF)
    assert _ours(current(catalog)) == ["one", "mine"]


def test_workspace_compile_finds_a_workflow_written_after_it_was_built(tmp_path: Path) -> None:
    root = _project(tmp_path)
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun" / "state")
    ws.compile("one")
    (root / ".wfrun" / "workflows" / "later.yaml").write_text(WF)
    definition, stored = ws.compile("later")
    assert (definition.name, stored) == ("later", "later")
    assert "later" in ws.definitions().names()


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = _project(tmp_path)
    user = tmp_path / "home"
    (user / "workflows").mkdir(parents=True)
    return Workspace(build_catalog("workflows", root, user), root, root / ".wfrun" / "state")


def test_session_refs_keep_names_and_resolve_paths_against_the_project(
        ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ws.project_root is not None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert ws.session_ref("one") == "one"
    inside = str((ws.project_root / ".wfrun" / "workflows" / "one.yaml").resolve())
    assert ws.session_ref(".wfrun/workflows/one.yaml") == inside
    assert ws.session_ref("./.wfrun/workflows/one.yaml") == inside
    mine = str((tmp_path / "home" / "workflows" / "mine.yaml").resolve())
    assert ws.session_ref(str(tmp_path / "home" / "workflows" / "mine.yaml")) == mine


@pytest.mark.parametrize("ref", ["/etc/shadow", "../outside.yaml", "/etc/passwd.yaml",
                                 "~/.ssh/id_rsa.yaml", "link.yaml", "x" * 5000 + "/a.yaml"])
def test_session_refs_outside_the_project_and_user_folder_are_refused_blind(
        ws: Workspace, tmp_path: Path, ref: str) -> None:
    assert ws.project_root is not None
    (tmp_path / "outside.yaml").write_text(WF)
    (ws.project_root / "link.yaml").symlink_to(tmp_path / "outside.yaml")
    if ref.startswith("x"):
        # Under the project this is inside; the point is the bounded echo below.
        ref = "/" + ref
    with pytest.raises(NotFoundError) as caught:
        ws.session_ref(ref)
    message = caught.value.message
    assert "is outside the project and the user folder" in message
    assert "\n" not in message
    assert len(message) < 400
    for leak in ("bytes", "permission", "No such file", "YAML", "error"):
        assert leak not in message


def test_a_channel_removed_from_the_config_refuses_the_next_compile(tmp_path: Path) -> None:
    """config.yaml is not a source file of the definition, so the compile cache did not
    see a channel removed there: a long-lived host kept starting a workflow that names
    it, where a fresh compile refuses it."""
    from runner.host.runtime._channelnames import with_channels

    root = _project(tmp_path)
    config = root / ".wfrun" / "config.yaml"
    config.write_text("notify:\n  channels:\n"
                      "    ops: {type: webhook, url: 'http://127.0.0.1:9/h', secret_env: K}\n")
    (root / ".wfrun" / "workflows" / "tell.yaml").write_text(
        "start: n\nnodes:\n  n: {notify: {message: hi, channels: [ops]}}\n")
    for folder in (root / ".wfrun", root / ".wfrun" / "workflows"):
        _old(folder)  # no rescan: the catalog, and so the cache, stays the same
    ws = Workspace(with_channels(build_catalog("workflows", root, None)), root,
                   root / ".wfrun" / "state")
    first, _ = ws.compile("tell")
    assert ws.compile("tell")[0] is first  # cached while the channel is configured
    config.write_text("notify:\n  channels:\n    team: {type: slack, url_env: U}\n")
    with pytest.raises(DefinitionInvalid, match="notify channel 'ops' is not configured"):
        ws.compile("tell")
