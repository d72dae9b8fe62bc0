"""Issue 39 item 1 for fan-out: a rerun of a run whose map had some items finish and
one fail reuses the finished items' recorded outputs (they do not run again: each
item appends its name to a counter file) and runs only the others (pgflow#658)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from everyday import Project
from waiting import wait_until

MAP = """\
    input:
      type: object
      properties: {names: {type: array, items: {type: string}}}
    start: files
    nodes:
      files:
        map:
          over: "{{ input.names }}"
          as: name
          max_concurrency: 2
          do:
            action:
              shell: [sh, -c, "echo {{ name }} >> ran.txt;
                      if [ {{ name }} = c ] && [ ! -f fixed ]; then exit 3; fi; echo {{ name }}"]
      after:
        compute: "{{ outputs.files | map(attribute='stdout') | join('') }}"
    edges:
      - {from: files, to: after}
    """

PARALLEL = """\
    start: reviews
    nodes:
      reviews:
        parallel:
          fail_fast: false
          branches:
            style: {action: {shell: [sh, -c, "echo style >> ran.txt; echo s"]}}
            safety: {action: {shell: [sh, -c, "echo safety >> ran.txt; test -f fixed"]}}
    """


@pytest.fixture
def project(tmp_path: Path) -> Project:
    p = Project(tmp_path / "proj")
    p.workflow("files", MAP)
    p.workflow("reviews", PARALLEL)
    return p


def _ran(project: Project) -> list[str]:
    path = project.root / "ran.txt"
    return sorted(path.read_text().split()) if path.exists() else []


def _failed_map_run(project: Project, names: list[str]) -> str:
    done = project.wfrun("run", "files", "--input", json.dumps({"names": names}),
                         "--json", "-q")
    assert done.returncode == 1, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["error"]["node"] == "files", outcome["error"]
    return str(outcome["run_id"])


def test_a_rerun_of_a_failed_map_runs_only_the_items_that_did_not_end_ok(
        project: Project) -> None:
    old = _failed_map_run(project, ["a", "b", "c", "d"])
    assert _ran(project) == ["a", "b", "c", "d"]
    (project.root / "fixed").touch()
    done = project.wfrun("rerun", old, "--json")  # from the failed node: the map
    assert done.returncode == 0, done.stderr
    assert f"rerun of {old} from node files (reused: 3 ended items of files)" in done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "completed"
    assert outcome["final_output"] == "a\nb\nc\nd\n"  # outputs in item order, reused or not
    # a, b and d ended ok before: only c ran again.
    assert _ran(project) == ["a", "b", "c", "c", "d"]
    shown = project.json("show", outcome["run_id"], "--json")
    assert shown["rerun"]["from"] == "files"
    assert shown["rerun"]["reused_items"] == {"files": ["0", "1", "3"]}
    assert [(e["node"], e.get("items")) for e in shown["timeline"]] == [
        ("files", {"ok": 4}), ("after", None)]
    assert "reused 3 ended items of files" in project.wfrun("show", outcome["run_id"]).stdout
    # Each item's result says where it came from; a reused one was not started here.
    trace = project.root / ".wfrun" / "runs" / outcome["run_id"] / "trace.jsonl"
    end = next(e for e in map(json.loads, trace.read_text().splitlines())
               if e["type"] == "node_finished" and e["node"] == "files")
    assert [(i["outcome"], i.get("reused_from"), i["starts"])
            for i in end["payload"]["items"]] == [
        ("ok", old, 0), ("ok", old, 0), ("ok", None, 1), ("ok", old, 0)]
    # Naming the map with --from reuses the same way; the old run is unchanged by both.
    again = project.wfrun("rerun", old, "--from", "files", "--json", "-q")
    assert again.returncode == 0, again.stderr
    assert _ran(project) == ["a", "b", "c", "c", "c", "d"]


def test_a_new_input_or_a_changed_map_reuses_no_item(project: Project) -> None:
    old = _failed_map_run(project, ["a", "b", "c"])
    (project.root / "fixed").touch()
    # Another list: item 0 is another item now, so nothing is reused.
    done = project.wfrun("rerun", old, "--input", '{"names": ["b", "a", "c"]}', "--json",
                         "-q")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_output"] == "b\na\nc\n"
    assert _ran(project) == ["a", "a", "b", "b", "c", "c"]
    # The same input given again is the same input: reused.
    done = project.wfrun("rerun", old, "--input", '{"names": ["a", "b", "c"]}', "--json",
                         "-q")
    assert done.returncode == 0, done.stderr
    assert _ran(project) == ["a", "a", "b", "b", "c", "c", "c"]
    # A changed body, forced: its items' old outputs are not its outputs.
    project.workflow("files", MAP.replace("echo {{ name }}\"]", "echo new-{{ name }}\"]"))
    done = project.wfrun("rerun", old, "--force", "--json", "-q")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_output"] == "new-a\nnew-b\nnew-c\n"
    assert _ran(project) == ["a", "a", "a", "b", "b", "b", "c", "c", "c", "c"]


def test_a_rerun_of_a_parallel_node_runs_only_the_failed_branch(project: Project) -> None:
    done = project.wfrun("run", "reviews", "--json", "-q")
    assert done.returncode == 1, done.stderr
    old = json.loads(done.stdout)["run_id"]
    assert _ran(project) == ["safety", "style"]
    (project.root / "fixed").touch()
    done = project.wfrun("rerun", old, "--json", "-q")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_output"]["style"]["stdout"] == "s\n"
    assert _ran(project) == ["safety", "safety", "style"]


def test_a_rerun_on_a_host_whose_items_any_host_may_claim_reuses_them_too(
        project: Project) -> None:
    """Shell items of a host's run are claimed by host item workers (ADR 0008 phase 2):
    the reused ones are ended before the node is shared, so no worker runs them."""
    old = _failed_map_run(project, ["a", "b", "c", "d"])
    (project.root / "fixed").touch()
    queued = project.json("rerun", old, "--detach", "--json")
    host = subprocess.Popen(project.argv("host", "--no-controllers", "-q"), cwd=project.root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: project.json("status", queued["run_id"], "--json")["status"]
                   == "completed", what="the rerun to complete on the host")
    finally:
        host.send_signal(signal.SIGTERM)
        host.wait(timeout=60)
    assert _ran(project) == ["a", "b", "c", "c", "d"]


KILLED = """\
    input:
      type: object
      properties: {names: {type: array, items: {type: string}}}
    start: files
    nodes:
      files:
        map:
          over: "{{ input.names }}"
          as: name
          max_concurrency: 4
          do:
            action:
              shell: [sh, -c, "echo {{ name }} >> ran.txt;
                      if [ {{ name }} = c ] || [ {{ name }} = d ]; then touch {{ name }}.held;
                      while [ ! -e go ]; do sleep 0.1; done; fi; echo {{ name }}"]
    """


def _sql(project: Project, statement: str) -> list[Any]:
    path = project.root / ".wfrun" / "state" / "store.sqlite3"
    if not path.exists():
        return []
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        return db.execute(statement).fetchall()


def _item_states(project: Project) -> dict[str, dict[int, str]]:
    """Each run's item states by index, read from the project's store."""
    rows = _sql(project, "SELECT run_id, item_index, state FROM fanout_items")
    out: dict[str, dict[int, str]] = {}
    for run_id, index, state in rows:
        out.setdefault(str(run_id), {})[int(index)] = str(state)
    return out


HELD_PARALLEL = """\
    start: reviews
    nodes:
      reviews:
        parallel:
          branches:
            style: {action: {shell: [sh, -c, "echo style >> ran.txt; echo s"]}}
            safety:
              action:
                shell: [sh, -c, "echo safety >> ran.txt; touch safety.held;
                        while [ ! -e go ]; do sleep 0.1; done; echo f"]
    """


def _killed_then_cancelled(project: Project, args: list[str], held: list[str],
                           ok: int) -> str:
    """Run `wfrun run ARGS` in the foreground, SIGKILL it (its group: the runner and the
    held shell items) once `ok` items ended ok and the `held` ones are waiting at the
    gate, then cancel the run; its id."""
    proc = subprocess.Popen(project.argv("run", *args, "-q"), cwd=project.root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    want = sorted(["ok"] * ok + ["running"] * len(held))

    def killable() -> str | None:
        if not all((project.root / f"{name}.held").exists() for name in held):
            return None
        return next((run_id for run_id, states in _item_states(project).items()
                     if sorted(states.values()) == want), None)

    try:
        old = wait_until(killable, what=lambda: f"{ok} items ok and {held} held: "
                         f"{_item_states(project)}")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    assert sorted(_item_states(project)[old].values()) == want
    # Its lease made to expire by the store's clock (not waited for): cancel ends it.
    _sql(project, "UPDATE workflow_run_queue SET claim_expires_at = 1")
    cancelled = project.wfrun("cancel", old)
    assert cancelled.returncode == 0, cancelled.stderr
    assert project.json("status", old, "--json")["status"] == "cancelled"
    trace = project.runs_dir / old / "trace.jsonl"
    assert not [e for e in map(json.loads, trace.read_text().splitlines())
                if e["type"] in ("node_finished", "node_failed")], "the node ended"
    return old


def test_a_rerun_of_a_killed_then_cancelled_map_reuses_the_items_its_store_rows_ended_ok(
        project: Project) -> None:
    """Killed mid-map, the run has no end of the node in its trace to list its items;
    cancelled without a resume, it never gets one. The store's item rows still say
    which ended ok (and their outputs): the rerun reuses those and runs the rest."""
    project.workflow("held", KILLED)
    old = _killed_then_cancelled(
        project, ["held", "--input", json.dumps({"names": ["a", "b", "c", "d"]})],
        held=["c", "d"], ok=2)
    assert _ran(project) == ["a", "b", "c", "d"]
    (project.root / "go").touch()
    done = project.wfrun("rerun", old, "--json")  # from the node the cancel interrupted
    assert done.returncode == 0, done.stderr
    assert f"rerun of {old} from node files (reused: 2 ended items of files)" in done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "completed"
    assert [o["stdout"] for o in outcome["final_output"]] == ["a\n", "b\n", "c\n", "d\n"]
    # a and b ended ok in the killed run: only c and d ran again.
    assert _ran(project) == ["a", "b", "c", "c", "d", "d"]
    shown = project.json("show", outcome["run_id"], "--json")
    assert shown["rerun"]["reused_items"] == {"files": ["0", "1"]}


def test_a_rerun_of_a_killed_then_cancelled_parallel_reuses_its_ended_branch_by_name(
        project: Project) -> None:
    project.workflow("held", HELD_PARALLEL)
    old = _killed_then_cancelled(project, ["held"], held=["safety"], ok=1)
    (project.root / "go").touch()
    done = project.wfrun("rerun", old, "--json", "-q")
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert {k: v["stdout"] for k, v in outcome["final_output"].items()} == {
        "style": "s\n", "safety": "f\n"}
    assert _ran(project) == ["safety", "safety", "style"]
    shown = project.json("show", outcome["run_id"], "--json")
    assert shown["rerun"]["reused_items"] == {"reviews": ["style"]}
