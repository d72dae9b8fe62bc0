"""Cold start (issue 15): a command imports only what it uses.

Each command runs as the user runs it, `python -X importtime -m runner ...`, and the
modules it imported are read from the importtime lines on stderr: no hook or dump in
the product. The lists name the layers a command must not pay for; if every command
module were imported again up front, each of these tests would fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

#: Never needed by --help, status or validate.
NEVER = ("runner.controllers", "runner.ui", "starlette", "uvicorn", "mcp", "anyio",
         "runner.host.daemon", "runner.host.bridge", "runner.host.mcp", "rich",
         "runner.host.runtime.foreground")
#: Not needed by --help or validate; `status` reads the store and a run's bundle (and,
#: through runner/host/runtime/launches.py, today loads the engine, launch and watchdog).
NO_RUNTIME = ("runner.engine", "runner.launch", "runner.store", "sqlite3", "runner.host",
              "watchdog")


def imported(root: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "runner", *args],
                         cwd=root, capture_output=True, text=True, timeout=60, env=env)
    modules = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines()
               if line.startswith("import time:") and "|" in line}
    assert "runner.cli.app" in modules, out.stderr[-2000:]  # the lines were read
    return out, modules


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / ".wfrun" / "workflows").mkdir(parents=True)
    (tmp_path / ".wfrun" / "workflows" / "greet.yaml").write_text(
        'start: hello\nnodes:\n  hello: {compute: "{{ \'hi\' }}"}\n')
    return tmp_path


def test_help_imports_no_command_module_and_no_runtime(root: Path) -> None:
    out, modules = imported(root, "--help")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "  validate  " in out.stdout
    assert loaded(modules, (*NEVER, *NO_RUNTIME, "runner.compiler", "jinja2", "ruamel",
                            "networkx", "runner.cli.definitions", "runner.cli.launches",
                            "runner.cli.runs")) == []


def test_status_imports_neither_the_foreground_runner_nor_other_commands(root: Path) -> None:
    out, modules = imported(root, "status")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "no queued, starting, running or parked launches" in out.stderr
    assert "runner.cli.launches" in modules
    assert loaded(modules, (*NEVER, "runner.cli.definitions", "runner.cli.host",
                            "runner.cli.controllers")) == []


def test_validate_imports_the_compiler_only(root: Path) -> None:
    out, modules = imported(root, "validate", "greet")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok greet sha256:")
    assert "runner.compiler" in modules
    assert loaded(modules, (*NEVER, *NO_RUNTIME, "runner.cli.launches")) == []
