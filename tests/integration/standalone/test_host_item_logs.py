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
    # One write for the logs of the items ended when the parent came back, and one per
    # item it then waited for (at most the 3 a claim leaves running): never one each.
    with_logs = [w for w in writes if "node_log" in w]
    assert 1 <= len(with_logs) <= 1 + 3, writes  # before: seven appends of one log each
    assert sum(w.count("node_log") for w in with_logs) == 7
    trace = (project.root / ".wfrun" / "runs" / run_id / "trace.jsonl").read_text()
    logs = {e["node"]: e["payload"] for e in map(json.loads, trace.splitlines())
            if e["type"] == "node_log"}
    assert sorted(logs) == [f"each[{i}]" for i in range(7)]
    for i in range(7):  # each item's own streams, as the item recorded them
        assert logs[f"each[{i}]"]["stdout"] == f"item {i}"
        assert logs[f"each[{i}]"]["stderr"] == f"warn {i}"
        assert logs[f"each[{i}]"]["exit_code"] == 0


GATED = """\
name: gated
start: each
nodes:
  each:
    map:
      over: "{{ range(4) | list }}"
      max_concurrency: 2
      do:
        action:
          shell: [sh, -c, 'if [ "$1" = 3 ]; then : > started; while [ ! -e go ]; do sleep 0.05;
                  done; fi; printf "item %s" "$1"', sh, "{{ item }}"]
"""


def test_the_parent_comes_back_while_its_last_item_runs_and_waits_for_it(
        project: Project) -> None:
    """The claim that takes a shared map's last pending item re-queues its parked parent
    (ADR 0014's companion: the parent's resume, its rows and the logs of the items that
    ended overlap the last items instead of following them). Here the last item waits
    for a file: the parent is claimed and running, not parked, while it does, and the
    run then ends with that one resume."""
    import threading

    from waiting import wait_until

    project.workflow("gated", GATED)
    [run_id] = project.queue("gated", [{}])
    store = project.store()
    host = StandaloneHost(project.workspace(), store, max_runs=3)
    reports: list[Any] = []
    thread = threading.Thread(target=lambda: reports.append(host.run(once=True)))
    thread.start()
    try:
        wait_until(lambda: (project.root / "started").exists(), what="item 3 to start")
        wait_until(lambda: project.launch(run_id).status == "running",
                   what=lambda: f"the parent back while item 3 runs: {project.launch(run_id)}")
        assert not (project.root / "go").exists()  # item 3 still runs
    finally:
        (project.root / "go").touch()
        thread.join(timeout=60)
        store.close()
    [report] = reports
    assert report.counts() == {"waiting for items": 1, "completed": 1}  # one park, one resume
    assert project.launch_status(run_id) == "done"
    trace = (project.root / ".wfrun" / "runs" / run_id / "trace.jsonl").read_text()
    events = [json.loads(line) for line in trace.splitlines()]
    logs = [e["node"] for e in events if e["type"] == "node_log"]
    assert sorted(logs) == [f"each[{i}]" for i in range(4)]
    assert logs[-1] == "each[3]"  # the others' logs were recorded while it ran
    [ended] = [e for e in events if e["type"] == "node_finished" and e["node"] == "each"]
    assert [o["stdout"] for o in ended["payload"]["output"]] == [f"item {i}" for i in range(4)]
