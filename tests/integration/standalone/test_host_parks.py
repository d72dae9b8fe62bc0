"""Parks are not deaths (issue 35): a node parked twice by a host's SIGTERM (two
rolling restarts during a long step) still completes, because each park is recorded
in the trace (`run_parked`) and the crash-loop budget (NODE_START_BUDGET) counts only
the starts that ended in a death. Real `wfrun host` processes on a SQLite store."""

from __future__ import annotations

import signal

import pytest
from standalonekit import Project, wait_for
from waiting import DEADLINE

from runner.engine._state import fold

pytestmark = pytest.mark.slow


def _park_by_sigterm(project: Project, run_id: str, attempt: int) -> None:
    host = project.host("--no-controllers")
    wait_for(f"attempt {attempt} of b to start", lambda: project.counts()["b-start"] == attempt)
    host.send_signal(signal.SIGTERM)  # b waits on b.hold.<attempt>: only a park ends it
    assert host.wait(timeout=DEADLINE) == 0, project.stderr_of(host)
    assert project.launch_status(run_id) == "parked"


def test_a_node_parked_twice_by_sigterm_still_completes(project: Project) -> None:
    (project.root / "b.hold.2").touch()  # the second attempt waits too
    [run_id] = project.queue("three", [{}])
    _park_by_sigterm(project, run_id, 1)
    _park_by_sigterm(project, run_id, 2)

    later = project.wfrun("host", "--once", "--no-controllers", timeout=DEADLINE)

    assert later.returncode == 0, later.stderr
    assert project.launch_status(run_id) == "done"
    assert project.manifest(run_id)["status"] == "completed"
    assert project.counts() == {"a": 1, "b-start": 3, "b": 1, "c": 1}
    types = project.trace_types(run_id)
    assert types.count("run_parked") == 2
    assert "run_interrupted" not in types


def _event(seq: int, kind: str, node: str | None = None) -> dict[str, object]:
    event: dict[str, object] = {"seq": seq, "type": kind, "payload": {}}
    if node is not None:
        event["node"] = node
    return event


@pytest.mark.parametrize(("kinds", "deaths"), [
    (["node_started", "run_parked", "node_started", "run_parked", "node_started"], 1),
    (["node_started", "node_started"], 2),  # two deaths: the budget is spent
    (["node_started", "run_parked", "node_started", "node_started"], 2),
    (["node_started", "node_started", "run_parked", "node_started"], 2),
])
def test_the_budget_counts_deaths_not_parks(kinds: list[str], deaths: int) -> None:
    events = [_event(1, "run_started")] + [
        _event(i, k, "b" if k == "node_started" else None) for i, k in enumerate(kinds, 2)]
    assert fold("r", events).current_node_starts == deaths
