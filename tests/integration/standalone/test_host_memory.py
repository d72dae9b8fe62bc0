"""A host's memory is flat in the number of runs it has served (issue 35): it keeps
counters, not each finished run's `RunOutcome` (the whole `RunState`, outputs
included, until it exited). Structural, not timed: the run objects the host keeps
after N runs equal those after 2N. The RSS figures are bench/bench_host_memory.py's."""

from __future__ import annotations

import gc
import logging
import threading
import types

import pytest
from standalonekit import Project
from waiting import DEADLINE

from runner.engine import RunOutcome
from runner.engine._state import RunState
from runner.host._daemon import StandaloneHost
from runner.host.runtime._watch import Drift
from runner.store import LaunchRecord

RUNS = 15


class _Served:
    def __init__(self) -> None:
        self.ended = 0
        self.cond = threading.Condition()

    def __call__(self, run_id: str, outcome: RunOutcome | None) -> None:
        with self.cond:
            self.ended += 1
            self.cond.notify_all()

    def wait(self, count: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.ended >= count, DEADLINE), self.ended


_OPAQUE = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
           types.FrameType, threading.Thread, logging.Logger)


def _kept_by(root: object) -> dict[str, int]:
    """The run objects reachable from `root` (the host): what it keeps, as opposed to
    what a thread still winding down holds for a moment (frames are not followed, nor
    modules, classes, functions, threads or loggers: those lead to everything)."""
    kinds = {k: k.__name__ for k in (RunOutcome, RunState, LaunchRecord)}
    counts = dict.fromkeys(kinds.values(), 0)
    seen = {id(root)}
    todo = [root]
    while todo:
        obj = todo.pop()
        name = kinds.get(type(obj))
        if name is not None:
            counts[name] += 1
        for ref in gc.get_referents(obj):
            if id(ref) in seen or isinstance(ref, _OPAQUE):
                continue
            seen.add(id(ref))
            todo.append(ref)
    return counts


def _served_by_one_host(project: Project, runs: int) -> tuple[dict[str, int], StandaloneHost]:
    """A host serves `runs` launches and stops (its threads joined, so nothing in
    flight holds a run); what is still alive then is what the host object keeps."""
    served = _Served()
    store = project.store()
    host = StandaloneHost(project.workspace(), store, poll=0.05, on_run_ended=served)
    thread = threading.Thread(target=host.run, daemon=True)
    thread.start()
    try:
        project.queue("tiny", [{"n": i} for i in range(runs)])
        served.wait(runs)
    finally:
        host.stop()
        thread.join(timeout=DEADLINE)
        store.close()
    assert not thread.is_alive()
    return _kept_by(host), host


def test_the_host_keeps_nothing_per_run_served(project: Project) -> None:
    after_n, first = _served_by_one_host(project, RUNS)
    after_2n, second = _served_by_one_host(project, 2 * RUNS)
    assert after_2n == after_n, (after_n, after_2n)
    assert first.report.counts() == {"completed": RUNS}
    assert second.report.counts() == {"completed": 2 * RUNS}
    assert second.report.started == 2 * RUNS


def test_the_source_watch_holds_one_entry_per_source_not_per_launch(project: Project) -> None:
    """The watch reads the queue grouped by source identity in the database (it loaded
    every queued launch with its input: 445 MB at 93,000 queued)."""
    project.queue("tiny", [{"n": i} for i in range(40)])
    project.queue("three", [{}, {}])
    store = project.store()
    try:
        host = StandaloneHost(project.workspace(), store, poll=0.05)
        host.sources.look()
        groups = sorted((g.launches, g.first_run_id.split("-")[0])
                        for g in host.sources.groups.values())
        assert groups == [(2, "three"), (40, "tiny")]
        assert len(host.sources.watch._records) == 2
        assert _kept_by(host)["LaunchRecord"] == 0
    finally:
        store.close()


def test_a_drifted_source_is_logged_once_for_all_its_queued_launches(
        project: Project, caplog: pytest.LogCaptureFixture) -> None:
    queued = project.queue("tiny", [{"n": i} for i in range(3)])
    store = project.store()
    try:
        host = StandaloneHost(project.workspace(), store, poll=0.05)
        host.sources.look()
        [group] = host.sources.groups.values()
        assert group.first_run_id == min(queued)
        drift = Drift(group.run_id, str(project.root / ".wfrun" / "workflows" / "tiny.yaml"),
                      "edited", "0" * 64, "1" * 64)
        with caplog.at_level(logging.WARNING):
            host.sources._drifted(group, drift)
            host.sources._drifted(group, drift)  # the same news again: not logged twice
        lines = [r.getMessage() for r in caplog.records]
        assert lines == [f"wfrun host: 3 queued launches ({min(queued)}, ...): its workflow "
                         "source .wfrun/workflows/tiny.yaml was edited since it was queued; "
                         "activation re-checks it and refuses a changed definition "
                         "(source_changed)"]
    finally:
        store.close()
