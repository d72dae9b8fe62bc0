"""How a `wfrun` process starts and ends (runner/cli/__init__.py): the cyclic collector is
off while the command's modules load, and what they made is frozen out of every later
collection once the command is loaded, with the collector back on for the command's own
work; what is alive at exit is frozen out of the interpreter's last collections, after
every exit handler ran and the command closed what it holds, so a host that ran a map
ends with its work recorded and its store folded and closed, without walking its heap
object by object."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from everyday import Project

MAP = """\
    start: each
    nodes:
      each:
        map:
          over: "{{ range(4) | list }}"
          max_concurrency: 2
          do: {action: {shell: [sh, -c, "echo item"]}}
"""
# Registered before the CLI's own handlers, so it runs last (atexit is last-in first-out):
# it sees the process as the interpreter's finalization will.
AT_EXIT = """\
import atexit, gc, os, sys
def last():
    state = os.path.join(sys.argv[2], ".wfrun", "state")
    print(json.dumps({"frozen": gc.get_freeze_count(),
                      "wal_left": os.path.exists(os.path.join(state, "store.sqlite3-wal"))}),
          file=sys.stderr)
import json
atexit.register(last)
from runner.cli import main
main()
"""


def _wrapped(project: Project, wrapper: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`wfrun ARGS` in `project` through `wrapper` (python -c: a CLI with a marker around it)."""
    return subprocess.run([sys.executable, "-c", wrapper, "--project", str(project.root), *args],
                          capture_output=True, text=True, timeout=120, cwd=project.root,
                          env={**os.environ})


def test_a_host_ends_with_its_map_recorded_and_its_heap_frozen(tmp_path: Path) -> None:
    project = Project(tmp_path / "p")
    project.workflow("fan", MAP)
    started = project.json("start", "fan", "--json")
    done = _wrapped(project, AT_EXIT, "host", "--once", "--no-controllers", "-q")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stderr.strip().splitlines()[-1])
    # Frozen: the interpreter's finalization does not collect (or free) them one by one.
    assert seen["frozen"] > 10_000
    assert seen["wal_left"] is False  # the store was closed (and folded) by the command
    shown = project.json("show", started["run_id"], "--json")
    assert shown["status"] == "completed"
    assert [o["stdout"] for o in shown["final_output"]] == ["item\n"] * 4


GC_SEEN = """\
    start: look
    nodes:
      look: {compute: {call: "./seen.py:look"}}
"""
SEEN_PY = """\
import gc


def look(ctx):
    return {"collecting": gc.isenabled(), "frozen": gc.get_freeze_count()}
"""


def test_a_command_runs_with_the_collector_on_and_its_imports_frozen(tmp_path: Path) -> None:
    project = Project(tmp_path / "p")
    project.workflow("seen", GC_SEEN)
    project.file(".wfrun/workflows/seen.py", SEEN_PY)
    out = project.json("run", "seen", "--json")
    assert out["status"] == "completed", out
    # On: a long-lived host collects the cycles its runs leave. Frozen: the modules'
    # objects, never garbage, are not walked by those collections.
    assert out["final_output"]["collecting"] is True
    assert out["final_output"]["frozen"] > 10_000


# A value only the interpreter's teardown frees (it empties sys.modules; the module is
# referenced nowhere else), which says so, and a report from the exit handlers.
TORN_DOWN = """\
import atexit, os, sys, types
class Late:
    def __del__(self, write=os.write):  # bound now: the teardown clears `os` too
        write(2, b"torn down\\n")
marker = types.ModuleType("late_marker")
marker.late = Late()
sys.modules["late_marker"] = marker
del marker
atexit.register(lambda: sys.stderr.write("handlers ran\\n"))
from runner.cli import main
main()
"""


def test_a_command_ends_after_its_exit_handlers_without_the_interpreters_teardown(
        tmp_path: Path) -> None:
    project = Project(tmp_path / "p")
    project.workflow("fan", MAP)
    started = project.json("start", "fan", "--json")
    host = _wrapped(project, TORN_DOWN, "host", "--once", "--no-controllers", "-q")
    assert host.returncode == 0, host.stderr
    assert host.stderr.splitlines()[-1] == "handlers ran"
    assert "torn down" not in host.stderr  # os._exit: no teardown
    state = project.root / ".wfrun" / "state"
    assert not (state / "store.sqlite3-wal").exists()  # folded and closed all the same
    assert not (state / "store.sqlite3-shm").exists()
    # Piped output is whole (flushed before the exit), and the exit code is the command's.
    shown = _wrapped(project, TORN_DOWN, "show", started["run_id"], "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "completed"
    missing = _wrapped(project, TORN_DOWN, "show", "no-such-run")
    plain = subprocess.run(
        [sys.executable, "-m", "runner", "--project", str(project.root), "show",
         "no-such-run"], capture_output=True, text=True, timeout=120,
        cwd=project.root, env={**os.environ})
    assert missing.returncode == plain.returncode != 0
    assert plain.stderr.startswith("wfrun: error:")
    assert missing.stderr.startswith(plain.stderr)
