"""What `wfrun controller VERB NAME ...` does NOT import (issue 34 item 11): a ratchet.

Each verb read or wrote a few rows but built a whole controller manager to check
that NAME is a controller: every controller compiled, NAME's reconcile hook imported
(the user's code, and with it the manager, the engine and the launch side). Now only
NAME's file is compiled, the verbs write through `runner.controllers._resources` or
the store, and the hook never runs. Each test runs real commands in fresh
interpreters (test_cold_imports.py's wrapper) and names what they must not load;
the errors a name check gives are checked beside. Behavioural, not timed:
bench/bench_cli_start.py `--only 'controller list NAME,...'` measures the time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_cold_imports import COMPILING, EXECUTOR, imported, loaded

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "controllers" / "project"
#: The manager and what only it (or a hook, or a child launch) needs.
MANAGER = ("runner.controllers._manager", "runner.controllers._workflows",
           "runner.controllers._context", "runner.controllers._effects",
           "runner.controllers._conditions", "runner.controllers._definitions",
           "runner.launch", "runner.host.runtime._coordinators", "runner.host.runtime._children",
           "runner.engine._processes", "runner.engine._rows", "httpx", "rich")
#: Compiling a controller file needs the YAML loader and the checker, not the workflow
#: compiler, Jinja2 or the graph.
WORKFLOW_COMPILER = tuple(m for m in COMPILING if m not in (
    "runner.compiler._yamlio", "runner.compiler._yamlfast", "runner.compiler._model",
    "runner.compiler._jsonschemas", "jsonschema", "referencing", "ruamel", "_ruamel_yaml"))


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with the fixture controllers (probe's hook imports runner.controllers),
    one that does not compile and one whose hook raises at import."""
    root = tmp_path_factory.mktemp("ctlcold")
    shutil.copytree(FIXTURE / "controllers", root / ".wfrun" / "controllers")
    controllers = root / ".wfrun" / "controllers"
    (controllers / "bad.yaml").write_text("reconcile: ./probe.py:reconcile\ntimout: 5s\n")
    (controllers / "broken.py").write_text("raise RuntimeError('boom at import')\n")
    (controllers / "broken.yaml").write_text("reconcile: ./broken.py:reconcile\n")
    (root / "spec.json").write_text(json.dumps({"passes": 2}))
    return root


def hooks(modules: set[str]) -> list[str]:
    """The hook modules `runner.engine._hooks` imported (named wfrun_hook_...)."""
    return sorted(m for m in modules if m.startswith("wfrun_hook_"))


def test_apply_then_reads_and_writes_load_no_manager_no_hook_no_other_controller(
        root: Path) -> None:
    out, modules = imported(root, "controller", "apply", "probe", "k1", "spec.json")
    assert out.stdout.strip() == "applied probe/k1 (generation 1)"
    assert "runner.controllers._resources" in modules
    # The spec is checked against probe's schema: a plain match needs no jsonschema
    # (compiler/_plainmatch.py); tests/e2e/test_cli_controllers.py checks a mismatch.
    assert loaded(modules, (*MANAGER, *EXECUTOR, *WORKFLOW_COMPILER)) == []
    assert hooks(modules) == []
    for args in (("list", "probe", "--json"), ("get", "probe", "k1", "--json"),
                 ("events", "probe", "k1", "--json"), ("reconcile", "probe", "k1"),
                 ("delete", "probe", "k1")):
        out, modules = imported(root, "controller", *args)
        assert out.stdout.strip(), args
        assert loaded(modules, (*MANAGER, *EXECUTOR, *WORKFLOW_COMPILER, "jsonschema")) == [], \
            args
        assert hooks(modules) == [], args
    listed = json.loads(imported(root, "controller", "list", "probe", "--json")[0].stdout)
    assert [(r["key"], r["generation"]) for r in listed["resources"]] == [("k1", 1)]
    events = json.loads(imported(root, "controller", "events", "probe", "k1", "--json")[0]
                        .stdout)["events"]
    assert [e["type"] for e in events] == ["resource_applied", "deletion_requested"]


def _wfrun(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "WFRUN_"))}
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=root, text=True,
                          capture_output=True, timeout=100,
                          env={**env, "WFRUN_HOME": str(root / "home")})


def test_the_name_check_gives_the_errors_it_gave(root: Path) -> None:
    typo = _wfrun(root, "controller", "list", "prboe")
    assert typo.returncode == 3
    assert typo.stderr == ("wfrun: error: no controller named 'prboe'; did you mean "
                           "'probe'? `wfrun controllers` lists them\n")
    invalid = _wfrun(root, "controller", "get", "bad", "k1")
    assert invalid.returncode == 1, invalid.stderr  # DefinitionInvalid, as before
    assert invalid.stderr.startswith("wfrun: error: controller 'bad' is invalid: ")
    assert "bad.yaml:2:1" in invalid.stderr


def test_a_hook_that_fails_to_import_does_not_stop_reading_its_rows(root: Path) -> None:
    """The hook is not run, so its rows stay readable and deletable (before, the hook's
    import error was the command's, exit 1; a manager, which runs it, still leaves it
    out: test_cli_controllers.py)."""
    done = _wfrun(root, "controller", "list", "broken", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"controller": "broken", "resources": []}
