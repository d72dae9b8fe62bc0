"""Issue 13 item 3: an answered checkpoint is listed as continued, linked both ways, and
the answer is at `outputs.<checkpoint>.answer`."""

from __future__ import annotations

import json
from pathlib import Path

from everyday import Project

APPROVE = """\
    start: ask
    nodes:
      ask: {checkpoint: "Ship it?"}
      gate:
        compute: "{{ {'ok': outputs.ask.answer.ok, 'summary': outputs.ask.summary} }}"
    edges:
      - {from: ask, to: gate}
    """


def test_answered_run_is_continued_and_linked_both_ways(tmp_path: Path) -> None:
    project = Project(tmp_path / "proj")
    project.workflow("approve", APPROVE)
    waiting = json.loads(project.wfrun("run", "approve", "--json", "-q").stdout)
    assert waiting["status"] == "waiting"
    parent = waiting["run_id"]
    assert [r["run_id"] for r in project.runs("--status", "waiting")] == [parent]
    human = project.wfrun("show", parent)
    assert f"wfrun answer {parent}" in human.stdout

    answered = project.wfrun("answer", parent, '{"ok": true}', "--json", "-q")
    assert answered.returncode == 0, answered.stderr
    child = json.loads(answered.stdout)
    assert child["final_output"] == {"ok": True, "summary": "Ship it?"}

    assert project.runs("--status", "waiting") == []
    [row] = project.runs("--status", "continued")
    assert row["run_id"] == parent
    assert row["continued_by"] == child["run_id"]
    listing = project.wfrun("runs")
    line = next(ln for ln in listing.stdout.splitlines() if ln.startswith(parent))
    assert "continued" in line
    assert child["run_id"] in line  # the link, in full, even at COLUMNS=80 in a pipe

    parent_view = project.json("show", parent, "--json")
    child_view = project.json("show", child["run_id"], "--json")
    assert parent_view["continued_by"] == child["run_id"]
    assert child_view["parent_run_id"] == parent
    assert child_view["outputs"]["ask"] == {"summary": "Ship it?", "answer": {"ok": True}}
    assert f"continued by {child['run_id']}" in project.wfrun("show", parent).stdout
    assert f"continues {parent}" in project.wfrun("show", child["run_id"]).stdout
