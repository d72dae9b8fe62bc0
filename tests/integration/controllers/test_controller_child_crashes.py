"""Controller children across real processes killed with SIGKILL (seed 004).

A host killed between a child run's creation and its parent's status update:
before the launch row is queued, after it is queued, after the run is running
but before its first node, between nodes, and after the run ended but before
the launch recorded it; and in the middle of a node (its shell outlives the
host). After a restart the request is settled exactly once, the parent is woken
(the shared clock stands still, so only the child's wake-up brings the next
pass) and the child's side effect happened once.

A child whose action node was interrupted by its host's death is not run again
(seed 004: a child's action is an effect of the controller's operation, and a
command offers nothing to observe): the run fails `indeterminate`, the request
`failed`, and the parent decides.

Processes share a FileClock (`WFRUN_CLOCK_FILE`): a dead process's leases and the
queue grace come due when the test moves the clock, never by waiting.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from ctlkit import (
    probe_controller,
    run_driver,
    start_driver,
    store_path,
    wait_for,
    write_workflow,
)
from waiting import DEADLINE

from runner.clock import CLOCK_FILE_ENV, FileClock
from runner.controllers import ControllerManager, is_true
from runner.controllers._workflows import QUEUE_GRACE_SECONDS
from runner.engine import RunReader
from runner.store import SqliteStore

pytestmark = pytest.mark.slow

if not hasattr(signal, "SIGKILL") or not Path("/proc/self/stat").exists():  # pragma: no cover
    pytest.skip("needs POSIX signals and /proc", allow_module_level=True)

#: One side-effecting node (it logs its start with its pid, waits for `release`,
#: logs `done`), then a compute node.
EFFECT_CHILD = """\
name: effect-child
input: {type: object}
start: work
nodes:
  work:
    action:
      shell: [sh, -c, 'echo "start $$" >> child.log; while [ ! -e release ]; do sleep 0.1; done;
              echo done >> child.log']
  report: {compute: "{{ {'ok': true} }}"}
edges:
  - {from: work, to: report}
"""
#: A node that kills the process running it ($PPID: the controller host) the first two
#: times, then records which attempt of the node it is and waits for `release`.
CRASHY_CHILD = """\
name: crashy-child
input: {type: object}
start: work
nodes:
  work:
    action:
      shell: [sh, -c, 'echo ran >> ran.log; n=$(wc -l < ran.log | tr -d " ");
              if [ "$n" -le 2 ]; then kill -9 $PPID; sleep 30; fi;
              echo "$n" > started; while [ ! -e release ]; do sleep 0.1; done']
"""
#: Past every lease a dead process held (the 0.5 s key claims of these drivers, the
#: 30 s launch lease of a child) and the queue grace of a saved attempt.
AFTER_LEASES = QUEUE_GRACE_SECONDS + 1


@pytest.fixture
def clock(tmp_path: Path) -> FileClock:
    return FileClock.create(tmp_path / "clock")


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=5)


def env_of(clock: FileClock, **extra: str) -> dict[str, str]:
    return {CLOCK_FILE_ENV: clock.path, **extra}


def open_store(project: Path, clock: FileClock) -> SqliteStore:
    return SqliteStore(store_path(project), clock=clock)


def apply_parent(project: Path, clock: FileClock, child: str) -> None:
    with open_store(project, clock) as store:
        ControllerManager(store, [probe_controller(project)], clock=clock).apply(
            "probe", "k", {"child": child})


def log_lines(project: Path, name: str) -> list[str]:
    path = project / name
    return path.read_text().splitlines() if path.exists() else []


def alive(pid: int) -> bool:
    """Running, not a zombie (killed processes here may linger unreaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def assert_settled_once(project: Path, clock: FileClock, attempt: int) -> str:
    """The parent is Ready from its child's success, the request settled once, the
    run's launch ended once; returns the run id."""
    with open_store(project, clock) as store:
        r = store.resources.get("probe", "k")
        assert r is not None
        assert is_true(r.status, "Ready", 1), r.status
        assert r.status["controller_status"]["child"] == "succeeded"
        (req,) = store.workflow_requests.list(r.uid)
        assert (req.state, req.attempt) == ("succeeded", attempt)
        assert req.run_id is not None
        assert r.status["workflow_run"]["run_id"] == req.run_id
        row = store.launches.get(req.run_id)
        assert row is not None
        assert row.status == "done"
        ends = [e.type for e in store.run_events.read(run_id=req.run_id)
                if e.type in ("launch.done", "launch.failed", "launch.cancelled")]
        assert ends == ["launch.done"]
        settled = [e for e in store.controller_events.read(controller="probe", key="k")
                   if e.type == "reconcile_finished" and e.payload.get("result") == "settled"]
        assert len(settled) == 1  # one pass saw the child succeed
        assert store.reconcile_queue.list() == []
        return req.run_id


# The crash seam, the launch row and the bundle right after the kill, and whether the
# node had finished by then.
KILLS = {
    "before_child_queued": ("CTL_CRASH_AT", None, None, False),
    "after_queued_commit": ("WFRUN_CRASH_AT", "queued", None, False),
    "before_executor_release": ("WFRUN_CRASH_AT", "running", "running", False),
    "between_nodes": ("WFRUN_CRASH_AT", "running", "running", True),
    # The run has its ending, the launch not: a bundle's seal records the launch's
    # ending (launch/_activator.py RunLink), so the kill just before the seal is that window.
    "before_seal": ("WFRUN_CRASH_AT", "running", "completed", True),
}


@pytest.mark.parametrize("point", KILLS)
def test_host_killed_between_child_run_creation_and_parent_status_update(
        project: Path, clock: FileClock, point: str) -> None:
    seam, row_after, bundle_after, node_done = KILLS[point]
    write_workflow(project, "effect-child", EFFECT_CHILD)
    (project / "release").write_text("")  # the node finishes at once
    apply_parent(project, clock, "effect-child")
    crashed = run_driver(project, "--once", "--lease", "0.5",
                         env=env_of(clock, **{seam: point}))
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    with open_store(project, clock) as store:
        r = store.resources.get("probe", "k")
        assert r is not None
        # The parent never saw the child end (its pass may have recorded it running).
        assert r.status["controller_status"].get("child") in (None, "running")
        if seam == "CTL_CRASH_AT" or point == "after_queued_commit":
            assert r.status["observed_generation"] == 0  # killed inside the pass
        (req,) = store.workflow_requests.list(r.uid)
        assert (req.state, req.attempt) == ("running", 1)
        first = req.run_id
        assert first is not None
        row = store.launches.get(first)
        assert (row.status if row else None) == row_after
    assert RunReader(project / ".wfrun" / "runs").status(first) == bundle_after
    assert log_lines(project, "child.log")[1:] == (["done"] if node_done else [])

    clock.advance(AFTER_LEASES)
    restarted = run_driver(project, "--once", "--lease", "0.5", env=env_of(clock))
    assert restarted.returncode == 0, restarted.stderr
    # No launch row: attempt 1 is interrupted and attempt 2 runs; otherwise the
    # restarted process takes attempt 1 over and settles it from its bundle.
    run_id = assert_settled_once(project, clock, 2 if row_after is None else 1)
    assert (run_id != first) == (row_after is None)
    lines = log_lines(project, "child.log")
    assert [line.split()[0] for line in lines] == ["start", "done"]  # the node ran once
    assert sorted(p.name for p in (project / ".wfrun" / "runs").iterdir()
                  if not p.name.startswith(".")) == [run_id]  # .snapshots is no run


def assert_child_failed_indeterminate(project: Path, clock: FileClock) -> str:
    """The child's request failed once with the run's `indeterminate` error and the
    parent settled on it (ChildFailed): no pass started another attempt."""
    with open_store(project, clock) as store:
        r = store.resources.get("probe", "k")
        assert r is not None
        assert r.status["controller_status"]["child"] == "failed"
        assert [c["reason"] for c in r.status["conditions"] if c["type"] == "Ready"] \
            == ["ChildFailed"]
        (req,) = store.workflow_requests.list(r.uid)
        assert (req.state, req.attempt) == ("failed", 1)
        assert req.error is not None
        assert "may have had its effect" in req.error
        assert req.run_id is not None
        assert store.reconcile_queue.list() == []
        return req.run_id


def test_host_killed_mid_node_the_taker_reaps_the_orphan_and_never_reruns_the_effect(
        project: Path, clock: FileClock, procs: list[subprocess.Popen[str]]) -> None:
    """Seed 004: a controller child's action node is an effect of the controller's
    operation. The node's shell outlives its killed host; the process that takes the
    child over kills that orphan and, finding the node started but never ended (a
    pending effect that a command offers nothing to observe), does not run it again:
    the run fails `indeterminate` and the parent's pass sees ChildFailed. The effect
    (`done`, written once `release` exists) never happens twice, nor blindly once more."""
    write_workflow(project, "effect-child", EFFECT_CHILD)
    apply_parent(project, clock, "effect-child")
    procs.append(start_driver(project, "--once", "--lease", "0.5", "--wait", "60",
                              env=env_of(clock)))
    wait_for(lambda: len(log_lines(project, "child.log")) == 1, what="the node to start")
    orphan = int(log_lines(project, "child.log")[0].split()[1])
    try:
        procs[0].kill()
        assert procs[0].wait(DEADLINE) == -signal.SIGKILL
        assert alive(orphan)  # the node's shell outlived its host

        clock.advance(AFTER_LEASES)
        taker = run_driver(project, "--once", "--lease", "0.5", env=env_of(clock))
        assert taker.returncode == 0, taker.stderr
        assert not alive(orphan)  # reaped before the take-over decided
    finally:
        # Whatever failed above, no shell may poll for `release` after the test.
        (project / "release").write_text("")
    run_id = assert_child_failed_indeterminate(project, clock)
    assert log_lines(project, "child.log") == [f"start {orphan}"]  # ran once, never again
    reader = RunReader(project / ".wfrun" / "runs")
    assert reader.status(run_id) == "failed"
    assert (reader.state(run_id).error or {}).get("code") == "indeterminate"
    starts = [e for e in reader.trace(run_id)
              if e["type"] == "node_started" and e["node"] == "work"]
    assert len(starts) == 1  # the interrupted node only: no rerun


def test_a_node_killing_its_host_runs_once_and_its_child_fails_indeterminate(
        project: Path, clock: FileClock) -> None:
    """The node kills its own host (crash point: inside the node, after its effect
    began). The next host does not start it a second time (an action outside a
    controller would get one rerun: NODE_START_BUDGET)."""
    write_workflow(project, "crashy-child", CRASHY_CHILD)
    apply_parent(project, clock, "crashy-child")
    died = run_driver(project, "--once", "--lease", "0.5", env=env_of(clock))
    assert died.returncode == -signal.SIGKILL, died.stderr
    assert log_lines(project, "ran.log") == ["ran"]
    clock.advance(AFTER_LEASES)
    again = run_driver(project, "--once", "--lease", "0.5", env=env_of(clock))
    assert again.returncode == 0, again.stderr
    assert_child_failed_indeterminate(project, clock)
    assert log_lines(project, "ran.log") == ["ran"]  # once: not re-run blindly


def test_host_killed_at_after_routing_the_done_effect_is_not_repeated(
        project: Path, clock: FileClock) -> None:
    """The named crash point `after_routing`: the node's command finished (its effect
    happened) and the engine chose the next node, but the node's end is not recorded.
    Outside a controller the resume would run it again; a controller child's action is
    an effect left pending, so the take-over does not, and the child fails
    `indeterminate` with the effect done exactly once."""
    write_workflow(project, "effect-child", EFFECT_CHILD)
    (project / "release").write_text("")  # the node finishes at once
    apply_parent(project, clock, "effect-child")
    crashed = run_driver(project, "--once", "--lease", "0.5",
                         env=env_of(clock, WFRUN_CRASH_AT="after_routing"))
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert [line.split()[0] for line in log_lines(project, "child.log")] == ["start", "done"]
    clock.advance(AFTER_LEASES)
    restarted = run_driver(project, "--once", "--lease", "0.5", env=env_of(clock))
    assert restarted.returncode == 0, restarted.stderr
    assert_child_failed_indeterminate(project, clock)
    assert [line.split()[0] for line in log_lines(project, "child.log")] == ["start", "done"]
