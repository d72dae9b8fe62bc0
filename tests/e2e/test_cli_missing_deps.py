"""A missing optional dependency is one line naming what to install, never a
traceback (issue 33). The module is made missing the way Python itself reports it
(`sys.modules[name] = None` raises ModuleNotFoundError on import) in the real CLI
process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

WRAPPER = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
sys.argv = ["wfrun", *sys.argv[2:]]
from runner.cli import main
main()
"""


@pytest.mark.parametrize(("missing", "args", "says"), [
    ("psycopg,psycopg_pool", ["--store", "postgresql://u@127.0.0.1:9/db", "status"],
     "install wfrun[postgres]"),
    ("starlette,uvicorn", ["ui", "--port", "0"], "pip install --upgrade --force-reinstall wfrun"),
    ("prometheus_client", ["host", "--once", "--metrics", "127.0.0.1:0"],
     "pip install --upgrade --force-reinstall wfrun"),
])
def test_a_missing_dependency_is_one_line(tmp_path: Path, missing: str, args: list[str],
                                          says: str) -> None:
    (tmp_path / ".wfrun" / "workflows").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WFRUN_", "PYTHON"))}
    out = subprocess.run([sys.executable, "-c", WRAPPER, missing, *args], cwd=tmp_path,
                         capture_output=True, text=True, timeout=100,
                         env={**env, "WFRUN_HOME": str(tmp_path / "home")})
    assert out.returncode != 0
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("wfrun: error: ")
    assert says in line


def test_traces_asked_for_without_the_otel_extra_is_one_warning_and_the_run_goes_on(
        tmp_path: Path) -> None:
    (tmp_path / ".wfrun" / "workflows").mkdir(parents=True)
    (tmp_path / ".wfrun" / "workflows" / "greet.yaml").write_text(
        'start: hello\nnodes:\n  hello: {compute: "hi"}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WFRUN_", "PYTHON"))}
    out = subprocess.run([sys.executable, "-c", WRAPPER, "opentelemetry.sdk", "run", "greet",
                          "-q"], cwd=tmp_path, capture_output=True, text=True, timeout=100,
                         env={**env, "WFRUN_HOME": str(tmp_path / "home"),
                              "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    assert out.returncode == 0, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "pip install 'wfrun[otel]'" in line


def test_wfrun_mcp_needs_no_mcp_sdk(tmp_path: Path) -> None:
    """`pip install wfrun` + `wfrun integrate claude-code` gave a server that died on
    `No module named 'mcp_types'`: the server now needs none of the SDK's stack."""
    (tmp_path / ".wfrun" / "workflows").mkdir(parents=True)
    (tmp_path / ".wfrun" / "workflows" / "greet.yaml").write_text(
        'start: hello\nnodes:\n  hello: {compute: "hi"}\n')
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WFRUN_", "PYTHON", "CLAUDE"))}
    messages = [
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}',
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"workflow",'
        '"arguments":{"action":"start","workflow":"greet"}}}']
    out = subprocess.run([sys.executable, "-c", WRAPPER, "mcp,mcp_types,anyio,pydantic",
                          "mcp", "--session", "no-sdk"], cwd=tmp_path, input="\n".join(messages),
                         capture_output=True, text=True, timeout=100,
                         env={**env, "WFRUN_HOME": str(tmp_path / "home")})
    assert out.returncode == 0, out.stderr[-2000:]
    replies = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["id"] for r in replies] == [1, 2]
    assert replies[1]["result"]["isError"] is False, replies[1]
    assert "queued" in replies[1]["result"]["content"][0]["text"]
