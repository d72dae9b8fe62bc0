"""The controller runtime across real processes: concurrency, SIGKILL, SIGTERM (seed 004).

(b) two workers (two `wfrun controller run` processes on one store) never
    reconcile one key at once
(e) delayed work and an expired claim of a SIGKILLed process recover in a fresh process
(f) each process stop around an external effect converges without an unobserved
    retry: SIGKILL before the provider call, after it (before the receipt), and
    after the receipt; then restart and count the merges GitHub received
(i) SIGTERM mid-work leaves nothing in memory that a new process needs
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from ctlkit import (
    HEAD,
    REPO_NAME,
    pr_spec,
    probe_controller,
    pull_request_controller,
    read_log,
    run_driver,
    start_driver,
    store_path,
    wait_for,
)
from fakes.github_server import FakeGitHub
from waiting import DEADLINE, wait_until

from runner.clock import CLOCK_FILE_ENV, Clock, FileClock, SystemClock
from runner.controllers import ControllerManager, is_true
from runner.store import SqliteStore

pytestmark = pytest.mark.slow

if not hasattr(signal, "SIGKILL"):  # pragma: no cover
    pytest.skip("needs POSIX signals", allow_module_level=True)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:  # never leave a worker behind
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=5)  # reaps it and closes its pipes


@pytest.fixture
def clock(tmp_path: Path) -> FileClock:
    """Virtual time the test and its driver processes share (`WFRUN_CLOCK_FILE`)."""
    return FileClock.create(tmp_path / "clock")


def clock_env(clock: FileClock) -> dict[str, str]:
    return {CLOCK_FILE_ENV: clock.path}


def open_store(project: Path, clock: Clock | None = None) -> SqliteStore:
    return SqliteStore(store_path(project), clock=clock or SystemClock())


def passes_of(done: subprocess.CompletedProcess[str]) -> int:
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


# -- (b) ------------------------------------------------------------------------------------
def gated_pids(log: Path) -> set[int]:
    """The processes with a pass waiting at the gate (whole lines only: a pass may be
    writing its line while this reads)."""
    text = log.read_text() if log.exists() else ""
    lines = text.splitlines()[:text.count("\n")]
    return {json.loads(line)["pid"] for line in lines if '"gated": true' in line}


def test_two_worker_processes_never_reconcile_one_key_at_once(
        project: Path, tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    log = tmp_path / "passes.jsonl"
    errs = [tmp_path / f"worker{i}.err" for i in range(2)]
    for err in errs:
        with err.open("w") as f:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "runner", "--project", str(project),
                 "controller", "run"], stdout=subprocess.DEVNULL, stderr=f, text=True))
    for err in errs:
        wait_for(lambda err=err: "controller manager running" in err.read_text(),
                 timeout=DEADLINE, what=f"{err.name} to start")
    # More keys than one process claims in a batch (16), so both get some; the first
    # passes wait at a gate until passes of both processes are waiting there, so the
    # two really run at once however the machine schedules them.
    keys, passes, gate = [f"k{i}" for i in range(48)], 4, tmp_path / "gate"
    with open_store(project) as store:
        m = ControllerManager(store, [probe_controller(project)])
        for key in keys:
            m.apply("probe", key, {"passes": passes, "sleep": 0.03, "log": str(log),
                                   "gate_file": str(gate)})
        wait_for(lambda: len(gated_pids(log)) == 2, timeout=DEADLINE,
                 what="passes of both processes at the gate")
        gate.write_text("")
        wait_for(lambda: all(is_true(r.status, "Ready", r.generation)
                             for r in store.resources.list("probe")), timeout=60,
                 what="every key to settle")
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        assert p.wait(15) == 0, "a worker did not stop cleanly on SIGTERM"
    entries = [e for e in read_log(log) if not e.get("gated")]
    assert len(entries) == len(keys) * passes  # every pass ran exactly once
    by_key: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for e in entries:
        by_key[e["key"]].append((e["enter"], e["exit"], e["pid"]))
    for key, spans in by_key.items():
        spans.sort()
        assert [e["pass"] for e in sorted((x for x in entries if x["key"] == key),
                                          key=lambda x: x["enter"])] == list(
            range(1, passes + 1))
        for (_, end, _), (start, _, _) in itertools.pairwise(spans):
            assert end <= start, f"two passes of {key} overlapped"
    pids = {e["pid"] for e in entries}
    assert len(pids) == 2, "both processes should have competed for the keys"
    # The two processes really competed: their passes ran at the same time. (Which
    # process wins a requeued key is timing; a key usually stays with the process that
    # released it, so key movement is not asserted.)
    spans_of = {pid: [(a, b) for a, b, p in (x for v in by_key.values() for x in v)
                      if p == pid] for pid in pids}
    first, second = sorted(pids)
    assert any(a1 < b2 and a2 < b1 for a1, b1 in spans_of[first]
               for a2, b2 in spans_of[second]), "the two processes never ran at once"


# -- (e) ------------------------------------------------------------------------------------
# These run on a FileClock shared with the driver processes, so a lease or a delay comes
# due when the test moves the clock, never because a process was slow to start.
def test_claim_of_a_sigkilled_process_is_reclaimed_by_a_new_process_after_the_lease(
        project: Path, tmp_path: Path, procs: list[subprocess.Popen[str]],
        clock: FileClock) -> None:
    log, block = tmp_path / "passes.jsonl", tmp_path / "block"
    block.write_text("")
    env = clock_env(clock)
    with open_store(project, clock) as store:
        ControllerManager(store, [probe_controller(project)], clock=clock).apply(
            "probe", "k", {"log": str(log), "block_file": str(block)})
    procs.append(start_driver(project, "--serve", "--lease", "3", env=env))
    wait_for(lambda: any(e.get("blocked") for e in read_log(log)), timeout=DEADLINE,
             what="the first pass to block")
    procs[0].kill()
    assert procs[0].wait(DEADLINE) == -signal.SIGKILL
    block.unlink()
    with open_store(project, clock) as store:
        held = store.reconcile_queue.get("probe", "k")
        assert held is not None
        assert held.claim_token is not None
        assert held.epoch == 1
    expires = (held.claim_expires_at or 0) / 1000
    assert expires == pytest.approx(clock.now() + 3, abs=0.01)  # the lease, in store time
    assert passes_of(run_driver(project, "--once", "--lease", "3", env=env)) == 0
    clock.set(expires - 0.01)
    assert passes_of(run_driver(project, "--once", "--lease", "3", env=env)) == 0  # leased
    clock.set(expires)
    assert passes_of(run_driver(project, "--once", "--lease", "3", env=env)) == 1
    with open_store(project, clock) as store:
        r = store.resources.get("probe", "k")
        assert r is not None
        assert is_true(r.status, "Ready", r.generation)
        assert store.reconcile_queue.list() == []
        types = [e.type for e in store.controller_events.read(controller="probe", key="k")]
        assert types.count("reconcile_started") == 2
        assert types.count("reconcile_finished") == 1


def test_delayed_wake_up_is_kept_across_processes(project: Path, clock: FileClock) -> None:
    env = clock_env(clock)
    with open_store(project, clock) as store:
        ControllerManager(store, [probe_controller(project)], clock=clock).apply(
            "probe", "k", {"delay": 2.5})
    assert passes_of(run_driver(project, "--once", env=env)) == 1
    with open_store(project, clock) as store:
        row = store.reconcile_queue.get("probe", "k")
        assert row is not None
        due = row.available_at / 1000
    assert due == pytest.approx(clock.now() + 2.5, abs=0.01)
    assert passes_of(run_driver(project, "--once", env=env)) == 0  # not due yet
    clock.set(due - 0.01)
    assert passes_of(run_driver(project, "--once", env=env)) == 0  # still not due
    clock.set(due)
    assert passes_of(run_driver(project, "--once", env=env)) == 1
    with open_store(project, clock) as store:
        r = store.resources.get("probe", "k")
        assert r is not None
        assert r.status["controller_status"]["passes"] == 2
        assert is_true(r.status, "Ready", r.generation)


# -- (f) ------------------------------------------------------------------------------------
@pytest.mark.parametrize("point", ["before_provider_call", "after_provider_call",
                                   "after_receipt"])
def test_sigkill_around_the_merge_converges_to_exactly_one_merge(
        project: Path, github: FakeGitHub, point: str, clock: FileClock) -> None:
    github.add_pull(REPO_NAME, 7, HEAD, checks="success")
    env = clock_env(clock)
    with open_store(project, clock) as store:
        ControllerManager(store, [pull_request_controller()], clock=clock).apply(
            "pull-request", "pr7", pr_spec(github.url, merge_approved=True))
    crashed = run_driver(project, "--once", "--lease", "0.5",
                         env={"CTL_CRASH_AT": point, **env})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert f"crashing at {point}" in crashed.stderr
    effect_key = f"merge:1:{HEAD}"
    with open_store(project, clock) as store:
        r = store.resources.get("pull-request", "pr7")
        assert r is not None
        effect = store.effects.get(r.uid, effect_key)
        assert effect is not None
        assert r.status["observed_generation"] == 0  # the pass never wrote status
        row = store.reconcile_queue.get("pull-request", "pr7")
        assert row is not None
        assert row.claim_token is not None  # the dead process still holds the key
    if point == "before_provider_call":
        assert (effect.state, len(github.merges())) == ("pending", 0)
    elif point == "after_provider_call":
        assert (effect.state, len(github.merges())) == ("pending", 1)
    else:
        assert (effect.state, len(github.merges())) == ("applied", 1)
    seen_before_restart = len(github.requests)

    clock.advance(0.5)  # the dead process's lease runs out (and only then)
    assert passes_of(run_driver(project, "--once", "--lease", "0.5", env=env)) == 1
    assert len(github.merges()) == 1  # exactly one merge ever reached GitHub
    assert github.pull(REPO_NAME, 7).merged
    after = [(r.method, r.path) for r in github.requests[seen_before_restart:]]
    pull = ("GET", f"/repos/{REPO_NAME}/pulls/7")
    assert after[0] == pull  # every pass starts by observing
    if point == "before_provider_call":
        # pending effect: observed (not merged), then applied once
        put = after.index(("PUT", f"/repos/{REPO_NAME}/pulls/7/merge"))
        assert after[put - 1] == pull
    else:
        assert ("PUT", f"/repos/{REPO_NAME}/pulls/7/merge") not in after
    with open_store(project, clock) as store:
        r = store.resources.get("pull-request", "pr7")
        assert r is not None
        ready = next(c for c in r.status["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("True", "Merged")
        assert r.status["observed_generation"] == r.generation
        assert store.reconcile_queue.list() == []
        if point == "before_provider_call":
            recorded = store.effects.get(r.uid, effect_key)
            assert recorded is not None
            assert recorded.state == "applied"


# -- (i) ------------------------------------------------------------------------------------
def test_sigterm_mid_work_then_a_new_process_converges(
        project: Path, tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    log = tmp_path / "passes.jsonl"
    with open_store(project) as store:
        m = ControllerManager(store, [probe_controller(project)])
        for i in range(2):
            m.apply("probe", f"child{i}", {"child": "slow-child"})
            m.apply("probe", f"count{i}", {"passes": 20, "sleep": 0.05, "log": str(log)})
    procs.append(start_driver(project, "--serve", "--lease", "1"))
    wait_for(lambda: len(read_log(log)) >= 4, timeout=DEADLINE, what="some passes")
    procs[0].send_signal(signal.SIGTERM)
    assert procs[0].wait(DEADLINE) == 0
    with open_store(project) as store:
        unfinished = [r.key for r in store.resources.list()
                      if not is_true(r.status, "Ready", r.generation)]
    assert unfinished, "SIGTERM should have interrupted work in progress"
    # The process is gone, so each claim it held expires at most a lease (1 s) after
    # its last renewal: sleeping past that is a bound, not a guess.
    time.sleep(1.1)

    def converged() -> bool:
        run_driver(project, "--once", "--lease", "1", "--wait", "10")
        with open_store(project) as store:
            return all(is_true(r.status, "Ready", r.generation)
                       for r in store.resources.list())

    wait_until(converged, timeout=DEADLINE, interval=0.1, what="every resource to be Ready")
    with open_store(project) as store:
        states = {r.key: (r.status.get("conditions"), r.status["controller_status"])
                  for r in store.resources.list()}
        assert all(is_true(r.status, "Ready", r.generation)
                   for r in store.resources.list()), states
        requests = store.workflow_requests.list()
        assert sorted(r.state for r in requests) == ["succeeded", "succeeded"]
        assert len(requests) == 2
    count_passes = [e for e in read_log(log) if e["key"] == "count0"]
    assert [e["pass"] for e in count_passes] == list(range(1, 21))
