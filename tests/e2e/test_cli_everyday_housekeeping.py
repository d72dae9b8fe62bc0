"""Issue 13 item 8 (runs, cleanup): `wfrun init`, `runs --limit/--workflow/--since`,
`wfrun prune` (dry run by default, never a run that has not ended or that a launch
still points at), and store rows and history pruned with the bundles."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from everyday import Project

from runner.clock import FileClock

DAY = 86_400.0


@pytest.fixture
def project(tmp_path: Path) -> Project:
    p = Project(tmp_path / "proj")
    p.workflow("quick", "start: a\nnodes:\n  a: {compute: '{{ 1 }}'}\n")
    p.workflow("other", "start: a\nnodes:\n  a: {action: {shell: ['false']}}\n")
    p.workflow("ask", "start: q\nnodes:\n  q: {checkpoint: 'ok?'}\n  after: {compute: "
               "'{{ outputs.q.answer }}'}\nedges:\n  - {from: q, to: after}\n")
    return p


def _clock(tmp_path: Path, at: float) -> tuple[FileClock, dict[str, str]]:
    clock = FileClock.create(tmp_path / "clock", at)
    return clock, {"WFRUN_CLOCK_FILE": str(clock.path)}


def test_init_makes_a_runnable_project_and_is_safe_to_repeat(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    root.mkdir()
    (root / ".gitignore").write_text("node_modules/")  # no trailing newline
    p = Project(root, create=False)
    done = p.wfrun("init", str(root), project=False)
    assert done.returncode == 0, done.stderr
    assert "created .wfrun/workflows/hello.yaml" in done.stdout
    ignore = (root / ".gitignore").read_text().splitlines()
    assert ignore[0] == "node_modules/"
    assert ".wfrun/runs/" in ignore
    assert ".wfrun/state/" in ignore
    ran = p.wfrun("run", "hello", "-i", "name=ada", "--json", "-q")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["final_output"]["message"] == "hello ada"
    # Issue 34.3: the example passes input to a command as an argument, never as code.
    hostile = p.wfrun("run", "hello", "-i", "name=you; touch pwned", "--json", "-q")
    assert hostile.returncode == 0, hostile.stderr
    hostile_id = json.loads(hostile.stdout)["run_id"]
    assert not (root / "pwned").exists()
    logs = p.wfrun("logs", hostile_id, "check", "--stdout")
    assert logs.stdout == "checking for you; touch pwned\n", logs.stdout
    again = p.json("init", str(root), "--json", project=False)
    assert again["created"] == []
    assert (root / ".gitignore").read_text().count(".wfrun/runs/") == 1
    missing = p.wfrun("init", str(tmp_path / "nope"), project=False)
    assert missing.returncode == 3
    assert "does not exist" in missing.stderr


def test_runs_filters_and_an_empty_filter_is_not_an_empty_project(
        project: Project, tmp_path: Path) -> None:
    clock, env = _clock(tmp_path, time.time() - 3 * DAY)
    project.wfrun("run", "quick", "-q", env=env)
    clock.set(time.time())
    for _ in range(3):
        project.wfrun("run", "quick", "-q", env=env)
        clock.advance(1)
    project.wfrun("run", "other", "-q", env=env)
    assert len(project.runs()) == 5
    assert [r["workflow"] for r in project.runs("--workflow", "other")] == ["other"]
    newest = project.runs("--limit", "2")
    assert [r["workflow"] for r in newest] == ["other", "quick"]
    assert len(project.runs("--since", "1d", env=env)) == 4
    assert len(project.runs("--since", "2000-01-01")) == 5
    none = project.wfrun("runs", "--workflow", "nosuch")
    assert none.returncode == 0
    assert "no runs match" in none.stderr
    assert "no runs yet" not in none.stderr
    bad = project.wfrun("runs", "--since", "yesterday")
    assert bad.returncode == 2
    assert "--since" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_prune_is_a_dry_run_until_yes_and_keeps_what_has_not_ended(
        project: Project, tmp_path: Path) -> None:
    clock, env = _clock(tmp_path, time.time() - 40 * DAY)
    old_done = json.loads(project.wfrun("run", "quick", "--json", "-q", env=env).stdout)
    old_failed = json.loads(project.wfrun("run", "other", "--json", "-q", env=env).stdout)
    old_waiting = json.loads(project.wfrun("run", "ask", "--json", "-q", env=env).stdout)
    queued = project.json("start", "quick", "--json", env=env)  # a launch row, no bundle
    clock.set(time.time())
    fresh = json.loads(project.wfrun("run", "quick", "--json", "-q", env=env).stdout)

    dry = project.json("prune", "--older-than", "30d", "--json", env=env)
    assert dry["dry_run"] is True
    assert sorted(dry["would_remove"]) == sorted([old_done["run_id"], old_failed["run_id"]])
    assert {k["run_id"] for k in dry["kept"]} == {old_waiting["run_id"]}
    assert len(project.runs()) == 5  # nothing deleted (the queued launch is listed too)

    only_failed = project.json("prune", "--older-than", "30d", "--status", "failed",
                               "--json", env=env)
    assert only_failed["would_remove"] == [old_failed["run_id"]]

    done = project.wfrun("prune", "--older-than", "30d", "--yes", env=env)
    assert done.returncode == 0, done.stderr
    assert f"removed {old_done['run_id']}" in done.stdout
    left = {r["run_id"] for r in project.runs()}
    assert left == {old_waiting["run_id"], fresh["run_id"], queued["run_id"]}
    # The pruned runs' store rows went with them; the queued launch and the others stay.
    db = sqlite3.connect(project.root / ".wfrun" / "state" / "store.sqlite3")
    rows = {r for (r,) in db.execute("SELECT run_id FROM workflow_run_queue")}
    events = {r for (r,) in db.execute("SELECT DISTINCT run_id FROM run_events")}
    db.close()
    assert old_done["run_id"] not in rows | events
    assert {queued["run_id"], fresh["run_id"], old_waiting["run_id"]} <= rows
    status = project.wfrun("status", queued["run_id"])
    assert "queued" in status.stdout


def test_prune_never_removes_a_run_whose_launch_is_not_terminal(
        project: Project, tmp_path: Path) -> None:
    clock, env = _clock(tmp_path, time.time() - 40 * DAY)
    ran = json.loads(project.wfrun("run", "quick", "--json", "-q", env=env).stdout)
    db = sqlite3.connect(project.root / ".wfrun" / "state" / "store.sqlite3")
    # A launch row that points at the run and is not terminal (as a crashed runner
    # can leave one): the bundle ended, but the row still owns the run.
    db.execute("UPDATE workflow_run_queue SET status = 'parked', park_mode = 'explicit', "
               "finished_at = NULL, ending = NULL, claim_token = NULL, "
               "claim_expires_at = NULL, runner_id = NULL WHERE run_id = ?", (ran["run_id"],))
    db.commit()
    db.close()
    clock.set(time.time())
    out = project.json("prune", "--older-than", "1d", "--yes", "--json", env=env)
    assert out["removed"] == []
    assert out["kept"] == [{"run_id": ran["run_id"], "why": "its launch is parked"}]
    assert [r["run_id"] for r in project.runs()] == [ran["run_id"]]


def test_prune_refuses_a_bad_age_or_status(project: Project) -> None:
    bad = project.wfrun("prune", "--older-than", "soon")
    assert bad.returncode == 2
    assert "--older-than takes an age like 2h or 7d" in bad.stderr
    status = project.wfrun("prune", "--older-than", "1d", "--status", "running")
    assert status.returncode == 2
    assert "Traceback" not in bad.stderr + status.stderr


def test_retention_settings_give_a_history_table_its_own_age(
        project: Project, tmp_path: Path) -> None:
    clock, env = _clock(tmp_path, time.time() - 10 * DAY)
    ran = json.loads(project.wfrun("run", "quick", "--json", "-q", env=env).stdout)
    clock.set(time.time())

    def events() -> int:
        db = sqlite3.connect(project.root / ".wfrun" / "state" / "store.sqlite3")
        try:
            (n,) = db.execute("SELECT count(*) FROM run_events WHERE run_id = ?",
                              (ran["run_id"],)).fetchone()
        finally:
            db.close()
        return int(n)

    assert events() > 0
    # Without settings the history follows --older-than: 10 days is not 30.
    project.json("prune", "--older-than", "30d", "--yes", "--json", env=env)
    assert events() > 0
    config = project.root / ".wfrun" / "config.yaml"
    config.write_text("retention:\n  run_events: 5d\n")
    dry = project.json("prune", "--older-than", "30d", "--json", env=env)
    cut = dry["history_cutoffs"]
    # ISO times in UTC compare as text: 5 days ago is after 30 days ago.
    assert cut["run_events"] > cut["effects"] == cut["controller_events"] == dry["cutoff"]
    done = project.json("prune", "--older-than", "30d", "--yes", "--json", env=env)
    assert done["removed"] == []  # the run is 10 days old: its bundle and row stay
    assert events() == 0  # ... but its events were older than the table's 5 days
    assert [r["run_id"] for r in project.runs()] == [ran["run_id"]]

    config.write_text("retention:\n  run_event: 5d\n")
    bad = project.wfrun("prune", "--older-than", "30d", env=env)
    assert bad.returncode == 2
    assert bad.stderr.startswith("wfrun: error: .wfrun/config.yaml retention: no table "
                                 "'run_event'; retention takes run_events,")
    config.write_text("retention:\n  effects: soon\n")
    bad = project.wfrun("prune", "--older-than", "30d", env=env)
    assert bad.returncode == 2
    assert "retention effects takes an age like 2h or 7d" in bad.stderr
    assert "Traceback" not in bad.stderr
