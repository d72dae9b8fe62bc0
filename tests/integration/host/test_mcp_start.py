"""How `wfrun mcp` starts (issue 33): the hooks' socket under any `$TMPDIR`, and a
session that cannot open is an error of each call rather than a dead server.

Real McpSession, real store, real socket, the hook's own `main`; no model.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from runner.compiler import build_catalog
from runner.host.mcp import _channel as channel
from runner.host.mcp._hook import main as hook_main
from runner.host.mcp._serve import LazySession, listen_for_hooks
from runner.host.mcp._server import McpSession
from runner.host.runtime._local import Workspace

pytestmark = pytest.mark.timeout(60)
PID = 31338


def _workspace(root: Path) -> Workspace:
    return Workspace(build_catalog("workflows", root, None), root, root / ".wfrun" / "state")


def _hook(root: Path, name: str, **extra: object) -> tuple[int, str, str]:
    event = {"hook_event_name": name, "session_id": "s-1", "cwd": str(root), **extra}
    out, err = io.StringIO(), io.StringIO()
    code = hook_main(io.StringIO(json.dumps(event)), out, err,
                     {"CLAUDE_PID": str(PID), "CLAUDE_PROJECT_DIR": str(root)})
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    return root


def test_a_long_tmpdir_still_connects_the_hooks(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    long_tmp = tmp_path / ("t" * 60) / ("m" * 60) / ("p" * 60)
    long_tmp.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(long_tmp))
    path = channel.socket_path(PID)
    assert len(path) <= channel.MAX_SOCKET_PATH
    assert path == f"/tmp/wfrun-{os.getuid()}/claude-{PID}.sock"
    session = McpSession(_workspace(project), "claude-code:s-1", client="claude-code")
    server = listen_for_hooks(session, PID)
    try:
        assert _hook(project, "UserPromptSubmit", prompt="hi") == (0, "", "")
        assert session.host.turn_open  # the event reached the server
    finally:
        server.shutdown()
        server.server_close()
        Path(path).unlink(missing_ok=True)
        session.close()


def test_a_short_tmpdir_is_used_and_kept_private(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    path = Path(channel.socket_path(PID))
    assert path.parent == tmp_path / f"wfrun-{os.getuid()}"
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_a_session_that_cannot_open_answers_every_call_with_the_reason(
        project: Path, capfd: pytest.CaptureFixture[str]) -> None:
    store = project / ".wfrun" / "state" / "store.sqlite3"
    store.parent.mkdir(parents=True)
    store.write_text("this is not a database")

    def opener() -> McpSession:
        return McpSession(_workspace(project), "mcp:s-1", client="none")

    lazy = LazySession(opener)
    first = lazy.tool_call("workflow", {"action": "list"})
    second = lazy.tool_call("workflow", {"action": "list"})
    assert first.is_error
    assert (first.text, first.is_error) == (second.text, second.is_error)
    assert first.text.startswith("wfrun cannot serve this project: ")
    assert "\n" not in first.text
    assert "Traceback" not in first.text
    assert lazy.hook_event({"event": "turn_started", "session_id": "x"})["ok"] is False
    err = capfd.readouterr().err
    assert err.count("wfrun mcp: error: ") == 1  # said once, not per call
    lazy.close()
