"""What a command does NOT import (issues 15 and 34 item 11, cold start): a ratchet.

Every `wfrun` process pays for what it imports, and agents and hooks start hundreds.
Each test runs a real `wfrun` command in a fresh interpreter, as `python -m runner ...`
runs it, and reads the modules it imported from `sys.modules` when it exits (written by
the test's own `-c` wrapper, not by the product, so a module loaded through importlib
is seen too); it names, per command, the layers and libraries the command must not pay
for. If a package `__init__` loaded everything again, or a view imported the
coordinator at module level, these tests fail. Behavioural, not timed:
bench/bench_cli_start.py measures the time.
The store's lazy names and parts are checked here too: the package loads a
submodule when a name is first read, and a store builds a part when first used.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import runner
import runner.store

#: Never needed by --help, status, runs, show or validate.
NEVER = ("runner.controllers", "runner.ui", "starlette", "uvicorn", "mcp", "anyio",
         "runner.host._daemon", "runner.host.bridge", "runner.host.mcp", "runner.host.inprocess",
         "runner.host.session", "runner.host.runtime._foreground", "runner.host.runtime._devmode",
         "runner.host.runtime._watch", "watchdog", "networkx", "runner.launch",
         "psycopg", "psycopg_pool", "runner.store.postgres")
#: The engine's run loop, node kinds and executors: only running a workflow needs them.
EXECUTOR = ("runner.engine._engine", "runner.engine._runner", "runner.engine._nodes",
            "runner.engine._agent", "runner.engine.executors",
            "runner.engine._hooks", "runner.engine._secrets", "runner.engine._procs")
#: The compiler's checks and what they load (YAML, Jinja2, JSON Schema): only compiling
#: a definition needs them; finding the project needs just `runner.compiler._discovery`.
COMPILING = ("runner.compiler._compile", "runner.compiler._parse", "runner.compiler._templates",
             "runner.compiler._yamlio", "runner.compiler._yamlfast", "runner.compiler._graph",
             "runner.compiler._references",
             "runner.compiler._jsonschemas", "runner.compiler._model", "jinja2", "markupsafe",
             "ruamel", "_ruamel_yaml", "jsonschema", "referencing")
#: What compiling reads YAML with; a kept definition (compiler/_stored.py) needs none.
PARSING = ("runner.compiler._compile", "runner.compiler._parse", "runner.compiler._yamlio",
           "runner.compiler._yamlfast", "runner.compiler._yamlpos",
           "runner.compiler._docshape", "runner.compiler._graph",
           "runner.compiler._references", "ruamel", "_ruamel_yaml")
#: The store and a run's bundle: not for --help or validate.
RUNTIME = ("runner.engine", "runner.store", "sqlite3", "runner.host")
#: What a store view needs none of besides the above: tables, and the parts of the
#: store it does not read (the controller side's records, fan-out, triggers).
NOT_FOR_VIEWS = ("rich", "runner.store._controller_interface", "runner.store.domain._fanout",
                 "runner.store.domain._triggers")
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
GREET = ("input:\n  type: object\n  properties: {name: {type: string}}\nstart: hello\n"
         'nodes:\n  hello: {compute: "{{ \'hi \' ~ (input.name | default(\'x\')) }}"}\n')

#: `python -m runner ARGS`, writing sys.modules at exit (also after sys.exit) to a file.
WRAPPER = ("import atexit, json, os, runpy, sys\n"
           "def dump():\n"
           "    with open(os.environ['COLD_START_MODULES'], 'w') as fh:\n"
           "        json.dump(sorted(sys.modules), fh)\n"
           "atexit.register(dump)\n"
           "runpy.run_module('runner', run_name='__main__', alter_sys=True)\n")


def imported(root: Path, *args: str, stdin: str | None = None) -> tuple[
        subprocess.CompletedProcess[str], set[str]]:
    """One `wfrun ARGS` process in project `root`: its result and the modules it loaded."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PYTHON", "WFRUN_", "CLAUDE"))}
    dump = root / "modules.json"
    dump.unlink(missing_ok=True)
    out = subprocess.run([sys.executable, "-c", WRAPPER, *args], cwd=root, text=True,
                         capture_output=True, timeout=100, input=stdin,
                         stdin=None if stdin is not None else subprocess.DEVNULL,
                         env={**base, "WFRUN_HOME": str(root / "home"),
                              "COLD_START_MODULES": str(dump)})
    assert out.returncode == 0, out.stderr[-2000:]
    modules = set(json.loads(dump.read_text()))
    assert "runner.cli" in modules, out.stderr[-2000:]
    return out, modules


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def others(*own: str) -> tuple[str, ...]:
    return tuple(m for m in COMMAND_MODULES if m not in own)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A project with one workflow and no store yet."""
    (tmp_path / ".wfrun" / "workflows").mkdir(parents=True)
    (tmp_path / ".wfrun" / "workflows" / "greet.yaml").write_text(GREET)
    return tmp_path


@pytest.fixture(scope="module")
def used(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A project with one finished foreground run, one queued launch and its listed
    workflows' definitions kept (compiler/_stored.py)."""
    root = tmp_path_factory.mktemp("cold")
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "greet.yaml").write_text(GREET)
    done = json.loads(imported(root, "run", "greet", "-i", "name=cold", "--json")[0].stdout)
    queued = json.loads(imported(root, "start", "greet", "--json")[0].stdout)
    imported(root, "list", "--json")  # every workflow listed compiled once, and kept
    return root, done["run_id"], queued["run_id"]


def test_version_loads_no_store_no_metadata_and_no_dataclasses(root: Path) -> None:
    out, modules = imported(root, "--version")
    assert out.stdout.strip() == f"wfrun, version {runner.__version__}"
    assert loaded(modules, ("runner.store", "runner.host", "runner.compiler",
                            "importlib.metadata", "dataclasses", *NEVER)) == []


def test_help_imports_no_command_module_and_no_runtime(root: Path) -> None:
    out, modules = imported(root, "--help")
    assert "  validate  " in out.stdout
    assert sorted(m for m in modules if m.startswith("runner") and m not in HELP_MODULES) == []
    assert loaded(modules, (*NEVER, *RUNTIME, *COMPILING, "rich")) == []


def test_subcommand_help_loads_its_module_only(root: Path) -> None:
    out, modules = imported(root, "start", "--help")
    assert "--wait" in out.stdout
    # click's exit for --help is not a store error: the store is not loaded to say so.
    assert loaded(modules, (*NEVER, *RUNTIME, *COMPILING, *EXECUTOR, "rich",
                            *others("runner.cli.launches", "runner.cli.runs"))) == []


def test_status_on_an_empty_store_reads_the_store_only(root: Path) -> None:
    out, modules = imported(root, "status")
    assert "no queued, starting, running or parked launches" in out.stderr
    assert "runner.store.sqlite._store" in modules
    assert loaded(modules, (*NEVER, *EXECUTOR, *COMPILING, *NOT_FOR_VIEWS, "logging",
                            *others("runner.cli.launches", "runner.cli.runs"))) == []
    # Nothing in flight: no bundle is read and no source re-hashed; a user folder is
    # given (WFRUN_HOME), so no platform folder is looked up; no store file is copied.
    assert loaded(modules, ("runner.engine._reader", "runner.host.runtime._views",
                            "runner.host.runtime._drift", "platformdirs", "shutil")) == []


def test_status_and_why_of_launches_load_no_executor(used: tuple[Path, str, str]) -> None:
    root, done, queued = used
    out, modules = imported(root, "status")  # lists the queued launch, re-hashes its source
    assert f"{queued}  queued" in out.stdout
    assert "runner.store.sqlite._store" in modules
    assert loaded(modules, (*NEVER, *EXECUTOR, *COMPILING, *NOT_FOR_VIEWS, "logging",
                            *others("runner.cli.launches", "runner.cli.runs"))) == []
    out, modules = imported(root, "status", "--json")
    assert [launch["run_id"] for launch in json.loads(out.stdout)["launches"]] == [queued]
    assert loaded(modules, (*NEVER, *EXECUTOR, *COMPILING, *NOT_FOR_VIEWS, "logging")) == []
    out, modules = imported(root, "status", done, "--json")  # the launch row and its bundle
    assert json.loads(out.stdout)["status"] == "completed"
    assert loaded(modules, (*NEVER, *EXECUTOR, *COMPILING, "rich")) == []
    # `why` of a queued launch checks its definition again (has it changed?): the
    # definition `start` kept, its sources re-hashed (compiler/_stored.py), so no
    # compile, and still no run loop, coordinator or watcher.
    out, modules = imported(root, "why", queued)
    assert "queued as a detached launch" in out.stdout
    assert "runner.compiler._stored" in modules
    assert loaded(modules, (*NEVER, *EXECUTOR, *PARSING, "rich")) == []


@pytest.mark.parametrize("args", [("run", "greet", "-i", "name=again", "--json"),
                                  ("list", "--json")])
def test_run_and_list_read_kept_definitions_without_compiling_or_rich(
        used: tuple[Path, str, str], args: tuple[str, ...]) -> None:
    """A workflow compiled by an earlier process is read back, not compiled again; a
    run's progress off a terminal is plain lines (cli/progress.py)."""
    out, modules = imported(used[0], *args)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "runner.compiler._stored" in modules
    assert loaded(modules, (*PARSING, "rich", "psycopg", "runner.ui", "runner.controllers",
                            "starlette")) == []


#: What running a compute-only workflow with a plainly matching input (GREET) needs none
#: of (issue 34 item 11): the compiler's checks (the kind rows and routing read
#: compiler/_values.py), jsonschema (compiler/_plainmatch.py), the hook caller and the
#: process supervisor (a compute node), the controller side's records and the settling
#: of a controller child (store/domain/_settle.py: loaded only when the launch queue finds
#: the child's request), the zone database, html.
NOT_FOR_A_RUN = ("runner.compiler._checker", "runner.compiler._template_checks",
                 "runner.compiler._stepcalls", "runner.compiler._template_ast",
                 "jsonschema", "referencing", "jsonschema_specifications", "rpds",
                 "runner.engine._procs", "runner.engine._hooks", "runner.steps",
                 "runner.store._controller_interface", "runner.store.domain._workflow_requests",
                 "runner.store.domain._controller_queue", "runner.store.domain._settle",
                 "zoneinfo", "html")


@pytest.mark.parametrize("args", [("run", "greet", "-i", "name=plain", "--json"),
                                  ("start", "greet", "-i", "name=plain", "--json")])
def test_run_and_start_load_no_checker_no_jsonschema_and_no_controller_records(
        used: tuple[Path, str, str], args: tuple[str, ...]) -> None:
    out, modules = imported(used[0], *args)
    assert json.loads(out.stdout)["run_id"].startswith("greet-")
    assert loaded(modules, NOT_FOR_A_RUN) == []


def test_a_mismatched_input_is_still_worded_by_jsonschema(
        used: tuple[Path, str, str]) -> None:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PYTHON", "WFRUN_", "CLAUDE"))}
    out = subprocess.run([sys.executable, "-m", "runner", "run", "greet", "--input",
                          '{"name": 3}'], cwd=used[0], text=True, capture_output=True,
                         timeout=100, stdin=subprocess.DEVNULL,
                         env={**base, "WFRUN_HOME": str(used[0] / "home")})
    assert out.returncode != 0
    assert "$.name: expected string, got integer" in out.stderr


def test_runs_and_show_read_rows_and_bundles_only(used: tuple[Path, str, str]) -> None:
    root, done, _ = used
    out, modules = imported(root, "runs")  # a table: rich, but nothing compiled
    assert done in out.stdout
    assert "rich.table" in modules
    assert loaded(modules, (*NEVER, *EXECUTOR, *COMPILING, *NOT_FOR_VIEWS[1:],
                            *others("runner.cli.runs", "runner.cli.tables"))) == []
    out, modules = imported(root, "show", done)
    assert "completed" in out.stdout
    assert loaded(modules, (*NEVER, *EXECUTOR, *COMPILING,
                            *others("runner.cli.runs", "runner.cli.tables"))) == []


def test_validate_imports_the_compiler_only(root: Path) -> None:
    out, modules = imported(root, "validate", "greet")
    assert out.stdout.startswith("ok greet sha256:")
    assert "runner.compiler._compile" in modules
    # networkx builds the graph for `wfrun graph` and the engine; checking never needs it.
    assert loaded(modules, (*NEVER, *RUNTIME, "rich", *others("runner.cli.definitions"))) == []


def test_claude_code_hook_skips_click_and_every_other_layer(root: Path) -> None:
    event = {"hook_event_name": "Stop", "session_id": "cold-start", "cwd": str(root),
             "stop_hook_active": False}
    out, modules = imported(root, "hook", "claude-code", stdin=json.dumps(event))
    assert out.stdout == ""  # nothing to deliver, no server for this "Claude process"
    assert sorted(m for m in modules if m.startswith("runner") and m not in HOOK_MODULES) == []
    assert loaded(modules, ("click", "rich", "mcp", "anyio", "watchdog", "networkx", "sqlite3",
                            *COMPILING)) == []


def test_the_version_is_the_installed_one() -> None:
    """`--version` prints `runner.__version__` (no metadata read): the two agree."""
    assert runner.__version__ == importlib.metadata.version("wfrun")


# --- the store package and its parts ------------------------------------------------


def test_every_store_name_resolves_to_its_submodule_object() -> None:
    lazy: dict[str, str] = runner.store._LAZY
    assert sorted(lazy) == sorted(runner.store.__all__)
    for name in runner.store.__all__:
        defining = importlib.import_module(f"runner.store.{lazy[name]}")
        assert getattr(runner.store, name) is getattr(defining, name), name
    assert set(runner.store.__all__) <= set(dir(runner.store))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        runner.store.nope  # noqa: B018


def _fresh(code: str) -> object:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    return json.loads(out.stdout)


def test_importing_the_store_package_loads_no_submodule() -> None:
    code = ("import json, sys, runner.store\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('runner.store.'))))")
    assert _fresh(code) == []


def test_a_store_builds_each_part_when_first_read(tmp_path: Path) -> None:
    code = f"""
import json, sys
from runner.store import SqliteStore
parts = ("runner.store.domain._fanout", "runner.store.domain._triggers",
         "runner.store.sqlite._controllers", "runner.store._controller_interface")
with SqliteStore({str(tmp_path / "s.sqlite3")!r}) as store:
    before = [m for m in parts if m in sys.modules]
    store.launches.query()
    fanout, resources = store.fanout, store.resources
    after = [m for m in parts if m in sys.modules]
    same = store.fanout is fanout and store.resources is resources
print(json.dumps([before, after, same]))
"""
    before, after, same = _fresh(code)  # type: ignore[misc]
    assert before == []
    assert after == ["runner.store.domain._fanout", "runner.store.sqlite._controllers",
                     "runner.store._controller_interface"]
    assert same is True


def test_threads_reading_a_part_at_once_get_one_instance(tmp_path: Path) -> None:
    from runner.store import SqliteStore

    with SqliteStore(tmp_path / "s.sqlite3") as store:
        start = threading.Barrier(8)
        seen: list[object] = []

        def read() -> None:
            start.wait(timeout=30)
            seen.append(store.triggers)
            seen.append(store.workflow_requests)

        threads = [threading.Thread(target=read) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert len(seen) == 16
        assert {id(part) for part in seen} == {id(store.triggers), id(store.workflow_requests)}


MAP = ("start: each\nnodes:\n  each:\n    map:\n      over: \"{{ range(2) | list }}\"\n"
       "      do: {action: {shell: [sh, -c, 'echo item']}}\n")


def test_a_host_once_running_a_map_loads_no_trigger_schedule_and_no_worker_pipes(
        tmp_path: Path) -> None:
    """`host --once` fires no trigger and forks no worker process (`--processes 1`): a
    map's run and its items on the host's slots need neither the triggers' schedule nor
    multiprocessing's pipes."""
    (tmp_path / ".wfrun" / "workflows").mkdir(parents=True)
    (tmp_path / ".wfrun" / "workflows" / "fan.yaml").write_text(MAP)
    imported(tmp_path, "start", "fan")
    _, modules = imported(tmp_path, "host", "--once", "--no-controllers", "-q")
    assert "runner.launch._itemwork" in modules  # the items ran on the host's slots
    shown = json.loads(imported(tmp_path, "runs", "--json")[0].stdout)["runs"]
    assert [r["status"] for r in shown] == ["completed"]
    assert loaded(modules, ("runner.launch._triggers", "runner.host.runtime._triggers",
                            "multiprocessing")) == []
