"""`wfrun host --processes N`: worker processes that share the host's slots (issue 15).

Real hosts on a real store: both processes run runs at once, their reports reach the
host's lines and summary, SIGTERM parks the runs of every process, a worker whose host
is SIGKILLed parks its run and exits, and the next host finishes everything once."""

from __future__ import annotations

import signal

import pytest
from standalonekit import Project, group_gone, pid_gone, wait_for
from waiting import DEADLINE

from runner.host._daemon import StandaloneHost, WorkerSettings, fork_workers, host_lock
from runner.host.runtime._views import show_run

pytestmark = pytest.mark.slow
LEASE = {"WFRUN_LEASE_SECONDS": "1.5"}
# Each run logs `start`, waits while the file `gate` exists, then logs `end`.
GATED = """\
    start: wait
    nodes:
      wait:
        action:
          use_shell: true
          shell: "echo start >> log; while [ -e gate ]; do sleep 0.1; done; echo end >> log"
"""


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[-1].split()[1])


def runner_pids(project: Project, run_ids: list[str]) -> list[int]:
    pids = []
    for run_id in run_ids:
        runner = project.launch(run_id).runner_id
        assert runner is not None
        pids.append(int(runner.rpartition(":")[2]))
    return pids


def both_running(project: Project, run_ids: list[str]) -> bool:
    return all(project.launch_status(r) == "running" for r in run_ids) and \
        project.counts()["start"] == 2


@pytest.fixture
def gated(project: Project) -> Project:
    project.workflow("gated", GATED)
    (project.root / "gate").touch()
    return project


def test_two_processes_each_run_a_run_at_once_and_report_to_the_host(gated: Project) -> None:
    run_ids = gated.queue("gated", [{}, {}])
    host = gated.host("--no-controllers", "--max-runs", "2", "--processes", "2")

    # One slot per process: both runs in flight means each process claimed one.
    wait_for("both runs to wait at the gate", lambda: both_running(gated, run_ids))
    pids = runner_pids(gated, run_ids)
    assert host.pid in pids
    [worker] = [p for p in pids if p != host.pid]
    assert parent_of(worker) == host.pid  # the host's own worker process
    (gated.root / "gate").unlink()
    wait_for("both runs to finish",
             lambda: all(gated.launch_status(r) == "done" for r in run_ids))
    host.send_signal(signal.SIGTERM)

    assert host.wait(timeout=DEADLINE) == 0
    err = gated.stderr_of(host)
    assert "2 processes); Ctrl-C stops it" in err
    for run_id in run_ids:  # the worker's run is reported by the host, like its own
        assert f"wfrun host: run {run_id} completed" in err
    assert "wfrun host: 2 run(s) started: 2 completed" in err
    assert pid_gone(worker)
    assert gated.counts() == {"start": 2, "end": 2}


def test_sigterm_parks_the_runs_of_every_process_and_the_next_host_finishes_them(
        gated: Project) -> None:
    run_ids = gated.queue("gated", [{}, {}])
    host = gated.host("--no-controllers", "--max-runs", "2", "--processes", "2")
    wait_for("both runs to wait at the gate", lambda: both_running(gated, run_ids))
    [worker] = [p for p in runner_pids(gated, run_ids) if p != host.pid]

    host.send_signal(signal.SIGTERM)  # the gate stays: no run ends by itself

    assert host.wait(timeout=DEADLINE) == 0
    assert [gated.launch_status(r) for r in run_ids] == ["parked", "parked"]
    assert "wfrun host: 2 run(s) started: 2 parked" in gated.stderr_of(host)
    wait_for("the worker process to exit", lambda: pid_gone(worker))
    (gated.root / "gate").unlink()
    later = gated.wfrun("host", "--once", "--no-controllers", "--max-runs", "2",
                        "--processes", "2", timeout=DEADLINE)
    assert later.returncode == 0, later.stderr
    assert [gated.launch_status(r) for r in run_ids] == ["done", "done"]
    # Each parked run reran its interrupted node once, and ended once.
    assert gated.counts() == {"start": 4, "end": 2}
    for run_id in run_ids:
        assert gated.trace_types(run_id).count("run_completed") == 1


def test_a_worker_whose_host_is_sigkilled_parks_its_run_and_exits(gated: Project) -> None:
    run_ids = gated.queue("gated", [{}, {}])
    host = gated.host("--no-controllers", "--max-runs", "2", "--processes", "2", **LEASE)
    wait_for("both runs to wait at the gate", lambda: both_running(gated, run_ids))
    pids = runner_pids(gated, run_ids)
    [worker] = [p for p in pids if p != host.pid]
    worker_run = run_ids[pids.index(worker)]
    host_run = run_ids[pids.index(host.pid)]
    wait_for("the host to record its run's shell group", gated.registered_groups)
    [orphan] = gated.registered_groups()

    host.kill()  # SIGKILL: the host parks nothing; its worker sees its pipe close
    host.wait(timeout=DEADLINE)

    wait_for("the orphaned worker to exit", lambda: pid_gone(worker))
    assert gated.launch_status(worker_run) == "parked"  # parked at a safe point
    assert gated.launch_status(host_run) == "running"  # held by the dead host's lease
    assert not group_gone(orphan)  # the dead host's shell runs on, waiting at the gate
    # A host that stays: the dead host's run comes back once its lease runs out.
    second = gated.host("--no-controllers", "--max-runs", "2", "--processes", "2", **LEASE)
    wait_for("the new host to reap the dead host's shell group", lambda: group_gone(orphan))
    (gated.root / "gate").unlink()
    wait_for("both runs to finish",
             lambda: all(gated.launch_status(r) == "done" for r in run_ids))
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=DEADLINE) == 0
    assert gated.counts()["end"] == 2  # every run ended once, none twice
    assert gated.launch(host_run).epoch == 2  # claimed again after the dead host's lease
    for run_id in run_ids:
        assert gated.trace_types(run_id).count("run_completed") == 1


def test_once_with_two_processes_drains_a_queue_of_60_each_run_once(project: Project) -> None:
    ids = project.queue("tiny", [{"n": i} for i in range(60)])

    done = project.wfrun("host", "--once", "--max-runs", "4", "--processes", "2",
                         "--no-controllers", timeout=60)

    assert done.returncode == 0, done.stderr
    assert "60 run(s) started: 60 completed" in done.stderr
    assert done.stderr.count(" completed\n") == 61  # one line per run, then the summary
    runs = project.root / ".wfrun" / "runs"
    for i, run_id in enumerate(ids):
        assert project.launch_status(run_id) == "done"
        view = show_run(runs, run_id)
        assert view["final_output"] == {"n": i, "next": i + 1}
        assert project.trace_types(run_id).count("run_started") == 1


def test_more_processes_than_runs_is_refused_in_one_line(project: Project) -> None:
    [run_id] = project.queue("tiny", [{"n": 1}])

    out = project.wfrun("host", "--once", "--max-runs", "2", "--processes", "3")

    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        "Error: --processes 3 is more than --max-runs 2: each process runs one run at "
        "least; lower --processes")
    assert project.launch_status(run_id) == "queued"  # nothing was started


def test_runs_a_worker_ends_before_the_host_is_built_are_still_counted(
        project: Project) -> None:
    ids = project.queue("tiny", [{"n": i} for i in range(6)])
    ws = project.workspace()
    lock = host_lock(ws)
    lock.acquire()
    pool, share = fork_workers(ws, lock, processes=2, max_runs=2, settings=WorkerSettings(
        open_store=project.store, once=True))
    assert pool is not None
    assert share == 1
    # The worker drains the queue alone while this process has no host yet.
    wait_for("the worker to finish every run",
             lambda: all(project.launch_status(r) == "done" for r in ids))
    store = project.store()
    try:
        ended: list[str] = []
        host = StandaloneHost(ws, store, max_runs=share, lock=lock, pool=pool,
                              on_run_ended=lambda run_id, _outcome: ended.append(run_id))
        report = host.run(once=True)
    finally:
        store.close()
    assert report.started == 6
    assert report.counts() == {"completed": 6}
    assert sorted(ended) == sorted(ids)


def test_a_host_that_fails_stops_its_workers_before_it_raises(project: Project) -> None:
    ws = project.workspace()
    lock = host_lock(ws)
    lock.acquire()
    pool, share = fork_workers(ws, lock, processes=2, max_runs=2,
                               settings=WorkerSettings(open_store=project.store))
    assert pool is not None
    [worker] = [w.pid for w in pool.workers]
    store = project.store()
    try:
        host = StandaloneHost(ws, store, max_runs=share, lock=lock, pool=pool)

        def broken(_session: object, **_how: object) -> None:
            raise RuntimeError("the claim broke")

        host.coordinator.claim_next = broken  # type: ignore[method-assign,assignment]
        with pytest.raises(RuntimeError, match="the claim broke"):
            host.run()  # not --once: its worker would poll for ever unless stopped
    finally:
        store.close()
    assert pid_gone(worker)  # stopped and waited for, not left behind
    assert pool.workers == []
