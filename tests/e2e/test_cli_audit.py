"""Issue 39: the CLI's actions are recorded in the audit trail the console writes
(who: the local user, from where: `cli`), done or refused, and `wfrun audit`
prints them. Real CLI subprocesses on a real SQLite project."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.clock import CLOCK_FILE_ENV, FileClock

SCHEDULED = """\
triggers:
  often: {every: 30s}
start: a
nodes:
  a: {action: {shell: [echo, hi]}}
"""
FAILS = """\
start: a
nodes:
  a: {action: {shell: [sh, -c, "exit 3"]}}
"""
APPROVE = """\
start: ask
nodes:
  ask: {checkpoint: {summary: "Ship it?"}}
  after: {compute: "{{ {'answer': outputs.ask.answer} }}"}
edges:
  - {from: ask, to: after}
"""


class Cli:
    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "proj"
        folder = self.root / ".wfrun" / "workflows"
        folder.mkdir(parents=True)
        for name, text in (("report", SCHEDULED), ("fails", FAILS), ("approve", APPROVE)):
            (folder / f"{name}.yaml").write_text(text)
        clock = FileClock.create(tmp_path / "clock",
                                 datetime(2027, 1, 10, 12, tzinfo=UTC).timestamp())
        self.env = {**os.environ, CLOCK_FILE_ENV: clock.path}

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "runner", "--project", str(self.root),
                               *args], capture_output=True, text=True, env=self.env,
                              timeout=60, check=False)

    def json(self, *args: str) -> Any:
        done = self(*args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def test_cli_actions_are_audited_and_printed(tmp_path: Path) -> None:
    wfrun = Cli(tmp_path)
    queued = wfrun.json("start", "report", "--json")["run_id"]
    assert wfrun("pause", queued).returncode == 0
    assert wfrun("unpause", queued).returncode == 0
    assert wfrun("cancel", queued).returncode == 0
    refused = wfrun("cancel", "no-such-run")
    assert refused.returncode != 0
    assert "Traceback" not in refused.stderr
    assert wfrun("triggers", "pause", "often").returncode == 0
    assert wfrun("triggers", "resume", "report/often").returncode == 0
    assert wfrun("triggers", "pause", "ofton").returncode != 0  # a typo: refused, recorded
    backfilled = wfrun.json("triggers", "backfill", "often", "--from", "2027-01-10T11:59",
                            "--to", "2027-01-10T11:59:59", "--json")["slots"]
    assert [s["outcome"] for s in backfilled] == ["launched", "launched"]
    assert wfrun("run", "fails").returncode != 0
    failed = wfrun.json("runs", "--json", "--workflow", "fails")["runs"][0]["run_id"]
    rerun = wfrun.json("rerun", failed, "--detach", "--json")["run_id"]
    assert wfrun("run", "approve").returncode == 4  # waiting at its checkpoint
    waiting = wfrun.json("runs", "--json", "--workflow", "approve")["runs"][0]["run_id"]
    answered = wfrun("answer", waiting, '"ship"', "--json")
    assert answered.returncode == 0, answered.stderr
    child = json.loads(answered.stdout)["run_id"]

    rows = wfrun.json("audit", "--json", "--limit", "100")["actions"][::-1]
    assert [(r["action"], r["outcome"], r["run_id"], r["detail"].get("trigger"))
            for r in rows] == [
        ("start", "ok", queued, None), ("pause", "ok", queued, None),
        ("unpause", "ok", queued, None), ("cancel", "ok", queued, None),
        ("cancel", "failed", "no-such-run", None),
        ("pause", "ok", None, "often"), ("unpause", "ok", None, "report/often"),
        ("pause", "failed", None, "ofton"), ("start", "ok", None, "often"),
        ("rerun", "ok", failed, None), ("answer", "ok", waiting, None)]
    me = f"user:{getpass.getuser()}"
    assert {(r["actor"], r["origin"]) for r in rows} == {(me, "cli")}
    assert rows[0]["workflow"] == "report"
    assert rows[0]["detail"] == {"input": False, "wait": False}
    assert rows[5]["workflow"] == "report"
    assert "no trigger 'ofton'" in rows[7]["detail"]["error"]
    assert rows[8]["detail"] == {"trigger": "often", "queued": 2, "backfill": {
        "from": "2027-01-10T11:59", "to": "2027-01-10T11:59:59"}}
    assert rows[9]["detail"]["new_run_id"] == rerun
    assert rows[10]["detail"] == {"new_run_id": child}
    assert "ship" not in json.dumps(rows)  # answers are never recorded

    text = wfrun("audit").stdout.splitlines()
    assert len(text) == len(rows)
    assert text[0].split()[2:] == ["answer", "ok", waiting, me, "from", "cli"]
    assert "pause    ok      trigger often  " in text[5]
