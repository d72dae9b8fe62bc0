"""Issue 15: `wfrun runs` is a page of launch rows; only that page's bundles are read,
and a full page says when more runs match (no silent limit)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from everyday import Project


@pytest.fixture
def project(tmp_path: Path) -> Project:
    p = Project(tmp_path / "proj")
    p.workflow("quick", "start: a\nnodes:\n  a: {compute: '{{ 1 }}'}\n")
    p.workflow("ask", "start: q\nnodes:\n  q: {checkpoint: 'ok?'}\n  after: {compute: "
               "'{{ outputs.q.answer }}'}\nedges:\n  - {from: q, to: after}\n")
    return p


def test_a_full_page_says_more_match_and_off_page_bundles_are_not_read(
        project: Project) -> None:
    ids = [json.loads(project.wfrun("run", "quick", "--json", "-q").stdout)["run_id"]
           for _ in range(4)]
    # The oldest run's trace becomes a FIFO: opening it for reading blocks until a
    # writer comes, so a listing that read every bundle would hang (and time out).
    # A page of 2 reads 3 bundles (the third says that more match), never the fourth.
    trace = project.runs_dir / ids[0] / "trace.jsonl"
    trace.unlink()
    os.mkfifo(trace)
    shown = project.wfrun("runs", "--limit", "2", "--json", timeout=30)
    assert shown.returncode == 0, shown.stderr
    assert [r["run_id"] for r in json.loads(shown.stdout)["runs"]] == ids[::-1][:2]
    assert "the newest 2 runs shown, more match; --limit N shows more" in shown.stderr
    table = project.wfrun("runs", "--limit", "1", env={"COLUMNS": "200"}, timeout=30)
    assert ids[3] in table.stdout
    assert "more match" in table.stderr


def test_waiting_and_continued_are_read_from_the_bundles_of_done_rows(
        project: Project) -> None:
    asked = json.loads(project.wfrun("run", "ask", "--json", "-q").stdout)["run_id"]
    answered = json.loads(project.wfrun("run", "ask", "--json", "-q").stdout)["run_id"]
    project.wfrun("run", "quick", "-q")
    assert project.wfrun("answer", answered, '"yes"', "-q").returncode == 0
    assert [r["run_id"] for r in project.runs("--status", "waiting")] == [asked]
    continued = project.runs("--status", "continued")
    assert [r["run_id"] for r in continued] == [answered]
    assert continued[0]["continued_by"]
    complete = project.runs("--limit", "10")
    assert len(complete) == 4
    everything = project.wfrun("runs", "--json")
    assert "more match" not in everything.stderr
