"""Issue 37: `wfrun logs --follow RUN NODE[3]` of a map's running item, through a real
`wfrun host` and the real CLI. The item prints a line, waits on a gate file, prints
another: the follower must print the first line while the item waits (it can only
come from the item's live log), the second once the gate opens, and exit when the
item ends, while its siblings and the run still run. No wall-clock waits: every step
waits on a line read or a file."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from everyday import Project
from waiting import LineReader, stop_process, wait_until

pytestmark = pytest.mark.timeout(120)

ITEMS = """\
    start: files
    nodes:
      files:
        map:
          over: "{{ [0, 1, 2] }}"
          max_concurrency: 3
          do:
            action:
              shell: [sh, -c, 'echo item-{{ item }}-a;
                      while [ ! -e gate/{{ item }} ]; do sleep 0.1; done;
                      echo item-{{ item }}-b; test {{ item }} != 2']
    """


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    p = Project(tmp_path / "proj")
    p.workflow("items", ITEMS)
    (p.root / "gate").mkdir()
    yield p
    for name in ("0", "1", "2"):
        (p.root / "gate" / name).touch()


def _follow(project: Project, run_id: str, node: str) -> subprocess.Popen[str]:
    return subprocess.Popen(project.argv("logs", run_id, node, "--follow"), cwd=project.root,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_follow_streams_one_running_item_and_stops_when_it_ends(project: Project) -> None:
    started = project.json("start", "items", "--json")
    run_id = started["run_id"]
    host = subprocess.Popen(project.argv("host", "--no-controllers", "-q"), cwd=project.root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    followers: list[subprocess.Popen[str]] = []
    trace = project.runs_dir / run_id / "trace.jsonl"
    try:
        wait_until(lambda: trace.exists() and '"node_started"' in trace.read_text(),
                   what="the map's start")
        follower = _follow(project, run_id, "files[1]")
        followers.append(follower)
        assert follower.stdout is not None
        assert follower.stderr is not None
        out, err = LineReader(follower.stdout), LineReader(follower.stderr)
        # Item 1 waits on gate/1: this line can only have come from its live log.
        assert out.wait_for(r"^item-1-a$")
        assert err.wait_for(r"^--- files\[1\] stdout \(attempt \w+, running\) ---$")
        # A plain `logs` of the running item shows what it printed so far.
        now = project.wfrun("logs", run_id, "files[1]")
        assert now.returncode == 0, now.stderr
        assert now.stdout == "item-1-a\n"
        assert "running; `wfrun logs" in now.stderr
        (project.root / "gate" / "1").touch()
        assert out.rest() == ["item-1-b"]  # then the follower ends: the item ended
        assert follower.wait(timeout=60) == 0
        assert out.lines == ["item-1-a", "item-1-b"]  # its siblings' lines are not its
        # The run goes on: items 0 and 2 still wait on their gates (the parent may be
        # parked while the host's item workers run them, ADR 0008 phase 2).
        assert project.json("status", run_id, "--json")["status"] in ("running", "parked")
        # A failing item is followed to its end too, with a failed run's exit code.
        failing = _follow(project, run_id, "files[2]")
        followers.append(failing)
        assert failing.stdout is not None
        fout = LineReader(failing.stdout)
        assert fout.wait_for(r"^item-2-a$")
        (project.root / "gate" / "2").touch()
        assert fout.rest() == ["item-2-b"]
        assert failing.wait(timeout=60) == 1
        (project.root / "gate" / "0").touch()
        wait_until(lambda: project.json("status", run_id, "--json")["status"] == "failed",
                   what="the run's end")
        shown = project.wfrun("logs", run_id, "files[1]", "--stdout")
        assert shown.stdout == "item-1-a\nitem-1-b\n"
        assert re.search(r"files\[1\] stdout \(attempt \w+, exit 0\)", shown.stderr)
        assert json.loads(project.wfrun("logs", run_id, "files[0]", "--json").stdout)[
            "logs"][0]["stdout"] == "item-0-a\nitem-0-b\n"
    finally:
        for proc in followers:
            stop_process(proc)
        if host.poll() is None:
            host.send_signal(signal.SIGTERM)
        host.wait(timeout=60)
