"""Controller children across real processes killed with SIGKILL (seed 004).

A host killed between a child run's creation and its parent's status update:
before the launch row is queued, after it is queued, after the run is running
but before its first node, between nodes, and after the run ended but before
the launch recorded it; and in the middle of a node (its shell outlives the
host). After a restart the request is settled exactly once, the parent is woken
(the shared clock stands still, so only the child's wake-up brings the next
pass) and the child's side effect happened once.

A child whose node kills its host twice: the run fails `interrupted` (the engine
starts a node at most twice), the request becomes `interrupted` and the next pass
starts attempt 2 with a new run id, leaving attempt 1's run untouched.

Processes share a FileClock (`WFRUN_CLOCK_FILE`): a dead process's leases and the
queue grace come due when the test moves the clock, never by waiting.
"""

from __future__ import annotations

import hashlib
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
from runner.controllers.workflows import QUEUE_GRACE_SECONDS
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
      shell: [sh, -c, 'echo "start $$" >> child.log; while [ ! -e release ]; do sleep 0.02; done;
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
              echo "$n" > started; while [ ! -e release ]; do sleep 0.02; done']
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
    return SqliteStore(store_path(project), now=clock.now)


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


def bundle_bytes(project: Path, run_id: str) -> dict[str, str]:
    root = project / ".wfrun" / "runs" / run_id
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


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
    "before_outcome_recorded": ("WFRUN_CRASH_AT", "running", "completed", True),
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


def test_host_killed_mid_node_the_taker_reaps_the_orphan_before_the_rerun(
        project: Path, clock: FileClock, procs: list[subprocess.Popen[str]]) -> None:
    """The node's shell outlives its killed host. The process that takes the child
    over kills it before re-running the node, so the node's effect (`done`, written
    once `release` exists) happens once, not once per copy."""
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
        procs.append(start_driver(project, "--once", "--lease", "0.5", "--wait", "60",
                                  env=env_of(clock)))
        wait_for(lambda: len(log_lines(project, "child.log")) == 2, what="the node to rerun")
        wait_for(lambda: not alive(orphan), timeout=DEADLINE, what="the orphan to be reaped")
    finally:
        # Whatever failed above, no shell may poll for `release` after the test.
        (project / "release").write_text("")
    assert procs[1].wait(DEADLINE) == 0
    run_id = assert_settled_once(project, clock, 1)
    lines = log_lines(project, "child.log")
    assert [line.split()[0] for line in lines] == ["start", "start", "done"]
    starts = [e for e in RunReader(project / ".wfrun" / "runs").trace(run_id)
              if e["type"] == "node_started" and e["node"] == "work"]
    assert len(starts) == 2  # the interrupted node, and its one rerun


def test_node_killing_its_host_twice_interrupts_the_attempt_and_attempt_two_runs(
        project: Path, clock: FileClock, procs: list[subprocess.Popen[str]]) -> None:
    write_workflow(project, "crashy-child", CRASHY_CHILD)
    apply_parent(project, clock, "crashy-child")
    for n in (1, 2):  # the first run, then the take-over that reruns the node
        died = run_driver(project, "--once", "--lease", "0.5", env=env_of(clock))
        assert died.returncode == -signal.SIGKILL, died.stderr
        assert len(log_lines(project, "ran.log")) == n
        clock.advance(AFTER_LEASES)
    with open_store(project, clock) as store:
        (req,) = store.workflow_requests.list()
        assert (req.state, req.attempt) == ("running", 1)
        first = req.run_id
        assert first is not None

    # The next host takes attempt 1 over: its node started twice, so the engine fails
    # the run `interrupted` instead of a third start; the request becomes interrupted,
    # the parent is woken, and its pass starts attempt 2 (held at its node here).
    procs.append(start_driver(project, "--once", "--lease", "0.5", "--wait", "60",
                              env=env_of(clock)))
    wait_for(lambda: (project / "started").exists(), what="attempt 2's node")
    assert (project / "started").read_text().strip() == "3"
    with open_store(project, clock) as store:
        (req,) = store.workflow_requests.list()
        assert (req.state, req.attempt) == ("running", 2)
        second = req.run_id
        assert second not in (None, first)
        row = store.launches.get(first)
        assert row is not None
        assert (row.status, row.error_code) == ("failed", "interrupted")
    reader = RunReader(project / ".wfrun" / "runs")
    assert reader.status(first) == "failed"
    assert (reader.state(first).error or {}).get("code") == "interrupted"
    frozen = bundle_bytes(project, first)

    (project / "release").write_text("")
    assert procs[0].wait(DEADLINE) == 0, procs[0].communicate()[1]
    run_id = assert_settled_once(project, clock, 2)
    assert run_id == second
    assert bundle_bytes(project, first) == frozen  # attempt 1 is immutable
    assert log_lines(project, "ran.log") == ["ran"] * 3  # twice in attempt 1, once in 2
    with open_store(project, clock) as store:
        rows = {r.run_id: (r.status, r.error_code) for r in store.launches.query()}
    assert rows == {first: ("failed", "interrupted"), second: ("done", None)}
