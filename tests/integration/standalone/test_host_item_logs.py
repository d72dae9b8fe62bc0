"""A map's items run by a host's item workers keep their logs in the store; the
parent records them in its trace as `NODE[i]` logs when the node ends (ADR 0008
phase 2), all in one trace write (issue 37: a write per log made a 1,000-item map's
end ~1,000 appends). Real host, real store, real shell items."""

from __future__ import annotations

import json
from typing import Any

import pytest
from standalonekit import Project

from runner.engine._bundle import FolderBundle
from runner.host._daemon import StandaloneHost

pytestmark = pytest.mark.slow

MAP = """\
name: fan
start: each
nodes:
  each:
    map:
      over: "{{ range(input.n) | list }}"
      max_concurrency: 3
      do:
        action:
          shell: [sh, -c, 'printf "item %s" "$1"; printf "warn %s" "$1" >&2', sh, "{{ item }}"]
"""


def test_host_items_logs_reach_the_parents_trace_in_one_write(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    project.workflow("fan", MAP)
    [run_id] = project.queue("fan", [{"n": 7}])
    writes: list[list[str]] = []  # the event types of each trace append (a spy)
    append = FolderBundle.append

    def counted(self: FolderBundle, events: Any, *, sync: bool) -> None:
        batch = list(events)
        writes.append([e["type"] for e in batch])
        append(self, batch, sync=sync)

    monkeypatch.setattr(FolderBundle, "append", counted)
    store = project.store()
    try:
        report = StandaloneHost(project.workspace(), store, max_runs=4).run(once=True)
    finally:
        store.close()
    assert report.counts() == {"waiting for items": 1, "completed": 1}  # parked, resumed
    assert project.launch_status(run_id) == "done"
    with_logs = [w for w in writes if "node_log" in w]
    assert len(with_logs) == 1, writes  # before: seven appends of one log each
    assert with_logs[0].count("node_log") == 7
    trace = (project.root / ".wfrun" / "runs" / run_id / "trace.jsonl").read_text()
    logs = {e["node"]: e["payload"] for e in map(json.loads, trace.splitlines())
            if e["type"] == "node_log"}
    assert sorted(logs) == [f"each[{i}]" for i in range(7)]
    for i in range(7):  # each item's own streams, as the item recorded them
        assert logs[f"each[{i}]"]["stdout"] == f"item {i}"
        assert logs[f"each[{i}]"]["stderr"] == f"warn {i}"
        assert logs[f"each[{i}]"]["exit_code"] == 0
