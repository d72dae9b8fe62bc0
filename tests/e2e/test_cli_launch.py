"""`wfrun start [--wait]`, `status`, `cancel`, `why`, `store check|reset` in subprocesses."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(60)
QUEUED = re.compile(r"^Workflow greet queued \(run (greet-\d{8}T\d{6}Z-[0-9a-f]{8})\)\.$")
RESET = "Keep the run bundles you need (.wfrun/runs/), then run `wfrun store reset --yes`."


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / ".wfrun" / "workflows").mkdir(parents=True)
        self.workflow("greet", """
            input:
              type: object
              required: [name]
              properties: {name: {type: string}}
            start: hello
            nodes:
              hello: {compute: "{{ {'greeting': 'hi ' ~ input.name} }}"}
        """)

    def workflow(self, name: str, text: str) -> None:
        (self.root / ".wfrun" / "workflows" / f"{name}.yaml").write_text(textwrap.dedent(text))

    def wfrun(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "runner", "--project", str(self.root),
                               *args], capture_output=True, text=True, timeout=30,
                              cwd=self.root, env={**os.environ, "COLUMNS": "100"})

    def json(self, *args: str) -> Any:
        done = self.wfrun(*args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    @property
    def store(self) -> Path:
        return self.root / ".wfrun" / "state" / "store.sqlite3"

    @property
    def runs(self) -> Path:
        return self.root / ".wfrun" / "runs"


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path / "proj")


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr + done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("wfrun: error: "), done.stderr
    return lines[0]


def test_start_queues_then_status_why_and_cancel_work_before_a_bundle(
        project: Project) -> None:
    done = project.wfrun("start", "greet", "-i", "name=ada")
    assert done.returncode == 0, done.stderr
    m = QUEUED.match(done.stdout.strip())
    assert m is not None, done.stdout
    run_id = m.group(1)
    assert not (project.runs / run_id).exists()  # queued: no engine ran
    as_json = project.json("start", "greet", "-i", "name=bob", "--json")
    assert set(as_json) == {"action", "workflow", "run_id", "queued"}
    assert (as_json["action"], as_json["workflow"], as_json["queued"]) == ("start", "greet", True)

    status = project.wfrun("status", run_id)
    assert status.returncode == 0
    assert status.stdout.strip() == f"{run_id}  queued"
    view = project.json("status", "--json", run_id)
    assert (view["status"], view["run"], view["error"]) == ("queued", None, None)
    assert view["launch"]["status"] == "queued"
    assert view["launch"]["workflow"] == "greet"
    listing = project.json("status", "--json")["launches"]
    assert sorted(r["run_id"] for r in listing) == sorted([run_id, as_json["run_id"]])

    why = project.wfrun("why", run_id)
    assert why.returncode == 0
    assert why.stdout.startswith("queued as a detached launch: a `wfrun host` (or `wfrun start "
                                 "--wait`) activates it")
    project.workflow("greet", (project.root / ".wfrun/workflows/greet.yaml").read_text()
                     .replace("'hi '", "'hello '"))
    assert "activation will fail with source_changed" in project.wfrun("why", run_id).stdout

    cancel = project.wfrun("cancel", run_id)
    assert cancel.returncode == 0
    assert cancel.stdout.strip() == f"Workflow run {run_id} cancelled."
    assert project.json("status", "--json", run_id)["status"] == "cancelled"
    again = project.wfrun("cancel", run_id)
    assert again.returncode != 0
    assert "already ended (cancelled)" in _one_error_line(again)
    assert not (project.runs / run_id).exists()


def test_start_wait_runs_the_launch_here(project: Project) -> None:
    done = project.wfrun("start", "greet", "-i", "name=ada", "--wait")
    assert done.returncode == 0, done.stderr
    m = QUEUED.match(done.stdout.strip().splitlines()[0])
    assert m is not None, done.stdout
    run_id = m.group(1)
    assert f"wfrun: run {run_id} completed" in done.stderr
    view = project.json("status", "--json", run_id)
    assert (view["status"], view["launch"]["status"]) == ("completed", "done")
    assert view["run"]["run_id"] == run_id
    assert project.json("status", "--json")["launches"] == []  # nothing left reserved


@pytest.mark.parametrize(("args", "code", "needle"), [
    (("start", "nosuch"), 3, "[workflow_not_found]"),  # not found: like `wfrun run`
    (("start", "greet", "--input", '{"name": 3}'), 2, "[input_invalid]"),
    (("status", "greet-20260101T000000Z-00000000"), 3, "no launch or run"),
])
def test_start_and_status_errors_are_one_line(project: Project, args: tuple[str, ...],
                                              code: int, needle: str) -> None:
    done = project.wfrun(*args)
    assert done.returncode == code, done.stderr
    assert needle in _one_error_line(done)
    if args[0] == "start":
        assert project.json("store", "check", "--json")["launches"]["queued"] == 0


def test_store_check_and_reset(project: Project) -> None:
    missing = project.wfrun("store", "check")
    assert missing.returncode == 3
    assert "no store at" in _one_error_line(missing)
    assert project.wfrun("start", "greet", "-i", "name=a", "--wait").returncode == 0
    queued = QUEUED.match(project.wfrun("start", "greet", "-i", "name=b").stdout.strip())
    assert queued is not None
    check = project.wfrun("store", "check")
    assert check.returncode == 0
    assert check.stdout.strip() == f"ok wfrun.controller-store.v1 {project.store}"
    info = project.json("store", "check", "--json")
    assert info["ok"] is True
    assert info["launches"]["done"] == 1
    assert info["launches"]["queued"] == 1

    bundles = {p.relative_to(project.runs): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in project.runs.rglob("*") if p.is_file()}
    assert bundles
    refused = project.wfrun("store", "reset")
    assert refused.returncode == 2
    assert "wfrun store reset --yes" in _one_error_line(refused)
    assert project.json("store", "check", "--json")["launches"]["queued"] == 1  # untouched
    reset = project.wfrun("store", "reset", "--yes")
    assert reset.returncode == 0, reset.stderr
    assert "run bundles untouched" in reset.stdout
    after = {p.relative_to(project.runs): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in project.runs.rglob("*") if p.is_file()}
    assert after == bundles
    assert project.json("store", "check", "--json")["launches"] == {
        s: 0 for s in ("queued", "starting", "running", "parked", "done", "failed",
                       "cancelled")}


def test_an_old_layout_store_is_refused_with_the_reset_instruction(project: Project) -> None:
    project.store.parent.mkdir(parents=True, mode=0o700)
    conn = sqlite3.connect(project.store)
    conn.execute("CREATE TABLE workflow_run_queue (run_id TEXT PRIMARY KEY, status TEXT "
                 "CHECK (status IN ('queued', 'claimed', 'parked', 'done')))")
    conn.execute("INSERT INTO workflow_run_queue VALUES ('old-1', 'claimed')")
    conn.commit()
    conn.close()
    before = project.store.read_bytes()
    for args in (("store", "check"), ("status",), ("start", "greet", "-i", "name=a")):
        done = project.wfrun(*args)
        assert done.returncode == 1, (args, done.stderr)
        line = _one_error_line(done)
        assert "incompatible store layout" in line
        assert line.endswith(RESET)
    assert project.store.read_bytes() == before
    assert not project.runs.exists()
    reset = project.wfrun("store", "reset", "--yes")
    assert reset.returncode == 0
    assert project.wfrun("start", "greet", "-i", "name=a").returncode == 0


def test_status_lists_a_page_of_the_queue_and_counts_the_rest(project: Project) -> None:
    """`wfrun status` is a page (oldest first), not the whole queue: 100,000 queued
    launches took 12.5 s and 434 MB (issue 35)."""
    from runner.compiler import build_catalog
    from runner.host.runtime._launches import detached_coordinator
    from runner.host.runtime._local import Workspace, open_store

    ws = Workspace(build_catalog("workflows", project.root, None), project.root,
                   project.root / ".wfrun")
    store = open_store(ws)
    try:
        coordinator = detached_coordinator(ws, store)
        for i in range(5):
            coordinator.prepare("greet", {"name": f"n{i}"})
        # Oldest first (two launches of one millisecond: by run id).
        queued = [r.run_id for r in store.launches.query(statuses=["queued"])]
    finally:
        store.close()
    page = project.wfrun("status", "--limit", "2")
    assert page.returncode == 0, page.stderr
    assert page.stdout.splitlines() == [f"{run_id}  queued" for run_id in queued[:2]]
    assert page.stderr.strip() == ("3 more launch(es) not shown (of 5); `wfrun status "
                                   "--limit 0` lists them all")
    listing = project.json("status", "--json", "--limit", "3")
    assert [r["run_id"] for r in listing["launches"]] == queued[:3]
    assert listing["total"] == 5
    everything = project.wfrun("status", "--limit", "0")
    assert len(everything.stdout.splitlines()) == 5
    assert everything.stderr == ""
