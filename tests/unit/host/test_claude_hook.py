"""`wfrun hook claude-code`: inputs, decisions, the crash order, and the lean path."""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from runner.host.mcp import _channel as channel
from runner.host.mcp._hook import TOOL_NOTE, main
from runner.host.mcp._sessionlog import SessionLog

SID = "5c1d7e2a-0000-4000-8000-000000000001"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "proj" / ".wfrun").mkdir(parents=True)
    return tmp_path / "proj"


def log_of(project: Path, sid: str = SID) -> SessionLog:
    return SessionLog.for_session(project / ".wfrun", f"claude-code:{sid}")


def hook(project: Path, event: dict[str, Any] | str, **env: str) -> tuple[int, str, str]:
    raw = event if isinstance(event, str) else json.dumps(
        {"session_id": SID, "cwd": str(project), **event})
    out, err = io.StringIO(), io.StringIO()
    code = main(io.StringIO(raw), out, err, env)
    return code, out.getvalue(), err.getvalue()


def test_stop_with_nothing_pending_prints_nothing(project: Path) -> None:
    assert hook(project, {"hook_event_name": "Stop"}) == (0, "", "")


def test_stop_hands_over_once_as_context_not_as_a_block(project: Path) -> None:
    log = log_of(project)
    log.append_message("wfrun-deferred-turn", "Workflow x failed to start (run x-1): boom.",
                       {"turnIntentId": "i1"}, deliver_as="follow_up", trigger_turn=True)
    log.append_message("wfrun-notification", "x is 50% done", {}, deliver_as="next_turn",
                       trigger_turn=False)
    code, out, err = hook(project, {"hook_event_name": "Stop", "stop_hook_active": False})
    assert (code, err) == (0, "")
    decision = json.loads(out)
    # Claude Code's non-error Stop feedback: a `decision: block` would reach the
    # model as "Stop hook blocking error" and the user as a "stop hook problem".
    assert decision == {"hookSpecificOutput": {
        "hookEventName": "Stop", "additionalContext":
        "Workflow x failed to start (run x-1): boom.\n\nx is 50% done\n\n" + TOOL_NOTE}}
    assert "mcp__wfrun__workflow" in TOOL_NOTE
    assert log.pending() == []
    assert hook(project, {"hook_event_name": "Stop"}) == (0, "", "")  # exactly once


def test_a_passive_message_alone_does_not_block_but_rides_on_the_next_prompt(
        project: Path) -> None:
    log_of(project).append_message("wfrun-notification", "x is done", {},
                                   deliver_as="next_turn", trigger_turn=False)
    assert hook(project, {"hook_event_name": "Stop"}) == (0, "", "")
    code, out, _ = hook(project, {"hook_event_name": "UserPromptSubmit", "prompt": "hi"})
    assert code == 0
    assert json.loads(out) == {"hookSpecificOutput": {
        "hookEventName": "UserPromptSubmit", "additionalContext": "x is done\n\n" + TOOL_NOTE}}
    assert log_of(project).pending() == []


def test_killed_between_output_and_mark_means_delivered_again(project: Path) -> None:
    """Claude Code reads a hook's stdout only when it exits 0: a hook killed after
    writing but before marking delivered left nothing delivered, and the next Stop
    hands the same message over."""
    log = log_of(project)
    log.append_message("wfrun-deferred-turn", "failed to start", {}, deliver_as="follow_up",
                       trigger_turn=True)

    class Killed(BaseException):
        pass

    def killed(self: SessionLog, ids: list[str], via: str) -> None:
        raise Killed

    original = SessionLog.mark_delivered
    SessionLog.mark_delivered = killed  # type: ignore[assignment,method-assign]
    try:
        with pytest.raises(Killed):
            hook(project, {"hook_event_name": "Stop"})
    finally:
        SessionLog.mark_delivered = original  # type: ignore[method-assign]
    assert [m.content for m in log.pending()] == ["failed to start"]
    _, out, _ = hook(project, {"hook_event_name": "Stop"})
    assert json.loads(out)["hookSpecificOutput"]["additionalContext"].startswith("failed to start")
    assert log.pending() == []


@pytest.mark.parametrize(("raw", "message"), [
    ("not json", "not JSON"),
    ("[1, 2]", "no 'hook_event_name'"),
    ('{"hook_event_name": "Stop"}', "no 'session_id'"),
    ('{"hook_event_name": "Stop", "session_id": "../../x"}', "not usable as a log name"),
])
def test_bad_input_is_one_line_on_stderr_and_a_non_blocking_exit(
        project: Path, raw: str, message: str) -> None:
    code, out, err = hook(project, raw, CLAUDE_PROJECT_DIR=str(project))
    assert (code, out) == (1, "")
    assert err.startswith("wfrun: error: ")
    assert message in err
    assert err.count("\n") == 1


def test_no_project_says_how_to_fix(tmp_path: Path) -> None:
    code, out, err = hook(tmp_path, {"hook_event_name": "Stop"})
    assert (code, out) == (1, "")
    assert "wfrun integrate claude-code" in err


def test_no_server_for_this_claude_process_still_delivers_the_log(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    log_of(project).append_message("wfrun-deferred-turn", "failed", {}, deliver_as="follow_up",
                                   trigger_turn=True)
    code, out, err = hook(project, {"hook_event_name": "Stop"}, CLAUDE_PID="999999999")
    assert (code, err) == (0, "")
    assert json.loads(out)["hookSpecificOutput"]["hookEventName"] == "Stop"


def test_a_server_that_hangs_up_is_a_warning_and_the_log_is_still_delivered(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(channel.socket_path(4242))
    listener.listen(1)

    def hang_up() -> None:
        conn, _ = listener.accept()
        conn.recv(1024)
        conn.close()  # a server killed mid-request

    thread = threading.Thread(target=hang_up, daemon=True)
    thread.start()
    log_of(project).append_message("wfrun-deferred-turn", "failed", {}, deliver_as="follow_up",
                                   trigger_turn=True)
    try:
        code, out, err = hook(project, {"hook_event_name": "Stop"}, CLAUDE_PID="4242")
    finally:
        thread.join(timeout=10)
        listener.close()
    assert code == 0
    assert json.loads(out)["hookSpecificOutput"]["hookEventName"] == "Stop"
    assert err == ("wfrun: warning: the wfrun mcp server closed the connection without a "
                   "reply\n")


def test_the_hook_path_loads_no_heavy_module(project: Path) -> None:
    """The console script's lean path: no click, compiler, store, engine or SDK."""
    code = ("import io, sys, json; sys.argv = ['wfrun', 'hook', 'claude-code']; "
            f"sys.stdin = io.StringIO(json.dumps({{'hook_event_name': 'Stop', "
            f"'session_id': '{SID}', 'cwd': {str(project)!r}}})); "
            "import runner.cli as c\n"
            "try:\n    c.main()\nexcept SystemExit as e:\n    code = e.code\n"
            "heavy = sorted(m for m in ('click', 'rich', 'runner.compiler', 'runner.store', "
            "'runner.engine', 'runner.launch', 'runner.cli.app', 'mcp', 'anyio', 'sqlite3', "
            "'yaml', 'jinja2', 'networkx', 'dataclasses', 'pathlib', 'typing', "
            "'runner.clock', 'datetime') if m in sys.modules)\n"
            "print(code, heavy)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAUDE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=env, cwd=project)
    assert out.stdout.strip() == "0 []", out.stderr


def test_the_server_finds_its_claude_process_through_a_wrapper(tmp_path: Path) -> None:
    """A server started through a shell (or `uv run`) still answers the hooks of the
    Claude process above it: the nearest ancestor named `claude`."""
    fake_claude = tmp_path / "claude"
    shutil.copy("/bin/sh", fake_claude)
    probe = ("from runner.host.mcp._channel import claude_process; import os; "
             "print(claude_process(), os.getppid())")
    # claude -> sh (the wrapper) -> python: the claude pid, not the wrapper's.
    script = f"{shlex.quote(sys.executable)} -c {shlex.quote(probe)}; true"
    out = subprocess.run([str(fake_claude), "-c", f"/bin/sh -c {shlex.quote(script)}; "
                          "echo claude=$$"], capture_output=True, text=True, timeout=60)
    found, parent = out.stdout.split()[0:2]
    claude_pid = out.stdout.split("claude=")[1].strip()
    assert found == claude_pid, out.stdout
    assert parent != claude_pid  # the wrapper was the parent
    # With no claude above it, the parent is the answer.
    direct = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=60)
    found, parent = direct.stdout.split()
    # (unless these tests themselves run under a Claude Code process)
    assert found == parent or Path(f"/proc/{found}/comm").read_text().strip() == "claude"


def test_a_server_error_reply_is_a_warning_and_nothing_else_is_asked(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(channel.socket_path(4243))
    listener.listen(4)
    requests: list[dict[str, Any]] = []

    def answer_once() -> None:
        conn, _ = listener.accept()
        requests.append(json.loads(conn.recv(4096)))
        conn.sendall(b'{"ok": false, "error": "the run did not reach a quiet point"}\n')
        conn.close()

    thread = threading.Thread(target=answer_once, daemon=True)
    thread.start()
    log_of(project).append_message("wfrun-deferred-turn", "failed", {}, deliver_as="follow_up",
                                   trigger_turn=True)
    try:
        code, out, err = hook(project, {"hook_event_name": "Stop"}, CLAUDE_PID="4243")
    finally:
        thread.join(timeout=10)
        listener.close()
    assert code == 0
    assert json.loads(out)["hookSpecificOutput"]["hookEventName"] == "Stop"
    assert err == "wfrun: warning: the wfrun mcp server: the run did not reach a quiet point\n"
    assert [r["event"] for r in requests] == ["turn_settled"]
    assert requests[0]["session_id"] == f"claude-code:{SID}"
    assert requests[0]["v"] == 1
