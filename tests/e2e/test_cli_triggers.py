"""`wfrun triggers` (DESIGN §10): the list with last and next firing and the skipped
slots, `--json`, pause/resume, backfill once per slot, and one-line mistakes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from runner.clock import CLOCK_FILE_ENV, FileClock
from runner.store import SqliteStore

WORKFLOW = """\
triggers:
  nightly: {cron: "0 3 * * *", timezone: Europe/Berlin, missed: last,
            input: {day: "{{ trigger.slot[:10] }}"}}
  often: {every: 30s, overlap: queue}
input: {type: object}
start: a
nodes:
  a: {action: {shell: [echo, hi]}}
"""


CONTROLLER = """\
reconcile: ./ping.py:reconcile
triggers:
  poll: {every: 5m, key: "pr7"}
"""


def _project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "report.yaml").write_text(WORKFLOW)
    (root / ".wfrun" / "controllers").mkdir()
    (root / ".wfrun" / "controllers" / "ping.yaml").write_text(CONTROLLER)
    (root / ".wfrun" / "controllers" / "ping.py").write_text(
        "def reconcile(ctx, resource):\n    return ctx.settled({})\n")
    clock = FileClock.create(tmp_path / "clock", datetime(2027, 1, 10, 12, tzinfo=UTC)
                             .timestamp())
    return root, {**os.environ, CLOCK_FILE_ENV: clock.path}


def _wfrun(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", "--project", str(root), *args],
                          capture_output=True, text=True, env=env, timeout=60, check=False)


def test_list_pause_resume_and_backfill(tmp_path: Path) -> None:
    root, env = _project(tmp_path)
    listed = json.loads(_wfrun(root, env, "triggers", "--json").stdout)["triggers"]
    assert [(t["name"], t["next"], t["paused"]) for t in listed] == [
        ("report/nightly", "2027-01-11T02:00:00Z", False),  # 03:00 in Berlin (CET)
        ("report/often", "2027-01-10T12:00:30Z", False),
        ("controller:ping/poll", "2027-01-10T12:05:00Z", False)]
    assert (listed[2]["controller"], listed[2]["key"]) == ("ping", "pr7")
    assert listed[0]["missed"] == "last"
    assert listed[1]["overlap"] == "queue"

    assert _wfrun(root, env, "triggers", "pause", "often").stdout.strip() == \
        "trigger report/often paused"
    assert "paused already" not in _wfrun(root, env, "triggers", "pause",
                                          "report/often").stdout.replace("was paused", "")
    text = _wfrun(root, env, "triggers").stdout
    assert "report/often  every 30s  missed=last overlap=queue  paused" in text

    done = _wfrun(root, env, "triggers", "backfill", "nightly", "--from", "2027-01-01",
                  "--to", "2027-01-03T23:59", "--json")
    slots = json.loads(done.stdout)["slots"]
    assert [(s["slot"], s["outcome"]) for s in slots] == [
        ("2027-01-01T02:00:00Z", "launched"), ("2027-01-02T02:00:00Z", "launched"),
        ("2027-01-03T02:00:00Z", "launched")]
    again = json.loads(_wfrun(root, env, "triggers", "backfill", "nightly", "--from",
                              "2027-01-01", "--to", "2027-01-03T23:59", "--json").stdout)
    assert [s["run_id"] for s in again["slots"]] == [s["run_id"] for s in slots]
    assert all(s["outcome"].startswith("has run") for s in again["slots"])  # none twice
    with SqliteStore(root / ".wfrun" / "state" / "store.sqlite3") as store:
        record = store.launches.get(slots[0]["run_id"])
        assert record is not None
        assert record.input() == {"day": "2027-01-01"}
        assert record.status == "queued"
    listed = json.loads(_wfrun(root, env, "triggers", "--json").stdout)["triggers"]
    assert listed[0]["last"]["run_id"] == slots[-1]["run_id"]
    polled = json.loads(_wfrun(root, env, "triggers", "backfill", "ping/poll", "--from",
                               "2027-01-10T11:55Z", "--to", "2027-01-10T12:00Z",
                               "--json").stdout)["slots"]
    assert [s["outcome"] for s in polled] == ["launched: reconcile ping/pr7"] * 2
    assert listed[0]["counts"] == {"launched": 3}

    assert _wfrun(root, env, "triggers", "resume", "often").stdout.strip() == \
        "trigger report/often resumed"


def test_mistakes_are_one_line(tmp_path: Path) -> None:
    root, env = _project(tmp_path)
    for args, needle in [
        (("triggers", "pause", "nightyl"), "no trigger 'nightyl'; did you mean 'nightly'?"),
        (("triggers", "backfill", "often", "--from", "yesterday", "--to", "2027-01-02"),
         "--from 'yesterday' is not an ISO 8601 time"),
        (("triggers", "backfill", "nightly", "--from", "2027-01-05", "--to", "2027-01-01"),
         "--to is before --from"),
        (("triggers", "backfill", "often", "--from", "2026-01-01", "--to", "2027-01-01"),
         "more than 1000 slots between those times"),
    ]:
        proc = _wfrun(root, env, *args)
        assert proc.returncode != 0
        assert "Traceback" not in proc.stderr
        assert needle in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
