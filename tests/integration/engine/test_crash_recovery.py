"""SIGKILL a real `wfrun run` at named points, resume it, check nothing is lost or run twice.

The kill points come from the engine's crash seam (`WFRUN_CRASH_AT=<point>[:<n>]`,
read by the host, which SIGKILLs its own process when the engine passes the n-th
occurrence of the point) or from outside (a signal while a shell node sleeps).
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from crashkit import NODES, Project, assert_recovered

from runner.engine._state import fold

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("crash_at", "done"),
    [
        # A node's end is appended with the next node's node_started (one append).
        ("between_nodes:1", ("a",)),  # a finished and b recorded as started, b not run
        ("between_nodes:2", ("a", "b")),  # b finished, c recorded, not run
        ("after_trace_append:2", ("a", "b")),  # b's node_finished appended, state.json not
        ("after_state_replace:2", ("a", "b")),  # b's node_finished and state.json written
    ],
)
def test_killed_at_a_point_resumes_without_losing_or_repeating_work(
        project: Project, crash_at: str, done: tuple[str, ...]) -> None:
    run_id = project.run_killed_at(crash_at)

    # What the kill left: completed nodes' side effects, durably recorded, nothing more.
    assert project.counts() == {n: 1 for n in done}
    events = project.events(run_id)
    assert (events[-2]["type"], events[-2]["node"]) == ("node_finished", done[-1])
    assert (events[-1]["type"], events[-1]["node"]) == ("node_started", NODES[len(done)])
    assert project.manifest(run_id)["status"] == "running"
    # state.json is a projection that may trail the trace but never leads it, and it is
    # exactly the fold of the trace prefix it names.
    state = project.state_file(run_id)
    seq = state["trace_seq"]
    assert 1 <= seq <= len(events)
    assert state == fold(run_id, events[:seq]).to_json()
    if crash_at.startswith("after_trace_append"):
        assert seq < len(events) - 1  # killed between the append and the replace
        assert done[-1] not in state["outputs"]
    if crash_at.startswith("after_state_replace"):
        assert seq == len(events) - 1  # through the node's end, not the next start
        assert done[-1] in state["outputs"]

    resumed = project.resume(run_id)
    events = assert_recovered(project, run_id, resumed)
    assert project.counts() == {n: 1 for n in ("a", "b", "c")}  # each ran exactly once
    resumes = [e for e in events if e["type"] == "run_resumed"]
    assert len(resumes) == 1
    assert resumes[0]["payload"]["resume_at"] == NODES[len(done)]
    assert resumes[0]["payload"]["repaired_bytes"] == 0


def test_killed_inside_a_shell_node_reruns_only_that_node(project: Project) -> None:
    run_id, orphan_group = project.kill_inside_b()  # b's first attempt waits for the rerun
    assert project.counts() == {"a": 1}
    events = project.events(run_id)
    assert (events[-1]["type"], events[-1]["node"]) == ("node_started", "b")

    # SIGKILL gives the engine no chance to kill b's process group (it runs in its own
    # session), so the shell outlives the killed process...
    assert set(project.tagged().values()) == {orphan_group}

    # The orphan never ends by itself: a resume that waited for it would time out.
    resumed = project.resume(run_id)
    # ...until the resume reaps it from the dead runner's process registry.
    events = assert_recovered(project, run_id, resumed)
    starts = [e for e in events if e["type"] == "node_started" and e["node"] == "b"]
    assert len(starts) == 2  # the interrupted attempt and its rerun
    assert starts[1]["payload"]["resumed"] is True
    assert not starts[1]["payload"]["counts_step"]
    assert project.state_file(run_id)["steps"] == 4  # a rerun is not an extra step
    assert not project.tagged()
    assert project.counts() == {"a": 1, "b": 1, "c": 1}


def test_resume_reaps_the_orphan_before_it_repeats_a_side_effect(project: Project) -> None:
    """The killed runner's shell group is killed by the resume, so the interrupted
    node's effect is not repeated by an orphan finishing beside the rerun."""
    run_id, orphan_group = project.kill_inside_b()
    resumed = project.resume(run_id)
    assert_recovered(project, run_id, resumed)
    # The rerun released the first attempt (b.hold.1 is gone): an orphan still alive
    # then would have written a second `b`, or still be running. Killed group members
    # linger as zombies here (PID 1 does not reap), so look for live members only.
    assert not (project.root / "b.hold.1").exists()
    assert orphan_group not in set(project.tagged().values())
    assert project.counts() == {"a": 1, "b": 1, "c": 1}


def test_torn_trace_tail_is_repaired_on_resume(project: Project) -> None:
    run_id = project.run_killed_at("after_trace_append:2")
    data = project.trace_bytes(run_id)
    # b's end and c's start were one append: the kill tore it inside b's line.
    lines = data.splitlines(keepends=True)
    assert b'"type":"node_started"' in lines[-1]
    last = lines[-2]
    assert b'"type":"node_finished"' in last
    last_start = len(data) - len(lines[-1]) - len(last)
    cut = last_start + len(last) // 2
    trace = project.runs / run_id / "trace.jsonl"
    trace.write_bytes(data[:cut])  # half a line: the write the kill interrupted

    resumed = project.resume(run_id)
    events = assert_recovered(project, run_id, resumed)
    resume = next(e for e in events if e["type"] == "run_resumed")
    assert resume["payload"]["repaired_bytes"] == cut - last_start
    assert resume["payload"]["resume_at"] == "b"
    assert resume["seq"] == events.index(resume) + 1
    # b's completion record was lost with the torn line, so b ran again: at most twice.
    assert project.counts() == {"a": 1, "b": 2, "c": 1}


def test_a_resume_killed_in_turn_is_resumed_again(project: Project) -> None:
    run_id = project.run_killed_at("after_trace_append:1")  # a recorded, state.json behind
    first = project.resume(run_id, crash_at="between_nodes:1")  # b done, then killed
    assert first.returncode == -signal.SIGKILL
    assert project.counts() == {"a": 1, "b": 1}
    resumed = project.resume(run_id)
    events = assert_recovered(project, run_id, resumed)
    assert [e["payload"]["resume_at"] for e in events if e["type"] == "run_resumed"] == \
        ["b", "c"]
    assert project.counts() == {"a": 1, "b": 1, "c": 1}


def test_a_completed_run_refuses_resume_and_stays_unchanged(project: Project) -> None:
    proc = project.start()
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    run_id = project.only_run()
    before = project.trace_bytes(run_id)
    again = project.resume(run_id)
    assert again.returncode == 2
    assert "already ended" in again.stderr
    assert project.trace_bytes(run_id) == before
    assert project.counts() == {"a": 1, "b": 1, "c": 1}


def test_bad_crash_spec_is_a_usage_error(project: Project) -> None:
    proc = project.start("nowhere:1")
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert "WFRUN_CRASH_AT" in err
    assert not project.runs.exists() or not [n for n in os.listdir(project.runs)
                                               if not n.startswith(".")]


def test_killed_after_a_checkpoint_finished_resumes_into_waiting(project: Project) -> None:
    run_id = project.run_killed_at("after_trace_append:2", "gate")  # ask's node_finished
    assert project.manifest(run_id)["status"] == "running"
    resumed = project.resume(run_id)
    assert resumed.returncode == 4, resumed.stderr  # waiting
    assert json.loads(resumed.stdout)["status"] == "waiting"
    events = project.events(run_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "run_waiting"
    assert events[-1]["payload"]["waiting_on"] == "ask"
    state = project.state_file(run_id)
    assert state == fold(run_id, events).to_json()
    assert state["status"] == "waiting"
    assert project.manifest(run_id)["status"] == "waiting"
    assert project.counts() == {"a": 1}


def test_killed_after_a_failed_node_resumes_into_failed(project: Project) -> None:
    run_id = project.run_killed_at("after_trace_append:1", "broken")  # a's node_failed
    resumed = project.resume(run_id)
    assert resumed.returncode == 1, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "failed"  # an outcome, not an error
    assert "error:" not in resumed.stderr
    events = project.events(run_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "run_failed"
    assert events[-1]["payload"]["error"]["code"] == "nonzero_exit"
    assert project.state_file(run_id) == fold(run_id, events).to_json()
    assert project.manifest(run_id)["status"] == "failed"
    assert project.counts() == {"a": 1}  # a failed node is recorded, not rerun
