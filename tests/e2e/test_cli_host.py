"""`wfrun host`, `wfrun show --follow --json` and `wfrun runs` end to end, in subprocesses."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from everyday import Project, temp_project
from waiting import DEADLINE, LineReader, wait_until

ROW_KEYS = {"run_id", "workflow", "status", "started_at", "finished_at", "duration_s",
            "current_node", "parent_run_id", "title", "continued_by", "created_at"}
VIEW_KEYS = {"schema", "run_id", "workflow", "title", "status", "paused", "parent_run_id",
             "continued_by", "rerun_of", "rerun", "rerun_by",
             "definition_digest", "started_at", "finished_at", "current_node", "steps",
             "waiting_on", "timeline", "outputs", "final_output", "error", "updates",
             "trace_events", "trace_torn", "failure", "input"}
BAR_KEYS = {"node", "key", "label", "completed", "total", "unit", "eta_s"}
SLOW = """\
    start: work
    nodes:
      work: {compute: {call: "./slow.py:work"}}
      done: {compute: "{{ {'work': outputs.work} }}"}
    edges: [{from: work, to: done}]
"""
# Step i of `work` waits for the file gate/<i>: the test releases each step only once
# `show --follow` has printed the view of the step before, so the views it asserts on
# exist however long the follower took to start.
SLOW_PY = """\
import os
import time

GATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gate")


def work(ctx):
    for i in range(1, 9):
        end = time.monotonic() + 60
        while not os.path.exists(os.path.join(GATE, str(i))):
            if time.monotonic() > end:
                raise TimeoutError(f"step {i} was never released")
            time.sleep(0.01)
        ctx.publish_update("progress", "files", {"completed": i, "total": 8, "label": "files"})
    return "all done"
"""
OK = """\
    start: one
    nodes:
      one: {compute: "{{ 1 }}"}
"""
FAILS = """\
    start: one
    nodes:
      one: {action: {shell: [sh, -c, "exit 3"]}}
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    with temp_project(tmp_path / "proj", {"slow": SLOW, "ok": OK, "fails": FAILS}) as proj:
        folder = proj.root / ".wfrun" / "workflows"
        (folder / "slow.py").write_text(SLOW_PY)
        (folder / "gate").mkdir()
        yield proj


def test_host_outside_a_project_is_a_one_line_usage_error(project: Project,
                                                          tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = project.wfrun("host", "--once", cwd=elsewhere, project=False)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "no .wfrun/ folder" in done.stderr

    bad = project.wfrun("host", "--once", env={"WFRUN_LEASE_SECONDS": "0"})
    assert bad.returncode == 2  # the lease is checked at the edge
    assert "--lease" not in project.wfrun("host", "--help").stdout  # a test knob, hidden


def test_show_follow_json_streams_views_until_the_run_ends(project: Project) -> None:
    host = project.host("-q")
    started = project.json("start", "slow", "--json")
    run_id = started["run_id"]
    manifest = project.root / ".wfrun" / "runs" / run_id / "manifest.json"
    wait_until(manifest.exists, what="the host to activate the launch")  # views need it

    follow = subprocess.Popen(project.argv("show", run_id, "--follow", "--json"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=project.root)
    assert follow.stdout is not None
    assert follow.stderr is not None
    views: list[dict[str, Any]] = []
    released = 0
    try:
        lines = LineReader(follow.stdout)
        while (line := lines.next_line()) is not None:
            view = json.loads(line)
            views.append(view)
            shown = max((b["completed"] for b in view["progress"]), default=0)
            if view["status"] == "running" and shown == released < 8:
                released += 1  # the follower showed step `shown`: let the next one happen
                (project.root / ".wfrun" / "workflows" / "gate" / str(released)).touch()
        code, err = follow.wait(timeout=DEADLINE), follow.stderr.read()
    finally:
        if follow.poll() is None:
            follow.kill()
        follow.wait(timeout=DEADLINE)
        follow.stdout.close()
        follow.stderr.close()
    assert code == 0, err

    assert released == 8
    assert len(views) >= 9  # one per step at least, and the end
    assert all(set(v) == VIEW_KEYS | {"progress"} for v in views)
    assert views[-1]["status"] == "completed"
    assert {v["status"] for v in views[:-1]} == {"running"}
    assert views[-1]["final_output"] == {"work": "all done"}
    events = [v["trace_events"] for v in views]
    assert events == sorted(set(events))
    bars = [b for v in views for b in v["progress"]]
    assert [b["completed"] for b in bars] == sorted(b["completed"] for b in bars)
    assert {b["completed"] for b in bars} == set(range(1, 9))  # every step was shown
    assert all(set(b) == BAR_KEYS for b in bars)
    assert bars[-1]["completed"] == 8
    assert bars[-1]["total"] == 8
    assert any(b["eta_s"] is not None and b["eta_s"] > 0 for b in bars)
    host.send_signal(signal.SIGTERM)
    assert host.wait(timeout=10) == 0


def test_runs_and_show_json_keys_and_the_status_filter(project: Project) -> None:
    assert project.wfrun("run", "ok", "-q").returncode == 0
    assert project.wfrun("run", "fails", "-q").returncode == 1

    listing = project.json("runs", "--json")
    assert set(listing) == {"runs"}
    assert len(listing["runs"]) == 2
    assert all(set(row) == ROW_KEYS for row in listing["runs"])
    failed = project.json("runs", "--status", "failed", "--json")["runs"]
    assert [r["workflow"] for r in failed] == ["fails"]

    view = project.json("show", failed[0]["run_id"], "--json")
    assert set(view) == VIEW_KEYS | {"launch"}  # show adds its launch row's status
    assert view["status"] == "failed"
    follow = project.wfrun("show", failed[0]["run_id"], "--follow", "--json")
    assert follow.returncode == 1  # follow exits like the run ended
    lines = follow.stdout.splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["status"] == "failed"


def test_host_once_finishes_a_map_whose_items_it_ran_itself(project: Project) -> None:
    """A host's run parks while hosts run its map items; `host --once` ran the items
    and then exited with the run parked for ever (the items' last settle found no
    parked parent to wake: it had not parked yet) and called it `parked`."""
    project.workflow("each", """\
        start: each
        nodes:
          each:
            map:
              over: "{{ [1, 2, 3] }}"
              do: {action: {shell: [echo, "{{ item }}"]}}
        """)
    run_id = project.json("start", "each", "--json")["run_id"]
    done = project.wfrun("host", "--once")
    assert done.returncode == 0, done.stderr
    assert f"run {run_id} waits for its items (hosts run them; it goes on when they end)" \
        in done.stderr
    assert f"run {run_id} completed" in done.stderr
    assert "parked" not in done.stderr
    shown = project.json("show", run_id, "--json")
    assert shown["status"] == "completed"
    assert [o["stdout"] for o in shown["outputs"]["each"]] == ["1\n", "2\n", "3\n"]
