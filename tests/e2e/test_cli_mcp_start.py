"""`wfrun mcp` start-up (issue 33): it answers `initialize` before loading the runtime,
keeps stdout for the protocol, and its benchmark runs.

Claude Code waits about two seconds for `initialize`; what the server loads before it
answers is what a loaded machine multiplies. The modules are read inside the real
server process at the moment its first reply is written (the test's own wrapper, not
the product); timing is measured by bench/bench_mcp_start.py, never asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
REPO = Path(__file__).resolve().parents[2]

#: What the start path must not load before `initialize` is answered.
HEAVY = ("mcp", "mcp_types", "anyio", "pydantic", "click", "rich", "runner.cli.app",
         "runner.compiler._compile", "runner.engine", "runner.store", "runner.launch",
         "runner.controllers", "runner.host.session._controller", "runner.host.runtime",
         "runner.host.mcp._server", "jinja2", "ruamel", "jsonschema", "networkx", "sqlite3")

#: What the command `integrate` writes loads through click (and the CLI's context).
CLICK_PATH = ("click", "runner.cli.app")
#: ...and what its fast path does without: the CLI context's dataclass, the compiler.
FAST_PATH_NEVER = ("dataclasses", "runner.cli.context", "runner.compiler", "uuid", "typing")

#: The console script's `main`, with the first protocol write dumping sys.modules.
WRAPPER = """
import json, os, sys
from runner.host.mcp import _stdio as stdio
send = stdio.StdioServer._send
def first_send(self, message):
    path = os.environ["MODULES_AT_INIT"]
    if not os.path.exists(path):
        with open(path, "w") as fh:
            json.dump(sorted(sys.modules), fh)
    send(self, message)
stdio.StdioServer._send = first_send
sys.argv = ["wfrun", *sys.argv[1:]]
from runner.cli import main
main()
"""

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}}


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "greet.yaml").write_text(
        'description: Say hi.\nstart: hello\nnodes:\n  hello: {compute: "hi"}\n')
    return root


@pytest.mark.parametrize("argv", [["mcp", "--client", "claude-code"], ["mcp"]])
def test_initialize_is_answered_before_the_runtime_loads(
        project: Path, tmp_path: Path, argv: list[str]) -> None:
    dump = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "CLAUDE"))}
    env.update(MODULES_AT_INIT=str(dump), CLAUDE_CODE_SESSION_ID="s-start",
               WFRUN_CLAUDE_PID=str(os.getpid()))
    messages = [INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                 "params": {"name": "workflow", "arguments": {"action": "list"}}}]
    out = subprocess.run([sys.executable, "-c", WRAPPER, *argv], cwd=project, env=env,
                         input="".join(json.dumps(m) + "\n" for m in messages),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    replies = {r["id"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert sorted(replies) == [1, 2, 3], out.stdout  # stdout holds only the protocol
    assert replies[1]["result"]["serverInfo"]["name"] == "wfrun"
    assert "wfrun" in replies[1]["result"]["instructions"]
    (tool,) = replies[2]["result"]["tools"]
    assert tool["name"] == "workflow"
    # What it is for, so the model picks it over Claude Code's built-in `Workflow` tool.
    assert ".wfrun/workflows/" in tool["description"]
    assert "not any other workflow tool" in tool["description"]
    assert "greet" in replies[3]["result"]["content"][0]["text"]  # the session did open
    at_init = json.loads(dump.read_text())
    assert "runner.host.mcp._stdio" in at_init
    if argv == ["mcp"]:  # spelled otherwise than `integrate` writes it: through click
        assert _loaded(at_init, tuple(h for h in HEAVY if h not in CLICK_PATH)) == []
    else:
        assert _loaded(at_init, (*HEAVY, *FAST_PATH_NEVER)) == []


def test_the_fast_path_outside_a_project_is_the_clis_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WFRUN_", "CLAUDE"))}
    out = subprocess.run([sys.executable, "-m", "runner", "mcp", "--client", "claude-code"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.startswith("wfrun: error: no .wfrun/ folder in this directory")
    assert len(out.stderr.splitlines()) == 1


def test_the_benchmark_runs_in_smoke_mode() -> None:
    out = subprocess.run([sys.executable, str(REPO / "bench" / "bench_mcp_start.py"),
                          "--smoke"], capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stderr[-2000:]
    for figure in ("initialize answered", "hook UserPromptSubmit", "workflow list call"):
        assert out.stdout.count(figure) == 2, out.stdout  # quiet and busy
