"""A session's `workflow` tool and the files: a workflow written during the session
starts by name; paths resolve against the project and stay inside it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from harness import COMPUTE_WF, Scripted, Session, dedent

pytestmark = pytest.mark.timeout(30)
Make = Callable[..., Session]


def _start(s: Session, workflow: str) -> tuple[str, dict[str, object], bool]:
    reply = s.controller.on_tool_call("c", "workflow", {"action": "start", "workflow": workflow})
    return reply.content, reply.details, reply.is_error


def test_a_workflow_written_during_the_session_starts_by_name(session: Make) -> None:
    s = session(Scripted(), {"first": COMPUTE_WF})
    assert _start(s, "first")[2] is False  # the catalog was read (and cached) here
    s.controller.on_tool_call("c", "workflow", {"action": "cancel"})
    s.write_workflow("later", COMPUTE_WF)
    text, details, error = _start(s, "later")
    assert not error, text
    assert details["workflow"] == "later"


def test_paths_resolve_against_the_project_not_the_cwd(
        session: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = session(Scripted(), {})
    (s.root / "flows").mkdir()
    (s.root / "flows" / "side.yaml").write_text(dedent(COMPUTE_WF))
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "flows").mkdir(parents=True)
    monkeypatch.chdir(elsewhere)  # the process runs somewhere else; no side.yaml here
    text, details, error = _start(s, "flows/side.yaml")
    assert not error, text
    assert details["workflow"] == "side"


@pytest.mark.parametrize("ref", ["/etc/shadow", "../../etc/passwd.yaml", "/etc/hostname"])
def test_a_path_outside_the_project_is_refused_with_one_line_that_reveals_nothing(
        session: Make, ref: str) -> None:
    s = session(Scripted(), {})
    text, details, error = _start(s, ref)
    assert error
    assert details["code"] == "workflow_not_found"
    error = json.loads(text)["error"]
    assert error["code"] == "workflow_not_found"
    assert error["message"].startswith(
        f"workflow path {json.dumps(ref)} is outside the project and the user folder")
    assert "\n" not in text
    for leak in ("bytes", "YAML", "permission", "denied", "No such", "exist"):
        assert leak not in text
    assert s.launches() == []
