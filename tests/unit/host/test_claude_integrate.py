"""`wfrun integrate claude-code`: merged into the user's files, never clobbering them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from runner.errors import InputError
from runner.host.mcp._integrate import HOOK_EVENTS, integrate

CMD = ["/opt/venv/bin/wfrun"]


def read(path: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(path.read_text())


def test_fresh_project_gets_the_server_and_the_three_hooks(tmp_path: Path) -> None:
    done = integrate(tmp_path, CMD)
    assert done.changed == [tmp_path / ".mcp.json", tmp_path / ".claude" / "settings.json"]
    assert read(done.mcp_json) == {"mcpServers": {"wfrun": {
        "type": "stdio", "command": "/opt/venv/bin/wfrun",
        "args": ["mcp", "--client", "claude-code"]}}}
    settings = read(done.settings)
    for event in HOOK_EVENTS:
        (group,) = settings["hooks"][event]
        (hook,) = group["hooks"]
        assert hook["type"] == "command"
        assert hook["command"] == "/opt/venv/bin/wfrun hook claude-code"
    assert settings["enabledMcpjsonServers"] == ["wfrun"]
    # Without it `claude -p` denies every call, and an interactive Claude asks each time.
    assert settings["permissions"] == {"allow": ["mcp__wfrun__workflow"]}


def test_user_entries_survive_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"db": {"command": "db-mcp"}},
                                                    "x-note": "mine"}))
    user_stop = {"matcher": "", "hooks": [{"type": "command", "command": "say done"}]}
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps({
        "model": "opus", "permissions": {"allow": ["Bash(ls:*)"]},
        "hooks": {"Stop": [user_stop], "PreToolUse": [{"hooks": [
            {"type": "command", "command": "lint"}]}]},
        "enabledMcpjsonServers": ["db"]}))
    os.chmod(tmp_path / ".claude" / "settings.json", 0o600)
    integrate(tmp_path, CMD)
    mcp = read(tmp_path / ".mcp.json")
    assert mcp["mcpServers"]["db"] == {"command": "db-mcp"}
    assert mcp["x-note"] == "mine"
    settings = read(tmp_path / ".claude" / "settings.json")
    assert settings["model"] == "opus"
    assert settings["permissions"] == {"allow": ["Bash(ls:*)", "mcp__wfrun__workflow"]}
    assert settings["hooks"]["PreToolUse"] == [{"hooks": [{"type": "command",
                                                           "command": "lint"}]}]
    assert settings["hooks"]["Stop"][0] == user_stop
    assert len(settings["hooks"]["Stop"]) == 2
    assert settings["enabledMcpjsonServers"] == ["db", "wfrun"]
    assert stat.S_IMODE((tmp_path / ".claude" / "settings.json").stat().st_mode) == 0o600
    before = {p: p.read_bytes() for p in (tmp_path / ".mcp.json",
                                           tmp_path / ".claude" / "settings.json")}
    assert integrate(tmp_path, CMD).changed == []
    assert {p: p.read_bytes() for p in before} == before


def test_a_moved_installation_replaces_its_own_entries_only(tmp_path: Path) -> None:
    integrate(tmp_path, ["/old/venv/bin/wfrun"])
    done = integrate(tmp_path, [sys.executable, "-m", "runner"])
    settings = read(done.settings)
    for event in HOOK_EVENTS:
        commands = [h["command"] for g in settings["hooks"][event] for h in g["hooks"]]
        assert commands == [f"{sys.executable} -m runner hook claude-code"]
    assert read(done.mcp_json)["mcpServers"]["wfrun"]["args"] == [
        "-m", "runner", "mcp", "--client", "claude-code"]


@pytest.mark.parametrize(("name", "text", "message"), [
    (".mcp.json", "{oops", "is not valid JSON"),
    (".mcp.json", "[]", "must hold a JSON object"),
    (".mcp.json", '{"mcpServers": []}', "'mcpServers' must be a JSON object"),
    (".claude/settings.json", '{"hooks": {"Stop": {}}}', "hooks.Stop must be a JSON array"),
    (".claude/settings.json", '{"permissions": {"allow": "x"}}', "'allow' must be a JSON array"),
])
def test_a_file_wfrun_cannot_merge_is_refused_untouched(tmp_path: Path, name: str, text: str,
                                                         message: str) -> None:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        integrate(tmp_path, CMD)
    assert path.read_text() == text


def test_the_cli_command_writes_both_files(tmp_path: Path) -> None:
    (tmp_path / ".wfrun").mkdir()
    out = subprocess.run([sys.executable, "-m", "runner", "--project", str(tmp_path),
                          "integrate", "claude-code"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert ".mcp.json: updated" in out.stdout
    assert "mcp__wfrun__workflow" in out.stdout
    (tmp_path / ".mcp.json").write_text("[]")
    bad = subprocess.run([sys.executable, "-m", "runner", "--project", str(tmp_path),
                          "integrate", "claude-code"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.startswith("wfrun: error: ")
    assert len(bad.stderr.strip().splitlines()) == 1


def _integrate(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", "--project", str(root), "integrate",
                           "claude-code"], capture_output=True, text=True, timeout=120, env=env)


def test_the_configured_server_is_started_once_and_checked(tmp_path: Path) -> None:
    (tmp_path / ".wfrun").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WFRUN_", "CLAUDE"))}
    out = _integrate(tmp_path, env)
    assert out.returncode == 0, out.stderr
    assert "mcp --client claude-code` starts and answers" in out.stdout
    assert not (tmp_path / ".wfrun" / "state").exists()  # initialize alone opens nothing
    # A server that cannot start (here a stale WFRUN_PROJECT it inherits, as it would
    # from Claude) is one line, after the files are written.
    gone = tmp_path / "gone"
    bad = _integrate(tmp_path, {**env, "WFRUN_PROJECT": str(gone)})
    assert bad.returncode == 1, bad.stderr
    (line,) = bad.stderr.strip().splitlines()[-1:]
    assert line.startswith("wfrun: error: the files are written, but `")
    assert f"does not start: wfrun: error: project folder '{gone}' does not exist" in line
    assert "Traceback" not in bad.stderr


def test_wfrun_is_named_by_path_when_path_leads_to_this_installation(tmp_path: Path) -> None:
    (tmp_path / ".wfrun").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WFRUN_", "CLAUDE"))}
    bindir = str(Path(sys.executable).parent)
    on_path = _integrate(tmp_path, {**env, "PATH": f"{bindir}:{env.get('PATH', '')}"})
    assert on_path.returncode == 0, on_path.stderr
    server = read(tmp_path / ".mcp.json")["mcpServers"]["wfrun"]
    assert (server["command"], server["args"]) == ("wfrun", ["mcp", "--client", "claude-code"])
    assert "not on PATH" not in on_path.stderr
    # Not on PATH: the interpreter, which a project's own `runner/` must not shadow.
    (tmp_path / "runner").mkdir()
    (tmp_path / "runner" / "__init__.py").write_text("raise SystemExit('not wfrun')\n")
    elsewhere = _integrate(tmp_path, {**env, "PATH": "/usr/bin:/bin"})
    assert elsewhere.returncode == 0, elsewhere.stderr
    server = read(tmp_path / ".mcp.json")["mcpServers"]["wfrun"]
    assert server["command"] == sys.executable
    assert server["args"] == ["-P", "-m", "runner", "mcp", "--client", "claude-code"]
    assert "wfrun is not on PATH" in elsewhere.stderr
