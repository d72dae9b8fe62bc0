"""What a command does NOT import (issue 34 item 11, cold start): a ratchet.

Every `wfrun` process pays for what it imports, and agents and hooks start hundreds.
Each test runs a real `wfrun` command in a fresh interpreter (`python -X importtime
-m runner ...`, in a project made by `wfrun init`) and asserts which heavy modules it
never loaded. Behavioural, not timed: bench/bench_cli_start.py measures the time.
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

#: Loaded by no command below: the Postgres driver, the web stack, the controller side.
NEVER = ("psycopg", "psycopg_pool", "starlette", "uvicorn", "runner.ui", "runner.controllers")
#: What a store view needs none of: tables, schema checks, the compiler's parsers, the
#: engine, the controller side's records and the parts of the store it does not read.
NOT_FOR_VIEWS = ("rich", "jsonschema", "referencing", "jinja2", "ruamel.yaml",
                 "runner.compiler._model", "runner.engine._runner", "runner.launch",
                 "runner.store._controller_interface", "runner.store.domain._fanout",
                 "runner.store.domain._triggers", "runner.store.postgres")


#: What compiling a workflow needs and a kept one (compiler/_stored.py) does not.
COMPILING = ("ruamel.yaml", "runner.compiler._compile", "runner.compiler._yamlio",
             "runner.compiler._parse", "runner.compiler._docshape", "runner.compiler._graph")


def _loaded(project: Path, *args: str) -> set[str]:
    """The modules one `wfrun ARGS` process imported (it must succeed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
    env["WFRUN_HOME"] = str(project.parent / "home")
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "runner", *args],
                         cwd=project, env=env, capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def _none_of(loaded: set[str], heavy: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in heavy))


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cold") / "proj"
    root.mkdir()
    _loaded(root, "init", ".")
    _loaded(root, "run", "hello", "-i", "name=cold", "--json")  # one finished run
    _loaded(root, "list", "--json")  # every workflow compiled once, and kept
    return root


def test_version_loads_no_store_no_metadata_and_no_dataclasses(project: Path) -> None:
    loaded = _loaded(project, "--version")
    assert _none_of(loaded, ("runner.store", "runner.host", "runner.compiler",
                             "importlib.metadata", "dataclasses", *NEVER)) == []


def test_help_lists_commands_without_loading_them(project: Path) -> None:
    loaded = _loaded(project, "--help")
    assert _none_of(loaded, ("runner.store", "runner.host", "runner.cli.runs",
                             "runner.cli.launches", *NEVER)) == []


@pytest.mark.parametrize("args", [("status",), ("status", "--json")])
def test_status_reads_the_queue_without_tables_schemas_or_the_controller_side(
        project: Path, args: tuple[str, ...]) -> None:
    loaded = _loaded(project, *args)
    assert "runner.store.sqlite._store" in loaded  # it does read the store
    assert _none_of(loaded, (*NOT_FOR_VIEWS, *NEVER, "logging")) == []


def test_runs_prints_a_table_without_compiling_or_the_controller_side(project: Path) -> None:
    loaded = _loaded(project, "runs")
    assert "rich.table" in loaded
    assert _none_of(loaded, tuple(h for h in NOT_FOR_VIEWS if h != "rich") + NEVER) == []


@pytest.mark.parametrize("args", [("run", "hello", "-i", "name=again", "--json"),
                                  ("list", "--json")])
def test_run_and_list_read_kept_definitions_without_compiling_or_rich(
        project: Path, args: tuple[str, ...]) -> None:
    """A workflow compiled by an earlier process is read back, not compiled again; a
    run's progress off a terminal is plain lines (cli/progress.py)."""
    loaded = _loaded(project, *args)
    assert "runner.compiler._stored" in loaded
    assert _none_of(loaded, (*COMPILING, "rich", *NEVER)) == []


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
