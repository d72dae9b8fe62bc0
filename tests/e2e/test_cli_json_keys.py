"""Issue 34 item 14: one spelling for every JSON key wfrun prints.

Every command with `--json` (or `--format json`) is run here on a real project and
each key of its output, at any depth, must be snake_case (docs/json.md), except in
the values that are the user's own data (a run's input and outputs, a resource's
spec, a published update's data), which are printed as the user wrote them. The list
of commands is read from the CLI itself, so a new `--json` command without a case
here fails the test.

The commands run in this process (click's CliRunner), not as ~45 `wfrun` processes:
what is checked is the spelling of the documents the commands build, not the process
boundary (tests/e2e/test_cli_*.py run each command as a process), and 45 interpreter
start-ups were most of this test's 54-65 s under load. `wfrun ui` is a real server.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import httpx
import pytest
from click.testing import CliRunner
from waiting import wait_for_line

from runner.cli.app import COMMANDS, cli

# About 45 commands and a `wfrun ui`: generous on a loaded machine.
pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "fixtures" / "controllers" / "project"
SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
#: Keys whose values are the user's data, printed as written (docs/json.md).
USER_DATA = frozenset({"input", "outputs", "final_output", "spec", "data", "controller_status",
                       "input_schema"})
CALC = """\
input: {type: object, properties: {userName: {type: string}}}
start: add
nodes:
  add: {compute: "{{ {'sumTotal': 40 + 2} }}"}
"""
ASK = """\
start: ask
nodes:
  ask: {checkpoint: {summary: "Go?"}}
  after: {compute: "{{ {'answer': outputs.ask} }}"}
edges:
  - {from: ask, to: after}
"""
SAY = """\
start: say
nodes:
  say: {action: {shell: [sh, -c, "echo hello; echo oops >&2"]}}
"""


def json_commands() -> set[str]:
    """Every command path with a --json option or a --format that offers json (the
    CLI's own list)."""
    for module in {m for m, _help in COMMANDS.values()}:
        __import__(f"runner.cli.{module}")
    found: set[str] = set()

    def walk(cmd: click.Command, path: tuple[str, ...]) -> None:
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, (*path, name))
            return
        for param in cmd.params:
            opts = getattr(param, "opts", [])
            formats = getattr(param.type, "choices", ()) if "--format" in opts else ()
            if "--json" in opts or "json" in formats:
                found.add(" ".join(path))

    walk(cli, ())
    return found


def keys(value: Any, where: str = "$") -> Iterator[tuple[str, str]]:
    """(path, key) for every mapping key outside the user's data."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield where, str(k)
            if k not in USER_DATA:
                yield from keys(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from keys(v, f"{where}[{i}]")


@contextmanager
def ui_server(root: Path) -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, "-m", "runner", "--project", str(root), "ui"],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        found = re.search(r"(http://\S+)", wait_for_line(proc.stdout, r"^wfrun ui: http://"))
        assert found is not None
        yield found[1].split("?", 1)[0].rstrip("/")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=10)


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        shutil.copytree(FIXTURE / "workflows", root / ".wfrun" / "workflows")
        shutil.copytree(FIXTURE / "controllers", root / ".wfrun" / "controllers")
        for name, text in {"calc": CALC, "ask": ASK, "say": SAY}.items():
            (root / ".wfrun" / "workflows" / f"{name}.yaml").write_text(text)

    def out(self, *args: str, codes: tuple[int, ...] = (0,)) -> list[Any]:
        """The JSON documents a command printed (JSON Lines or one document)."""
        done = CliRunner().invoke(cli, ["--project", str(self.root), *args], prog_name="wfrun")
        assert done.exit_code in codes, (args, done.stderr, done.exc_info)
        text = done.stdout.strip()
        try:
            return [json.loads(text)]
        except json.JSONDecodeError:
            return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_every_json_output_spells_its_keys_in_snake_case(tmp_path: Path) -> None:
    p = Project(tmp_path / "proj")
    outputs: dict[str, list[Any]] = {}

    def case(command: str, *args: str, codes: tuple[int, ...] = (0,)) -> list[Any]:
        docs = p.out(*args, codes=codes)
        outputs.setdefault(command, []).extend(docs)
        return docs

    (calc,) = case("run", "run", "calc", "-i", "userName=ada", "--json", "-q")
    run_id = calc["run_id"]
    (waiting,) = case("run", "run", "ask", "--json", "-q", codes=(4,))
    case("answer", "answer", waiting["run_id"], "yes", "--json", "-q")
    (said,) = case("run", "run", "say", "--json", "-q")
    (queued,) = case("start", "start", "calc", "--json")
    case("start", "start", "calc", "--wait", "--json", "-q")
    case("status", "status", "--json")
    case("status", "status", queued["run_id"], "--json")
    case("status", "status", run_id, "--json")
    case("why", "why", queued["run_id"], "--json")
    case("why", "why", waiting["run_id"], "--json")
    case("cancel", "cancel", queued["run_id"], "--json")
    case("resume", "resume", run_id, "--json", codes=(0, 1, 2))
    case("runs", "runs", "--json")
    case("show", "show", run_id, "--json")
    case("rerun", "rerun", run_id, "--from", "add", "--json", "-q")
    case("rerun", "rerun", run_id, "--from", "add", "--detach", "--json")
    (paused,) = case("start", "start", "calc", "--json")
    case("pause", "pause", paused["run_id"], "--json")
    case("unpause", "unpause", paused["run_id"], "--json")
    case("cache list", "cache", "list", "--json")
    case("cache clear", "cache", "clear", "--json")
    case("show", "show", run_id, "--json", "--follow")
    case("logs", "logs", said["run_id"], "--json")
    case("logs", "logs", said["run_id"], "say", "--json", "--follow")
    case("list", "list", "--json")
    case("validate", "validate", "--json")
    case("validate", "validate", "--format", "json", "calc")
    case("store check", "store", "check", "--json")
    (tmp_path / "fresh").mkdir()
    case("init", "init", str(tmp_path / "fresh"), "--json")
    case("prune", "prune", "--older-than", "1d", "--json")
    case("controllers", "controllers", "--json")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"passes": 1}))
    case("controller apply", "controller", "apply", "probe", "p1", str(spec), "--json")
    case("controller list", "controller", "list", "probe", "--json")
    case("controller get", "controller", "get", "probe", "p1", "--json")
    # The HTTP API of `wfrun ui` spells its keys the same way.
    with ui_server(p.root) as base:
        for path in ("/api/runs", f"/api/runs/{run_id}", f"/api/runs/{waiting['run_id']}",
                     f"/api/runs/{queued['run_id']}", "/api/queue", "/api/workflows",
                     "/api/workflows/calc", "/api/controllers", "/api/controllers/probe/p1"):
            got = httpx.get(base + path)
            assert got.status_code == 200, (path, got.text)
            outputs.setdefault(f"GET {path}", []).append(got.json())
        # An action (its reply and the audit row it leaves) spells them so too.
        token = (p.root / ".wfrun" / "state" / "ui-token").read_text().strip()
        started = httpx.post(base + "/api/workflows/calc/start", json={"input": {"userName": "b"}},
                             headers={"Authorization": f"Bearer {token}"})
        assert started.status_code == 202, started.text
        outputs.setdefault("POST /api/workflows/calc/start", []).append(started.json())
        outputs.setdefault("GET /api/audit", []).append(httpx.get(base + "/api/audit").json())
    case("audit", "audit", "--json")
    case("controller reconcile", "controller", "reconcile", "probe", "p1", "--json")
    case("controller events", "controller", "events", "probe", "p1", "--json")
    case("controller cancel", "controller", "cancel", "probe", "p1", "--json")
    case("controller delete", "controller", "delete", "probe", "p1", "--json")
    (p.root / ".wfrun" / "workflows" / "ticker.yaml").write_text(
        "triggers:\n  t: {every: 1h}\nstart: a\nnodes:\n  a: {action: {shell: [echo, hi]}}\n")
    case("triggers", "triggers", "--json")
    case("triggers backfill", "triggers", "backfill", "ticker/t", "--from", "2027-01-01T00:00Z",
         "--to", "2027-01-01T01:00Z", "--json")

    assert json_commands() <= set(outputs), "a --json command has no case here"
    bad = [(command, where, key) for command, docs in outputs.items() for doc in docs
           for where, key in keys(doc) if not SNAKE.match(key)]
    assert bad == []
    # The user's own keys are printed as written, not respelled.
    assert "sumTotal" in json.dumps(calc["final_output"])
