"""Cold start (issue 15): a command imports only what it uses.

Each command runs in its own interpreter as `python -m runner ...` would run it, and
the modules it imported are `sys.modules` when it exits (written by the test's own
`-c` wrapper, not by the product; importtime's lines would miss a module loaded
through importlib). Each test names, per command, the layers and libraries it must not pay
for; if a package `__init__` loaded everything again, or a view imported the
coordinator at module level, these tests fail. Timing is measured by
bench/bench_cli_start.py, never asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

#: Never needed by --help, status, runs, show or validate.
NEVER = ("runner.controllers", "runner.ui", "starlette", "uvicorn", "mcp", "anyio",
         "runner.host._daemon", "runner.host.bridge", "runner.host.mcp", "runner.host.inprocess",
         "runner.host.session", "runner.host.runtime._foreground", "runner.host.runtime._devmode",
         "runner.host.runtime._watch", "watchdog", "networkx", "runner.launch",
         "psycopg", "psycopg_pool", "runner.store.postgres")
#: The engine's run loop, node kinds and executors: only running a workflow needs them.
EXECUTOR = ("runner.engine._engine", "runner.engine._runner", "runner.engine._nodes",
            "runner.engine._agent", "runner.engine.executors", "runner.engine._context",
            "runner.engine._hooks", "runner.engine._secrets", "runner.engine._procs")
#: The compiler's checks and what they load (YAML, Jinja2, JSON Schema): only compiling
#: a definition needs them; finding the project needs just `runner.compiler._discovery`.
COMPILING = ("runner.compiler._compile", "runner.compiler._parse", "runner.compiler._templates",
             "runner.compiler._yamlio", "runner.compiler._graph", "runner.compiler._references",
             "runner.compiler._jsonschemas", "jinja2", "markupsafe", "ruamel", "_ruamel_yaml",
             "jsonschema", "referencing")
#: What compiling reads YAML with; a kept definition (compiler/_stored.py) needs none.
PARSING = ("runner.compiler._compile", "runner.compiler._parse", "runner.compiler._yamlio",
           "runner.compiler._graph", "runner.compiler._references", "ruamel", "_ruamel_yaml")
#: The store and a run's bundle: not for --help or validate.
RUNTIME = ("runner.engine", "runner.store", "sqlite3", "runner.host")
#: Every command module but the one a test runs (each test drops its own).
COMMAND_MODULES = tuple(f"runner.cli.{m}" for m in (
    "bridge", "controllers", "definitions", "dev", "host", "housekeeping", "integrate",
    "launches", "logs", "mcp", "runs", "ui"))
#: `--help` and the Claude Code hook may import no other wfrun module than these.
HELP_MODULES = {"runner", "runner.__main__", "runner.cli", "runner.cli.app", "runner.clock",
                "runner.errors"}
HOOK_MODULES = {"runner", "runner.__main__", "runner.cli", "runner.clock", "runner.errors",
                "runner.host", "runner.host.mcp", "runner.host.mcp._hook",
                "runner.host.mcp._channel", "runner.host.mcp._sessionlog",
                "runner._jsonin"}  # Claude's event on stdin, read bounded (stdlib only)


#: `python -m runner ARGS`, writing sys.modules at exit (also after sys.exit) to a file.
WRAPPER = ("import atexit, json, os, runpy, sys\n"
           "def dump():\n"
           "    with open(os.environ['COLD_START_MODULES'], 'w') as fh:\n"
           "        json.dump(sorted(sys.modules), fh)\n"
           "atexit.register(dump)\n"
           "runpy.run_module('runner', run_name='__main__', alter_sys=True)\n")


def imported(root: Path, *args: str, stdin: str | None = None) -> tuple[
        subprocess.CompletedProcess[str], set[str]]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PYTHON", "WFRUN_", "CLAUDE"))}
    dump = root / "modules.json"
    dump.unlink(missing_ok=True)
    out = subprocess.run([sys.executable, "-c", WRAPPER, *args], cwd=root, text=True,
                         capture_output=True, timeout=100, input=stdin,
                         stdin=None if stdin is not None else subprocess.DEVNULL,
                         env={**base, "WFRUN_HOME": str(root / "home"),
                              "COLD_START_MODULES": str(dump)})
    modules = set(json.loads(dump.read_text()))
    assert "runner.cli" in modules, out.stderr[-2000:]
    return out, modules


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def others(*own: str) -> tuple[str, ...]:
    return tuple(m for m in COMMAND_MODULES if m not in own)


def wfrun(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "WFRUN_"))}
    out = subprocess.run([sys.executable, "-m", "runner", *args], cwd=root, text=True,
                         capture_output=True, timeout=100,
                         env={**env, "WFRUN_HOME": str(root / "home")})
    assert out.returncode == 0, out.stderr[-2000:]
    return out


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / ".wfrun" / "workflows").mkdir(parents=True)
    (tmp_path / ".wfrun" / "workflows" / "greet.yaml").write_text(
        "input:\n  type: object\n  properties: {name: {type: string}}\nstart: hello\n"
        'nodes:\n  hello: {compute: "{{ \'hi \' ~ (input.name | default(\'x\')) }}"}\n')
    return tmp_path


@pytest.fixture(scope="module")
def used(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A project with one finished foreground run and one queued launch."""
    root = tmp_path_factory.mktemp("cold")
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "greet.yaml").write_text(
        'start: hello\nnodes:\n  hello: {compute: "{{ \'hi\' }}"}\n')
    done = json.loads(wfrun(root, "run", "greet", "--json").stdout)["run_id"]
    queued = json.loads(wfrun(root, "start", "greet", "--json").stdout)["run_id"]
    return root, done, queued


def test_help_imports_no_command_module_and_no_runtime(root: Path) -> None:
    out, modules = imported(root, "--help")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "  validate  " in out.stdout
    assert sorted(m for m in modules if m.startswith("runner") and m not in HELP_MODULES) == []
    assert loaded(modules, (*NEVER, *RUNTIME, *COMPILING, "rich")) == []


def test_subcommand_help_loads_its_module_only(root: Path) -> None:
    out, modules = imported(root, "start", "--help")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--wait" in out.stdout
    # click's exit for --help is not a store error: the store is not loaded to say so.
    assert loaded(modules, (*NEVER, *RUNTIME, *COMPILING, *EXECUTOR, "rich",
                            *others("runner.cli.launches", "runner.cli.runs"))) == []


def test_status_on_an_empty_store_reads_the_store_only(root: Path) -> None:
    out, modules = imported(root, "status")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "no queued, starting, running or parked launches" in out.stderr
    assert "runner.store.sqlite._store" in modules
    assert loaded(modules, (*NEVER, *EXECUTOR, *COMPILING, "rich",
                            *others("runner.cli.launches", "runner.cli.runs"))) == []
    # Nothing in flight: no bundle is read and no source re-hashed; a user folder is
    # given (WFRUN_HOME), so no platform folder is looked up; no store file is copied.
    assert loaded(modules, ("runner.engine._reader", "runner.host.runtime._views",
                            "runner.host.runtime._drift", "platformdirs", "shutil")) == []


def test_status_and_why_of_launches_load_no_executor(used: tuple[Path, str, str]) -> None:
    root, done, queued = used
    out, modules = imported(root, "status")  # lists the queued launch, re-hashes its source
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"{queued}  queued" in out.stdout
    assert loaded(modules, (*NEVER, *EXECUTOR, *COMPILING, "rich",
                            *others("runner.cli.launches", "runner.cli.runs"))) == []
    out, modules = imported(root, "status", done, "--json")  # the launch row and its bundle
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["status"] == "completed"
    assert loaded(modules, (*NEVER, *EXECUTOR, *COMPILING, "rich")) == []
    # `why` of a queued launch checks its definition again (has it changed?): the
    # definition `start` kept, its sources re-hashed (compiler/_stored.py), so no
    # compile, and still no run loop, coordinator or watcher.
    out, modules = imported(root, "why", queued)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "queued as a detached launch" in out.stdout
    assert "runner.compiler._stored" in modules
    assert loaded(modules, (*NEVER, *EXECUTOR, *PARSING, "rich")) == []


def test_runs_and_show_read_rows_and_bundles_only(used: tuple[Path, str, str]) -> None:
    root, done, _ = used
    out, modules = imported(root, "runs")
    assert out.returncode == 0, out.stderr[-2000:]
    assert done in out.stdout
    assert loaded(modules, (*NEVER, *EXECUTOR, *COMPILING,
                            *others("runner.cli.runs", "runner.cli.tables"))) == []
    out, modules = imported(root, "show", done)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "completed" in out.stdout
    assert loaded(modules, (*NEVER, *EXECUTOR, *COMPILING,
                            *others("runner.cli.runs", "runner.cli.tables"))) == []


def test_validate_imports_the_compiler_only(root: Path) -> None:
    out, modules = imported(root, "validate", "greet")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok greet sha256:")
    assert "runner.compiler._compile" in modules
    # networkx builds the graph for `wfrun graph` and the engine; checking never needs it.
    assert loaded(modules, (*NEVER, *RUNTIME, "rich", *others("runner.cli.definitions"))) == []


def test_claude_code_hook_skips_click_and_every_other_layer(root: Path) -> None:
    event = {"hook_event_name": "Stop", "session_id": "cold-start", "cwd": str(root),
             "stop_hook_active": False}
    out, modules = imported(root, "hook", "claude-code", stdin=json.dumps(event))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == ""  # nothing to deliver, no server for this "Claude process"
    assert sorted(m for m in modules if m.startswith("runner") and m not in HOOK_MODULES) == []
    assert loaded(modules, ("click", "rich", "mcp", "anyio", "watchdog", "networkx", "sqlite3",
                            *COMPILING)) == []
