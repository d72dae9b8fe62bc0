"""Child workflows as launch rows, in one process (seed 004 "Child workflows").

- completion races: a child that ends while its parent's pass holds the key marks
  the key dirty, and exactly one more pass sees `succeeded`; two processes
  ensuring one request key start one run (one launch row, one bundle)
- a parent generation change while a child runs: the old request stays keyed by
  its request key, the new generation asks under a new key, the old child's end
  still wakes the parent, and a stale pass's status loses the compare-and-swap
- the explicit `interrupted` outcome when the process died between saving an
  attempt and queueing its launch row, and attempt 2 with a new run id
- the global worker limit: with max_workers=2, five children requested at once
  never run more than two at a time

Child runs execute on real threads; the store runs on the harness's fake clock.
test_controller_child_crashes.py kills real processes around the same steps.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ctlkit import Harness, HeldChildren, probe_controller, store_path, wait_for
from waiting import DEADLINE

from runner.compiler import build_catalog
from runner.controllers import (
    ChildWorkflows,
    Condition,
    ControllerManager,
    ManagerConfig,
    ReconcileContext,
    Result,
    define_controller,
    is_true,
)
from runner.controllers._workflows import QUEUE_GRACE_SECONDS, ChildView
from runner.errors import InputError
from runner.host.runtime._children import LocalChildLauncher
from runner.host.runtime._controllers import child_launcher
from runner.host.runtime._local import Workspace
from runner.store import SqliteStore
from runner.store._controller_interface import Resource, WorkflowRequest


def launch_ids(h: Harness) -> list[str]:
    return sorted(r.run_id for r in h.store.launches.query())


def request(h: Harness, controller: str, key: str, request_key: str) -> WorkflowRequest:
    uid = h.resource(controller, key).uid
    found = [r for r in h.store.workflow_requests.list(uid) if r.request_key == request_key]
    assert len(found) == 1, found
    return found[0]


def state_of(h: Harness, request_id: str) -> str | None:
    req = h.store.workflow_requests.get(request_id)
    return None if req is None else req.state


class GatedLauncher:
    """A launcher that stops between the saved attempt and its launch row until the
    test lets it go: a process caught between the two steps."""

    def __init__(self, inner: LocalChildLauncher) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.go = threading.Event()

    def launch(self, run_id: str, workflow: str, run_input: Any) -> str | None:
        self.entered.set()
        assert self.go.wait(DEADLINE)
        return self.inner.launch(run_id, workflow, run_input)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Died(BaseException):
    """Stands in for the process dying where it is raised."""


class DyingLauncher(GatedLauncher):
    """Dies after the attempt was saved, before its launch row is queued."""

    def launch(self, run_id: str, workflow: str, run_input: Any) -> str | None:
        raise Died(run_id)


@pytest.fixture
def held(project: Path) -> HeldChildren:
    return HeldChildren(project)  # before the harness: its catalog is read once


@pytest.fixture
def h(project: Path, held: HeldChildren) -> Iterator[Harness]:
    harness = Harness(project, [])
    yield harness
    harness.close()


def with_controllers(h: Harness, *controllers: Any) -> None:
    h.controllers = list(controllers)


def other_process(h: Harness) -> tuple[SqliteStore, ChildWorkflows]:
    """A second process's view: its own store connection, workspace and launcher."""
    store = SqliteStore(store_path(h.root), clock=h.clock)
    ws = Workspace(build_catalog("workflows", h.root, None), h.root, h.root / ".state")
    return store, ChildWorkflows(store, ws, ws.runs_dir, clock=h.clock,
                                 launcher=child_launcher(ws, store))


# -- completion races --------------------------------------------------------------------
def test_child_ending_while_the_parent_pass_holds_the_key_makes_exactly_one_more_pass(
        h: Harness) -> None:
    seen: list[str] = []
    inside: dict[str, Any] = {}

    def reconcile(ctx: ReconcileContext, r: Resource) -> Result:
        view = ctx.workflows.ensure("c", "quick-child", {"key": r.key})
        seen.append(view.state)
        if len(seen) == 1:
            # The child runs on its own thread; hold this pass until it has ended and
            # the store has settled its request (and woken this claimed key).
            wait_for(lambda: state_of(h, view.request_id) == "succeeded",
                     what="the child to succeed during the pass")
            row = h.store.reconcile_queue.get("race", r.key)
            assert row is not None
            inside.update(dirty=row.dirty, claimed=row.claim_token is not None)
            for _ in range(3):  # more wake-ups during the pass collapse into the same one
                h.store.reconcile_queue.enqueue("race", r.key)
        if view.state == "succeeded":
            return ctx.settled({"child": view.state, "output": view.output},
                               [Condition("Ready", "True", "ChildSucceeded")])
        # Without the child's wake-up this key would sleep for an hour.
        return ctx.requeue_after(3600, {"child": view.state},
                                 [Condition("Ready", "False", "ChildRunning")])

    with_controllers(h, define_controller("race", reconcile, timeout=None))
    m = h.manager()
    m.apply("race", "k", {})
    assert m.run_until_idle() == 2  # the pass that saw `running`, and exactly one more
    assert inside == {"dirty": True, "claimed": True}
    assert seen == ["running", "succeeded"]
    assert m.run_until_idle() == 0
    assert h.store.reconcile_queue.list() == []
    status = h.resource("race", "k").status
    assert status["controller_status"] == {"child": "succeeded",
                                           "output": {"ok": True, "key": "k"}}
    assert is_true(status, "Ready", 1)
    req = request(h, "race", "k", "c")
    assert (req.state, req.attempt) == ("succeeded", 1)
    assert launch_ids(h) == [req.run_id] == h.run_ids()


def test_a_second_process_ensuring_a_just_saved_attempt_does_not_start_another_run(
        h: Harness) -> None:
    """Process A saved attempt 1 and has not queued its launch row yet; process B
    asks for the same request key (a pass that timed out or lost its claim may still
    be running in A). B must wait for A's row, not declare the attempt dead and start
    attempt 2 beside it."""
    resource = h.store.resources.apply("probe", "k", {})
    gated = GatedLauncher(child_launcher(h.ws, h.store))
    a = ChildWorkflows(h.store, h.ws, h.ws.runs_dir, clock=h.clock, launcher=gated)
    store_b, b = other_process(h)
    try:
        views: list[ChildView] = []
        t = threading.Thread(target=lambda: views.append(
            a.ensure(resource, "c", "quick-child", {"key": "k"})), daemon=True)
        t.start()
        assert gated.entered.wait(DEADLINE)
        saved = h.store.workflow_requests.list(resource.uid)
        assert [(r.state, r.attempt) for r in saved] == [("running", 1)]
        assert launch_ids(h) == []  # the attempt is saved, its row not queued yet
        seen_by_b = b.ensure(resource, "c", "quick-child", {"key": "k"})
        assert (seen_by_b.state, seen_by_b.attempt, seen_by_b.run_id) == (
            "running", 1, saved[0].run_id)
        gated.go.set()
        t.join(DEADLINE)
        assert views[0].run_id == saved[0].run_id
        wait_for(lambda: state_of(h, saved[0].request_id) == "succeeded")
        done = b.ensure(resource, "c", "quick-child", {"key": "k"})
        assert (done.state, done.attempt, done.run_id) == ("succeeded", 1, saved[0].run_id)
        assert done.output == {"ok": True, "key": "k"}
        assert launch_ids(h) == [saved[0].run_id] == h.run_ids()  # one row, one bundle
    finally:
        gated.go.set()
        a.shutdown(grace=5)
        b.shutdown(grace=5)
        store_b.close()


def test_two_processes_ensuring_the_same_request_keys_at_once_start_one_run_each(
        h: Harness) -> None:
    resource = h.store.resources.apply("probe", "k", {})
    a = ChildWorkflows(h.store, h.ws, h.ws.runs_dir, clock=h.clock,
                       launcher=child_launcher(h.ws, h.store))
    store_b, b = other_process(h)
    keys = [f"c{i}" for i in range(8)]
    try:
        views: dict[str, list[ChildView]] = {k: [] for k in keys}
        for key in keys:
            barrier = threading.Barrier(2)

            def call(children: ChildWorkflows, key: str = key,
                     barrier: threading.Barrier = barrier) -> None:
                barrier.wait(DEADLINE)
                views[key].append(children.ensure(resource, key, "quick-child", {"key": key}))

            threads = [threading.Thread(target=call, args=(c,), daemon=True) for c in (a, b)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(DEADLINE)
        for key in keys:
            assert len(views[key]) == 2
            assert views[key][0].run_id == views[key][1].run_id, key
            assert {v.attempt for v in views[key]} == {1}
        wait_for(lambda: all(r.state == "succeeded"
                             for r in h.store.workflow_requests.list(resource.uid)),
                 what="every child to succeed")
        requests = h.store.workflow_requests.list(resource.uid)
        assert sorted(r.request_key for r in requests) == keys
        assert all(r.attempt == 1 for r in requests)
        run_ids = sorted(str(r.run_id) for r in requests)
        assert launch_ids(h) == run_ids == h.run_ids()  # one launch row and bundle per key
    finally:
        a.shutdown(grace=5)
        b.shutdown(grace=5)
        store_b.close()


class EndsAfterStatus:
    """A launcher whose status read is followed, before its caller acts on it, by the
    run ending in another process: the read is non-terminal, the claim finds `done`."""

    def __init__(self, inner: LocalChildLauncher, h: Harness, held: HeldChildren,
                 key: str) -> None:
        self.inner, self.h, self.held, self.key = inner, h, held, key
        self.seen: list[str | None] = []

    def status(self, run_id: str) -> str | None:
        status = self.inner.status(run_id)
        self.seen.append(status)
        self.held.release(self.key)
        wait_for(lambda: getattr(self.h.store.launches.get(run_id), "status", None) == "done",
                 what="the child to end in the other process")
        return status

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_child_that_ends_between_another_process_s_status_read_and_its_claim(
        h: Harness, held: HeldChildren) -> None:
    """Process B finds a running request whose run it does not hold, reads the row
    (running in A), and A runs it to its end before B's take-over claims it: B's
    ensure answers the settled request; it does not raise "already ended"."""
    resource = h.store.resources.apply("probe", "k", {})
    a = ChildWorkflows(h.store, h.ws, h.ws.runs_dir, clock=h.clock,
                       launcher=child_launcher(h.ws, h.store))
    store_b, b = other_process(h)
    late = EndsAfterStatus(b.launcher, h, held, "c")
    b.launcher = late
    try:
        started = a.ensure(resource, "c", "held-child", {"key": "c"})
        assert (started.state, started.attempt) == ("running", 1)
        held.wait_active(1)
        seen = b.ensure(resource, "c", "held-child", {"key": "c"})
        assert late.seen == ["running"]
        assert (seen.state, seen.attempt, seen.run_id) == ("succeeded", 1, started.run_id)
        assert seen.output == {"key": "c"}
        assert held.starts() == [("c", 1)]  # run once, by A
        assert launch_ids(h) == [started.run_id] == h.run_ids()
    finally:
        held.release("c")
        a.shutdown(grace=5)
        b.shutdown(grace=5)
        store_b.close()


# -- a parent generation change while a child runs -------------------------------------
class Generations:
    """A reconciler asking for child `child:<generation>`, looking at the previous
    generation's request too; a pass may be held at a gate."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, dict[int, tuple[str, str | None, int]]]] = []
        self.hold = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def reconcile(self, ctx: ReconcileContext, r: Resource) -> Result:
        gen = r.generation
        views = {g: ctx.workflows.ensure(f"child:{g}", "held-child", {"key": f"{r.key}-g{g}"})
                 for g in sorted({max(gen - 1, 1), gen})}
        self.seen.append((gen, {g: (v.state, v.run_id, v.attempt) for g, v in views.items()}))
        if self.hold:
            self.entered.set()
            assert self.release.wait(DEADLINE)
        current = views[gen]
        status = {"generation_seen": gen,
                  "children": {str(g): v.state for g, v in views.items()}}
        if current.state == "succeeded":
            return ctx.settled(status, [Condition("Ready", "True", "ChildSucceeded")],
                               workflow_run=current.to_status())
        return ctx.requeue_after(3600, status, [Condition("Ready", "False", "ChildRunning")],
                                 workflow_run=current.to_status())


def test_spec_change_while_a_child_runs(h: Harness, held: HeldChildren) -> None:
    g = Generations()
    with_controllers(h, define_controller("gen", g.reconcile, timeout=None))
    m = h.manager()
    try:
        m.apply("gen", "k", {"v": 1})
        assert m.run_until_idle() == 1
        wait_for(lambda: "k-g1" in held.active(), what="child:1 to run")
        first = request(h, "gen", "k", "child:1")
        assert (first.state, first.attempt) == ("running", 1)

        # The spec changes while child:1 runs: the next pass still finds child:1 under
        # its request key (same run, no second one) and asks for child:2.
        assert m.apply("gen", "k", {"v": 2}).generation == 2
        assert m.run_until_idle() == 1
        gen2, views = g.seen[-1]
        assert gen2 == 2
        assert views[1] == ("running", first.run_id, 1)
        assert views[2][0] == "running"
        second = request(h, "gen", "k", "child:2")
        assert second.run_id not in (None, first.run_id)
        assert launch_ids(h) == sorted([str(first.run_id), str(second.run_id)])
        assert m.children is not None
        with pytest.raises(InputError, match="different workflow or input"):
            m.children.ensure(h.resource("gen", "k"), "child:1", "held-child",
                              {"key": "another input"})
        row = h.store.reconcile_queue.get("gen", "k")
        assert row is not None
        assert row.available_at > h.store.now_ms() + 3000_000  # asleep for an hour

        # child:1, of the old generation, ends: its parent is woken all the same.
        held.release("k-g1")
        wait_for(lambda: state_of(h, first.request_id) == "succeeded")
        row = h.store.reconcile_queue.get("gen", "k")
        assert row is not None
        assert row.available_at <= h.store.now_ms()

        # That pass is held while the spec changes again: its status (from generation
        # 2) must lose the compare-and-swap to the newer resource version.
        g.hold = True
        t = threading.Thread(target=m.reconcile_one, daemon=True)
        t.start()
        assert g.entered.wait(DEADLINE)
        assert g.seen[-1] == (2, {1: ("succeeded", first.run_id, 1),
                                  2: ("running", second.run_id, 1)})
        before = h.resource("gen", "k")
        newer = m.apply("gen", "k", {"v": 3})
        assert newer.generation == 3
        g.hold = False
        g.release.set()
        t.join(DEADLINE)
        after = h.resource("gen", "k")
        assert after.resource_version == newer.resource_version
        assert after.status == before.status  # the stale pass wrote nothing
        assert after.status["controller_status"] == {"generation_seen": 2,
                                                     "children": {"1": "running",
                                                                  "2": "running"}}
        assert "reconcile_conflict" in h.events("gen", "k")

        assert m.run_until_idle() == 1  # generation 3: child:2 is kept, child:3 asked for
        assert g.seen[-1][0] == 3
        third = request(h, "gen", "k", "child:3")
        held.release("k-g2")
        held.release("k-g3")
        # Ready needs child:3 only; child:2's end wakes one more pass of its own, which
        # may come after Ready: wait for both to be seen, not for whichever is first.
        h.drain(m, lambda: is_true(h.resource("gen", "k").status, "Ready", 3) and (
            h.resource("gen", "k").status["controller_status"]["children"].get("2")
            == "succeeded"))
        final = h.resource("gen", "k")
        assert final.status["observed_generation"] == 3
        assert final.status["controller_status"] == {"generation_seen": 3, "children": {
            "2": "succeeded", "3": "succeeded"}}
        assert final.status["workflow_run"]["run_id"] == third.run_id
        requests = {r.request_key: (r.state, r.attempt)
                    for r in h.store.workflow_requests.list(final.uid)}
        assert requests == {"child:1": ("succeeded", 1), "child:2": ("succeeded", 1),
                            "child:3": ("succeeded", 1)}
        assert sorted(held.finished()) == ["k-g1", "k-g2", "k-g3"]  # each ran once
        assert len(h.run_ids()) == 3
    finally:
        g.release.set()
        for key in ("k-g1", "k-g2", "k-g3"):
            held.release(key)


# -- interrupted, and attempt 2 -------------------------------------------------------
def test_attempt_saved_without_a_launch_row_becomes_interrupted_then_attempt_two(
        h: Harness, project: Path) -> None:
    """The process dies between saving the attempt and queueing its row: a later
    process waits out the queue grace (the saver might still be about to queue),
    then records the attempt `interrupted` and starts attempt 2 with a new run id."""
    with_controllers(h, probe_controller(project))
    m = h.manager()
    assert m.children is not None
    m.children.launcher = DyingLauncher(child_launcher(h.ws, h.store))
    m.apply("probe", "k", {"child": "quick-child"})
    assert m.run_until_idle() == 1  # the pass "died" in launch: it fails
    first = request(h, "probe", "k", "child:1")
    assert (first.state, first.attempt) == ("running", 1)
    assert launch_ids(h) == []
    row = h.store.reconcile_queue.get("probe", "k")
    assert row is not None
    assert "Died" in (row.last_error or "")

    h.reopen()  # a new process
    m2 = h.manager()
    h.clock.advance(2)  # the failed pass's backoff
    assert m2.run_until_idle() == 1
    still = request(h, "probe", "k", "child:1")
    assert (still.state, still.attempt, still.run_id) == ("running", 1, first.run_id)
    assert launch_ids(h) == []

    h.clock.advance(QUEUE_GRACE_SECONDS)
    h.drain(m2, lambda: is_true(h.resource("probe", "k").status, "Ready", 1))
    second = request(h, "probe", "k", "child:1")
    assert (second.state, second.attempt) == ("succeeded", 2)
    assert second.run_id not in (None, first.run_id)
    assert launch_ids(h) == [second.run_id] == h.run_ids()  # attempt 1 never ran
    assert h.store.launches.get(str(first.run_id)) is None


# -- the global worker limit ------------------------------------------------------------
def test_at_most_max_workers_children_run_at_once_across_controllers(
        h: Harness, held: HeldChildren) -> None:

    def fan(ctx: ReconcileContext, r: Resource) -> Result:
        view = ctx.workflows.ensure("child", "held-child", {"key": r.key})
        if view.state == "succeeded":
            return ctx.settled({"child": view.state}, [Condition("Ready", "True", "Done")])
        return ctx.requeue_after(3600, {"child": view.state})

    controllers = [define_controller("fan-a", fan), define_controller("fan-b", fan)]
    launcher = child_launcher(h.ws, h.store, max_workers=2)
    children = ChildWorkflows(h.store, h.ws, h.ws.runs_dir, clock=h.clock, launcher=launcher)
    m = ControllerManager(h.store, controllers, clock=h.clock, children=children,
                          config=ManagerConfig())
    h.managers.append(m)
    keys = {"fan-a": ["a1", "a2", "a3"], "fan-b": ["b1", "b2"]}
    try:
        for ctl, ks in keys.items():
            for key in ks:
                m.apply(ctl, key, {})
        assert m.run_until_idle() == 5  # five children asked for at once
        assert len(launch_ids(h)) == 5
        pending = sorted(k for ks in keys.values() for k in ks)
        while pending:
            # As many as the limit allows are running; release one, and the next starts.
            active = held.wait_active(min(2, len(pending)))
            assert len(active) <= 2
            claimed = h.store.launches.query(statuses=["starting", "running"])
            assert len(claimed) <= 2, claimed
            key = sorted(active)[0]
            held.release(key)
            held.wait_finished(key)
            pending.remove(key)
        starts = held.starts()
        assert sorted(k for k, _ in starts) == sorted(k for ks in keys.values() for k in ks)
        assert max(n for _, n in starts) == 2  # two at once, never three
        wait_for(lambda: all(r.state == "succeeded" for r in h.store.workflow_requests.list()))
        assert m.run_until_idle() == 5  # every parent was woken by its child
        assert all(is_true(r.status, "Ready", 1) for r in h.store.resources.list())
    finally:
        for ks in keys.values():
            for key in ks:
                held.release(key)
