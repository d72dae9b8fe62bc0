"""Issue 9's lifecycle defects, each reproduced with a real SIGKILL of `wfrun run` at a
named point, then an explicit `wfrun resume` (or `wfrun host --once`) in a new process.

Invariants checked after every recovery: the launch row ends in exactly one terminal
state that agrees with the bundle, the input is present when the node runs, and a
completed node's side effect is never repeated. Every test runs on both backends:
the project's SQLite file, and a fresh Postgres schema chosen the way a user chooses
it (`WFRUN_STORE`), its run bundles then rows in the database.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from runner.engine._reader import RunReader

WORKFLOW = """\
input:
  type: object
  required: [who]
  properties: {who: {type: string}, loud: {type: boolean, default: false}}
start: greet
nodes:
  greet:
    action:
      shell: ["sh", "-c", "echo \\"$0\\" >> effects.log; echo done", "{{ input.who }}"]
  close: {compute: "{{ {'greeted': input.who} }}"}
edges:
  - {from: greet, to: close}
"""
# Compute nodes only: on folders its run is written whole with its ending (ADR 0009,
# lever 3), with no `running` commit of its own.
PURE = """\
input:
  type: object
  required: [who]
  properties: {who: {type: string}}
start: one
nodes:
  one: {compute: "{{ input.who }}"}
  two: {compute: "{{ outputs.one }}"}
  close: {compute: "{{ {'greeted': outputs.two} }}"}
edges:
  - {from: one, to: two}
  - {from: two, to: close}
"""
NAP = """\
start: nap
nodes:
  nap:
    action: {shell: ["sh", "-c", "echo start >> naps.log; sleep 30"]}
    timeout: 2m
"""


class Proj:
    def __init__(self, root: Path, store_url: str | None) -> None:
        self.root = root
        self.store_url = store_url
        (root / ".wfrun" / "workflows").mkdir(parents=True)
        (root / ".wfrun" / "workflows" / "greet.yaml").write_text(WORKFLOW)
        (root / ".wfrun" / "workflows" / "nap.yaml").write_text(NAP)
        (root / ".wfrun" / "workflows" / "pure.yaml").write_text(PURE)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
        if self.store_url is not None:
            env["WFRUN_STORE"] = self.store_url
        env.update(extra)
        return env

    def wfrun(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "runner", "--project", str(self.root),
                               *args], capture_output=True, text=True, cwd=self.root,
                              env=self.env(**env), timeout=60, check=False)

    def sql(self, statement: str) -> list[dict[str, Any]]:
        """One statement on a connection of its own, committed."""
        if self.store_url is not None:
            with psycopg.connect(self.store_url, row_factory=dict_row) as pg:
                cur = pg.execute(statement)
                return cur.fetchall() if cur.description else []
        conn = sqlite3.connect(self.root / ".wfrun" / "state" / "store.sqlite3")
        conn.row_factory = sqlite3.Row
        try:
            with conn:
                return [dict(r) for r in conn.execute(statement)]
        finally:
            conn.close()

    def rows(self) -> list[dict[str, Any]]:
        return self.sql("SELECT run_id, status, error_code, epoch, crash_count "
                        "FROM workflow_run_queue")

    def expire_leases(self) -> None:
        self.sql("UPDATE workflow_run_queue SET claim_expires_at = 1")

    def reader(self) -> Any:
        """The runs as `wfrun show` reads them: folders, or rows on Postgres."""
        runs = self.root / ".wfrun" / "runs"
        if self.store_url is None:
            return contextlib.nullcontext(RunReader(runs))
        from runner.store.postgres import PostgresStore

        @contextlib.contextmanager
        def on_rows() -> Iterator[RunReader]:
            with PostgresStore(self.store_url or "", pool_size=1) as store:
                yield RunReader(runs, store.bundles)
        return on_rows()

    def bundle_status(self, run_id: str) -> str:
        with self.reader() as reader:
            return str(reader.manifest(run_id)["status"])

    def trace_types(self, run_id: str) -> list[str]:
        with self.reader() as reader:
            return [e["type"] for e in reader.trace(run_id)]

    def effects(self, name: str = "effects.log") -> list[str]:
        path = self.root / name
        return path.read_text().splitlines() if path.exists() else []

    def bundles(self) -> list[str]:
        with self.reader() as reader:
            return list(reader.list_ids())


@pytest.fixture
def proj(tmp_path: Path, store_url: str | None) -> Proj:
    return Proj(tmp_path / "p", store_url)


def _killed_run(proj: Proj, point: str) -> str:
    out = proj.wfrun("run", "greet", "-i", "who=ada", "-q", WFRUN_CRASH_AT=point)
    assert out.returncode == -signal.SIGKILL, out
    (row,) = proj.rows()
    return str(row["run_id"])


def _killed_run_again(proj: Proj, point: str) -> str:
    """Another run killed at `point`, beside the runs already there: its run id."""
    before = {r["run_id"] for r in proj.rows()}
    out = proj.wfrun("run", "greet", "-i", "who=ada", "-q", WFRUN_CRASH_AT=point)
    assert out.returncode == -signal.SIGKILL, out
    (run_id,) = {r["run_id"] for r in proj.rows()} - before
    return str(run_id)


@pytest.mark.parametrize("point", ["after_bundle_created", "after_manifest_written"])
def test_a_kill_while_the_bundle_is_made_reruns_from_the_stored_input(
        proj: Proj, point: str) -> None:
    """Defects 1 and 3: the recovered run used to execute with no input (required
    fields skipped), or fail with "no run ..." leaving a half-made bundle behind."""
    run_id = _killed_run(proj, point)
    assert proj.rows()[0]["status"] == "starting"
    again = proj.wfrun("resume", run_id, "--json")
    assert again.returncode == 0, again
    outcome = json.loads(again.stdout)
    assert outcome["status"] == "completed"
    assert outcome["final_output"] == {"greeted": "ada"}  # the input was there
    assert proj.effects() == ["ada"]
    (row,) = proj.rows()
    assert (row["status"], row["error_code"]) == ("done", None)
    assert proj.bundle_status(run_id) == "completed"
    assert proj.trace_types(run_id).count("run_started") == 1  # made afresh, once
    assert proj.bundles() == [run_id]


def test_a_kill_after_the_run_completed_but_before_the_store_recorded_it(proj: Proj) -> None:
    """Defect 2: the next runner marked the launch failed while the bundle said done.

    A bundle's seal makes the launch's ending (launch/_activator.py RunLink; in the seal's
    transaction on rows, right after it on a folder): there the window is gone, and
    the kill before the seal is the nearest one. A folder then has its ending in the
    trace and manifest while the store has none (defect 2's shape); rows have neither."""
    run_id = _killed_run(proj, "before_outcome_recorded")
    (row,) = proj.rows()
    assert (row["status"], proj.bundle_status(run_id)) == ("done", "completed")
    run_id = _killed_run_again(proj, "before_seal")
    (row,) = [r for r in proj.rows() if r["run_id"] == run_id]
    assert row["status"] == "running"
    assert proj.bundle_status(run_id) == ("running" if proj.store_url else "completed")
    again = proj.wfrun("resume", run_id, "--json")
    assert again.returncode == 0, again
    assert json.loads(again.stdout)["status"] == "completed"
    (row,) = [r for r in proj.rows() if r["run_id"] == run_id]
    assert (row["status"], row["error_code"]) == ("done", None)
    assert proj.bundle_status(run_id) == "completed"
    # Nothing ran again (two runs were killed: once each).
    assert proj.effects() == ["ada"] * 2


def test_a_killed_foreground_run_is_finished_by_the_host_after_its_lease(proj: Proj) -> None:
    """Defect 9: a killed `wfrun run` looked running for ever; `wfrun host` never took
    it. Its lease is made to expire by the store's clock, not by waiting for it."""
    run_id = _killed_run(proj, "between_nodes")
    assert proj.effects() == ["ada"]
    proj.expire_leases()  # the lease is gone
    host = proj.wfrun("host", "--once")
    assert host.returncode == 0, host
    (row,) = proj.rows()
    assert (row["status"], row["epoch"]) == ("done", 2)
    assert proj.bundle_status(run_id) == "completed"
    assert proj.effects() == ["ada"]  # the completed node was not repeated


def test_cancel_works_on_a_killed_foreground_run(proj: Proj) -> None:
    """Defect 9: `cancel` refused a killed foreground run (exit 3)."""
    run_id = _killed_run(proj, "between_nodes")
    why = proj.wfrun("why", run_id)
    assert why.returncode == 0, why
    assert f"is gone: `wfrun resume {run_id}` takes it over now" in why.stdout
    proj.expire_leases()
    out = proj.wfrun("cancel", run_id)
    assert out.returncode == 0, out
    (row,) = proj.rows()
    assert row["status"] == "cancelled"
    assert proj.bundle_status(run_id) == "cancelled"  # the bundle agrees
    assert proj.wfrun("host", "--once").returncode == 0
    assert proj.effects() == ["ada"]


def test_a_failed_run_ends_its_launch_failed(proj: Proj) -> None:
    """Defect 5: a run that failed after starting ended its launch row `done`."""
    (proj.root / ".wfrun" / "workflows" / "bad.yaml").write_text(
        'start: f\nnodes:\n  f: {action: {shell: ["false"]}}\n')
    out = proj.wfrun("run", "bad", "-q")
    assert out.returncode == 1
    (row,) = proj.rows()
    assert (row["status"], row["error_code"]) == ("failed", "run_failed")


def test_ctrl_c_parks_explicitly_and_no_host_resumes_it_unasked(proj: Proj) -> None:
    """Defect 10: a run parked by a person resumes only when asked."""
    proc = subprocess.Popen([sys.executable, "-m", "runner", "--project", str(proj.root),
                             "run", "nap", "-q"], cwd=proj.root, env=proj.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = 60.0
        import time

        end = time.monotonic() + deadline
        while not proj.effects("naps.log"):
            assert time.monotonic() < end, "the nap never started"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    (row,) = proj.rows()
    assert row["status"] == "parked"
    why = proj.wfrun("why", str(row["run_id"]))
    assert f"waits for `wfrun resume {row['run_id']}`" in why.stdout
    assert proj.wfrun("host", "--once").returncode == 0
    assert proj.rows()[0]["status"] == "parked"  # not resumed by the host
    assert proj.effects("naps.log") == ["start"]
    status = proj.wfrun("status", "--json", str(row["run_id"]))
    assert json.loads(status.stdout)["launch"]["status"] == "parked"


def test_a_node_killed_twice_is_not_run_a_third_time(proj: Proj) -> None:
    """Defect 11: the documented bound (an interrupted node runs at most twice) held
    only once; after two kills the node ran a third time."""
    (proj.root / ".wfrun" / "workflows" / "crashy.yaml").write_text(
        'start: n\nnodes:\n  n:\n    action: {shell: ["sh", "-c", '
        '"echo ran >> effects.log; kill -9 $PPID; sleep 5"]}\n')
    out = proj.wfrun("run", "crashy", "-q")
    assert out.returncode == -signal.SIGKILL, out
    (row,) = proj.rows()
    run_id = str(row["run_id"])
    again = proj.wfrun("resume", run_id, "-q")
    assert again.returncode == -signal.SIGKILL, again
    third = proj.wfrun("resume", run_id, "--json")
    assert third.returncode == 1, third
    assert json.loads(third.stdout)["error"]["code"] == "interrupted"
    assert proj.effects() == ["ran", "ran"]
    (row,) = proj.rows()
    assert (row["status"], row["error_code"]) == ("failed", "interrupted")
    assert proj.bundle_status(run_id) == "failed"


# -- a pure run, written whole with its ending (ADR 0009, lever 3) -------------------
def _pure_killed_at(proj: Proj, point: str) -> str:
    out = proj.wfrun("run", "pure", "-i", "who=ada", "-q", WFRUN_CRASH_AT=point)
    assert out.returncode == -signal.SIGKILL, out
    (row,) = proj.rows()
    return str(row["run_id"])


def _settled_once(proj: Proj, run_id: str, *, ended: bool = False) -> None:
    """After the lease, a host ends the run once, from its input or its bundle
    (`ended`: the kill came after the ending committed; nothing is left to do)."""
    if not ended:
        proj.expire_leases()
        host = proj.wfrun("host", "--once")
        assert host.returncode == 0, host
    (row,) = proj.rows()
    assert (row["status"], row["error_code"]) == ("done", None)
    assert proj.bundle_status(run_id) == "completed"
    types = proj.trace_types(run_id)
    assert types.count("run_started") == 1
    assert types.count("run_completed") == 1
    with proj.reader() as reader:
        assert reader.final_output(run_id) == {"greeted": "ada"}  # the input was there
    assert proj.bundles() == [run_id]
    (cleared,) = proj.sql("SELECT input_json FROM workflow_run_queue")
    assert cleared["input_json"] is None


@pytest.mark.parametrize("point", ["after_bundle_created", "after_manifest_written",
                                   "during_starting", "between_nodes", "before_seal",
                                   "before_outcome_recorded"])
def test_a_killed_pure_run_ends_once_with_its_input(proj: Proj, point: str) -> None:
    run_id = _pure_killed_at(proj, point)
    unstarted = point in ("after_bundle_created", "after_manifest_written")
    if unstarted:
        # Nothing of a pure run is written before its seal (ADR 0013), not even its
        # snapshot and first manifest: a folder is empty, a half-made bundle. Rows
        # write a bundle with its `run_started`: there is none.
        folder = proj.root / ".wfrun" / "runs" / run_id
        if proj.store_url is None:
            assert os.listdir(folder) == []
        else:
            assert not folder.exists()
        with proj.reader() as reader:
            assert not reader.started(run_id)
    (row,) = proj.rows()
    # Written whole (folders), nothing is committed before the ending: still `starting`.
    ended = point == "before_outcome_recorded"
    assert row["status"] == ("done" if ended else "starting" if proj.store_url is None
                             or unstarted or point == "during_starting" else "running")
    _settled_once(proj, run_id, ended=ended)


def test_a_pure_run_killed_between_its_files_and_its_commit_is_recorded_from_them(
        tmp_path: Path) -> None:
    """Folders only (rows write no run whole): the kill comes after the trace, state and
    final manifest are on disk and before the ending's transaction commits, which
    SQLite rolls back. The row is `starting`, the bundle has ended: recovery records
    that ending (the run does not run again)."""
    proj = Proj(tmp_path / "p", None)
    run_id = _pure_killed_at(proj, "after_whole_written")
    (row,) = proj.rows()
    assert row["status"] == "starting"
    assert proj.bundle_status(run_id) == "completed"
    _settled_once(proj, run_id)
    assert proj.trace_types(run_id).count("node_started") == 3  # it did not run again

