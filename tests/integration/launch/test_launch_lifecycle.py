"""Launch lifecycle details on the real stack: cancellation racing the bundle's
creation, the shared lease keeper, and the compile cache behind `workflow start`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from launch_it_kit import Project, event_counts
from waiting import wait_until

from runner.compiler import build_catalog
from runner.engine import RunControl
from runner.errors import WfrunError
from runner.host.runtime._local import Workspace
from runner.launch import EngineOptions
from runner.launch._queue import SENT_KEPT
from runner.store import LaunchRecord, SqliteStore
from runner.testing import build_coordinator

TINY = """\
    input: {type: object, properties: {task: {type: string}}}
    start: one
    nodes:
      one: {compute: "{{ 1 }}"}
"""
# The same with an effect: its run is written as it goes (`running` before the node),
# not whole with its ending as a pure run is (ADR 0009, lever 3).
TINY_EFFECT = """\
    input: {type: object, properties: {task: {type: string}}}
    start: one
    nodes:
      one: {action: {shell: ["true"]}}
"""
# Two pure nodes: a boundary between them where a cancel request may be honoured.
PAIR = """\
    start: one
    nodes:
      one: {compute: "{{ 1 }}"}
      two: {compute: "{{ outputs.one + 1 }}"}
    edges:
      - {from: one, to: two}
"""
SLEEPY = """\
    start: nap
    nodes:
      nap:
        action: {shell: ["sh", "-c", "sleep $0; echo napped >> effects.log", "{{ input.s }}"]}
        timeout: 1m
"""
PARENT = """\
    start: child
    includes:
      child: {workflow: ./child.yaml}
    nodes:
      fin: {compute: "{{ 0 }}"}
    edges:
      - {from: child.done, to: fin}
"""
CHILD = """\
    start: leaf
    nodes:
      leaf: {compute: "{{ 'v1' }}"}
    exits:
      done: leaf
"""


class Stack:
    def __init__(self, project: Project, **kwargs: Any) -> None:
        root = project.root
        self.project = project
        self.ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
        self.store = SqliteStore(project.store_path)
        self.coordinator = build_coordinator(
            self.ws, self.store, "plain", runner=kwargs.pop("runner_id", "r1"),
            options=EngineOptions(project_root=root), **kwargs)

    def claimed(self, ref: str, value: Any = None) -> LaunchRecord:
        record = self.coordinator.prepare(ref, {} if value is None else value)
        claimed = self.coordinator.claim_next(None)
        assert claimed is not None
        assert claimed.run_id == record.run_id
        return claimed


@pytest.fixture
def project(tmp_path: Path) -> Project:
    proj = Project(tmp_path / "proj")
    for name, text in (("tiny", TINY), ("tiny_effect", TINY_EFFECT), ("pair", PAIR),
                       ("sleepy", SLEEPY), ("parent", PARENT), ("child", CHILD)):
        proj.write_workflow(name, text)
    return proj


class _Store:
    def __init__(self, inner: SqliteStore, launches: Any) -> None:
        self._inner, self.launches = inner, launches

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


# The moments of the bundle's creation: before the folder exists (the source
# re-checked), after the folder (`after_bundle_created`), after workflow.json and the
# first manifest (`after_manifest_written`), and after run_started (`during_starting`).
@pytest.mark.parametrize("moment", ["after_claim", "after_bundle_created",
                                    "after_manifest_written", "during_starting"])
def test_a_cancel_while_starting_is_asked_of_the_holder_and_stops_the_run_before_a_node(
        project: Project, moment: str) -> None:
    """A `starting` launch with a live holder is cancelled by request, as a `running`
    one is (the store refuses to overrule its holder, ADR 0009 lever 3); a run with
    effects honours it before its first node: cancelled, its bundle says so, no node
    ever started and nothing failed."""
    stack = Stack(project)
    record = stack.claimed("tiny_effect")
    answers: list[str] = []

    def cancel_at(point: str) -> None:
        if point == moment:  # as `workflow cancel` from another process would
            answers.append(stack.coordinator.cancel(record.run_id).status)

    runner = build_coordinator(stack.ws, stack.store, "plain", runner="r1", crash=cancel_at,
                               options=EngineOptions(project_root=project.root,
                                                     crash_point=cancel_at))
    outcome = runner.execute(record)
    assert answers == ["starting"]  # asked, not overruled
    assert outcome is not None
    assert outcome.status == "cancelled"
    assert stack.store.launches.get(record.run_id).status == "cancelled"  # type: ignore[union-attr]
    assert project.manifest(record.run_id)["status"] == "cancelled"  # type: ignore[index]
    counts = event_counts(project.trace(record.run_id))
    assert counts[("run_started", None)] == 1
    assert not [k for k in counts if k[0] == "node_started"]
    events = [e.type for e in stack.store.run_events.read(run_id=record.run_id)]
    assert "launch_failed" not in events


# -- a pure run, written whole with its ending (ADR 0009, lever 3) -------------------
class _Counting:
    """The launch queue, counting the fence's reads and `running` transitions."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.fence_reads, self.marked = inner, 0, 0

    def claim_left(self, run_id: str, token: str) -> Any:
        self.fence_reads += 1
        return self.inner.claim_left(run_id, token)

    def mark_running(self, *args: Any, **kwargs: Any) -> Any:
        self.marked += 1
        return self.inner.mark_running(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_pure_run_is_written_whole_by_its_ending_without_a_running_commit(
        project: Project) -> None:
    stack = Stack(project)
    record = stack.claimed("tiny", {"task": "t"})
    launches = _Counting(stack.store.launches)
    runner = build_coordinator(stack.ws, _Store(stack.store, launches),  # type: ignore[arg-type]
                               "plain", runner="r1",
                               options=EngineOptions(project_root=project.root))
    outcome = runner.execute(record)
    assert outcome is not None
    assert (outcome.status, outcome.final_output) == ("completed", 1)
    # One fence read (before the folder): it learnt the lease, and while a third of it
    # is left nothing but this holder changes the row, so the fence before the files
    # answers from it. No `running` commit.
    assert (launches.fence_reads, launches.marked) == (1, 0)
    row = stack.store.launches.get(record.run_id)
    assert row is not None
    assert (row.status, row.input_cleared, row.started_at is not None) == ("done", True, True)
    # The row went through `running` in the ending's transaction: valid steps only.
    events = [e.type for e in stack.store.run_events.read(run_id=record.run_id)]
    assert events[-2:] == ["launch.running", "launch.done"]
    assert project.manifest(record.run_id)["status"] == "completed"  # type: ignore[index]
    assert [e["type"] for e in project.trace(record.run_id)] == [
        "run_started", "node_started", "node_finished", "run_completed"]


def test_a_run_claimed_here_is_fenced_from_its_claim_until_too_many_claims_wait(
        project: Project) -> None:
    """A launch this runner claimed (`claim_next`) begins with its fence answering from
    the claim's own committed lease: not one read of the row. The send times of claims
    never begun (released at a host's stop) are forgotten once SENT_KEPT wait at a
    begin: such a run's fence reads the row once, as for a claim made elsewhere."""
    stack = Stack(project)
    launches = _Counting(stack.store.launches)
    runner = build_coordinator(stack.ws, _Store(stack.store, launches),  # type: ignore[arg-type]
                               "plain", runner="r1",
                               options=EngineOptions(project_root=project.root))
    for _ in range(SENT_KEPT + 1):
        runner.prepare("tiny", {"task": "t"})
    claimed = [runner.claim_next(None) for _ in range(SENT_KEPT + 1)]
    for record, reads in ((claimed[0], 0), (claimed[1], 1)):
        assert record is not None
        outcome = runner.execute(record)
        assert outcome is not None
        assert outcome.status == "completed"
        assert launches.fence_reads == reads


@pytest.mark.parametrize(("ref", "sealing", "before"), [("tiny", "after_whole_written", "starting"),
                                                      ("tiny_effect", "before_seal", "running")])
def test_a_folder_runs_ending_commits_after_its_seal_before_the_outcome_is_recorded(
        project: Project, ref: str, sealing: str, before: str) -> None:
    """A folder shares no transaction with the store, so its ending is a commit of its
    own, which the launch makes once the engine hands the outcome back: the bundle is
    sealed (read-only) and unlocked by then, and the row is ended before
    `before_outcome_recorded`, as a database bundle's is (it commits in the seal)."""
    stack = Stack(project)
    record = stack.claimed(ref, {"task": "t"})
    seen: dict[str, tuple[str, dict[str, int]]] = {}

    def look(point: str) -> None:
        if point in (sealing, "before_outcome_recorded"):
            row = stack.store.launches.get(record.run_id)
            assert row is not None
            seen[point] = (row.status, _files(project.runs_dir / record.run_id))

    runner = build_coordinator(stack.ws, stack.store, "plain", runner="r1", crash=look,
                               options=EngineOptions(project_root=project.root,
                                                     crash_point=look))
    outcome = runner.execute(record)
    assert outcome is not None
    assert outcome.status == "completed"
    status, _ = seen[sealing]
    assert status == before  # the seal's files come first, the ending's commit after
    status, files = seen["before_outcome_recorded"]
    assert status == "done"
    assert files == dict.fromkeys(("manifest.json", "state.json", "trace.jsonl",
                                   "workflow.json"), 0o400)
    events = [e.type for e in stack.store.run_events.read(run_id=record.run_id)]
    assert events.count("launch.done") == 1


def test_an_exception_after_a_folder_runs_seal_records_the_ending_it_sealed(
        project: Project) -> None:
    """The bundle says how the run ended (written whole, read-only) when the runner
    raises before its launch commits that ending: the crash boundary records it (done),
    it does not fail a launch whose bundle completed."""
    stack = Stack(project)
    record = stack.claimed("tiny", {"task": "t"})

    def bug_at(point: str) -> None:
        if point == "after_whole_written":
            raise RuntimeError("a bug right after the seal")

    runner = build_coordinator(stack.ws, stack.store, "plain", runner="r1",
                               options=EngineOptions(project_root=project.root,
                                                     crash_point=bug_at))
    assert runner.execute(record) is None  # the run path raised: no outcome
    assert _agrees(stack, project, record.run_id) == "completed"
    events = [e.type for e in stack.store.run_events.read(run_id=record.run_id)]
    assert events[-2:] == ["launch.running", "launch.done"]


# A pure run whose first node's output (over 4 KiB) goes to an artifact: that write is
# one a run written whole does not hold, so from there it is written the usual way.
SPILLS = """\
    start: long
    nodes:
      long: {compute: "{{ 'x' * 5000 }}"}
      short: {compute: "{{ outputs.long | length }}"}
    edges:
      - {from: long, to: short}
"""


def _files(folder: Path) -> dict[str, int]:
    """The bundle's files (not folders) and their modes."""
    return {p.name: p.stat().st_mode & 0o777 for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_pure_run_writes_no_file_before_its_seal_then_each_once_read_only(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """ADR 0013: its snapshot and first manifest are held with the rest, so until its
    seal the bundle is an empty folder; at the seal each file is created once, born
    read-only (no chmod), and only the trace is synced (the manifest, never written
    before, is rebuilt from the trace if a power loss takes it)."""
    stack = Stack(project)
    seen: dict[str, dict[str, int]] = {}
    watched: list[str] = []

    def look(point: str) -> None:
        folder = project.runs_dir / watched[-1]
        if folder.is_dir():
            seen.setdefault(point, _files(folder))

    synced: list[str] = []
    chmods: list[str] = []
    real_fsync, real_chmod, real_fchmod = os.fsync, os.chmod, os.fchmod

    def fsync(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def chmod(path: Any, mode: int, *args: Any, **kwargs: Any) -> None:
        chmods.append(os.path.basename(os.fspath(path)))
        real_chmod(path, mode, *args, **kwargs)

    def fchmod(fd: int, mode: int) -> None:
        chmods.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fchmod(fd, mode)

    runner = build_coordinator(stack.ws, stack.store, "plain", runner="r1", crash=look,
                               options=EngineOptions(project_root=project.root,
                                                     crash_point=look))
    first = stack.claimed("pair")
    watched.append(first.run_id)
    runner.execute(first)  # stores the definition's shared snapshot (synced, once)
    seen.clear()
    record = stack.claimed("pair")
    watched.append(record.run_id)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "chmod", chmod)
    monkeypatch.setattr(os, "fchmod", fchmod)
    outcome = runner.execute(record)
    monkeypatch.undo()
    assert outcome is not None
    assert (outcome.status, outcome.final_output) == ("completed", 2)
    for point in ("after_bundle_created", "after_manifest_written", "during_starting",
                  "between_nodes", "before_seal"):
        assert seen[point] == {}, point  # nothing on disk yet
    names = ("manifest.json", "state.json", "trace.jsonl", "workflow.json")
    assert seen["after_whole_written"] == dict.fromkeys(names, 0o400)
    assert synced == ["trace.jsonl"]
    assert chmods == []
    assert project.manifest(record.run_id)["status"] == "completed"  # type: ignore[index]
    assert [e["type"] for e in project.trace(record.run_id)] == [
        "run_started", "node_started", "node_finished", "node_started", "node_finished",
        "run_completed"]


def test_a_pure_run_that_writes_an_artifact_is_written_the_usual_way_from_there(
        project: Project) -> None:
    """Its held snapshot and first manifest go out before its `run_started` and its
    launch's `running`, as for a run not written whole; the rest as it goes."""
    project.write_workflow("spills", SPILLS)
    stack = Stack(project)
    record = stack.claimed("spills")
    launches = _Counting(stack.store.launches)
    seen: dict[str, Any] = {}

    def look(point: str) -> None:
        if point == "between_nodes" and point not in seen:  # after `long`, its artifact
            folder = project.runs_dir / record.run_id
            seen[point] = (sorted(_files(folder)), project.manifest(record.run_id),
                           [e["type"] for e in project.trace(record.run_id)],
                           launches.marked)

    runner = build_coordinator(stack.ws, _Store(stack.store, launches),  # type: ignore[arg-type]
                               "plain", runner="r1", crash=look,
                               options=EngineOptions(project_root=project.root,
                                                     crash_point=look))
    outcome = runner.execute(record)
    assert outcome is not None
    assert (outcome.status, outcome.final_output) == ("completed", 5000)
    files, manifest, types, marked = seen["between_nodes"]
    assert files == ["manifest.json", "trace.jsonl", "workflow.json"]
    assert (manifest["status"], manifest["run_id"]) == ("running", record.run_id)
    # `long`'s end went in one append with `short`'s start.
    assert types == ["run_started", "node_started", "node_finished", "node_started"]
    assert marked == 1  # `running` committed before the nodes' events were written
    assert project.manifest(record.run_id)["status"] == "completed"  # type: ignore[index]
    folder = project.runs_dir / record.run_id
    assert set(_files(folder).values()) == {0o400}
    assert (folder / "artifacts").is_dir()


def _agrees(stack: Stack, project: Project, run_id: str) -> str:
    """The launch's ending and its bundle's say the same: it never ran (no bundle, or
    one that never started), or it ended once, recorded both places."""
    row = stack.store.launches.get(run_id)
    assert row is not None
    bundles = project.bundles()
    manifest = project.manifest(run_id) if bundles else None
    if row.status == "cancelled" and manifest is None:
        return "never ran"
    assert manifest is not None
    assert (row.status, manifest["status"]) in (("done", "completed"),
                                                ("cancelled", "cancelled"))
    ends = [e["type"] for e in project.trace(run_id) if e["type"].startswith("run_")
            and e["type"] != "run_started"]
    assert len(ends) == 1  # ended once
    return manifest["status"]


@pytest.mark.parametrize("moment", ["after_claim", "after_bundle_created",
                                    "after_manifest_written", "during_starting",
                                    "before_executor_release", "after_trace_append",
                                    "before_seal", "after_whole_written"])
def test_a_cancel_racing_a_pure_run_is_asked_of_its_holder_and_never_lost(
        project: Project, moment: str) -> None:
    """A run written whole syncs its files before its ending's transaction; a cancel
    of its `starting` launch is asked of its holder (the store refuses to overrule a
    live lease), so no cancel can win between the files and the commit. The request
    lands: the run ended as it was going to, or cancelled, recorded the same in its
    launch and its bundle, never both, never lost."""
    stack = Stack(project)
    answers: list[str] = []

    def cancel_at(point: str) -> None:
        if point == moment and not answers:  # as `workflow cancel` from elsewhere would
            answers.append(stack.coordinator.cancel(record.run_id).status)

    runner = build_coordinator(stack.ws, stack.store, "plain", runner="r1", crash=cancel_at,
                               options=EngineOptions(project_root=project.root,
                                                     crash_point=cancel_at))
    record = stack.claimed("pair")
    outcome = runner.execute(record)
    assert answers == ["starting"]  # asked of its live holder, never flipped
    assert outcome is not None
    assert _agrees(stack, project, record.run_id) == outcome.status
    events = [e.type for e in stack.store.run_events.read(run_id=record.run_id)]
    assert "cancel_requested" in events
    assert "launch_failed" not in events


def test_a_cancel_its_holder_reads_in_time_ends_a_pure_run_cancelled_in_both_places(
        project: Project) -> None:
    """The holder's lease keeper reads the request while the run is still going: it
    stops at its next boundary and is written whole as cancelled."""
    stack = Stack(project)
    control = RunControl()

    def cancel_at(point: str) -> None:
        if point == "between_nodes":
            assert stack.coordinator.cancel(record.run_id).status == "starting"
            wait_until(lambda: control.stopping)  # the keeper's next poll honours it

    runner = build_coordinator(stack.ws, stack.store, "plain", runner="r1", crash=cancel_at,
                               options=EngineOptions(project_root=project.root,
                                                     crash_point=cancel_at))
    record = stack.claimed("pair")
    outcome = runner.execute(record, control=control)
    assert outcome is not None
    assert outcome.status == "cancelled"
    assert _agrees(stack, project, record.run_id) == "cancelled"
    counts = event_counts(project.trace(record.run_id))
    assert counts[("node_started", "one")] == 1
    assert ("node_finished", "two") not in counts  # stopped at the boundary


def test_a_cancel_after_a_pure_runs_holder_died_records_how_it_ended(
        project: Project) -> None:
    """Killed between its files and its ending's commit, a pure run leaves a
    `starting` row whose bundle has ended; once the lease is gone, a cancel records
    that ending, not a cancel (and a live lease meanwhile makes it a request)."""
    stack = Stack(project, lease_seconds=1.0)

    class Killed(BaseException):
        pass

    def die_at(point: str) -> None:
        if point == "after_whole_written":
            raise Killed

    runner = build_coordinator(stack.ws, stack.store, "plain", runner="r1", crash=die_at,
                               lease_seconds=1.0,
                               options=EngineOptions(project_root=project.root,
                                                     crash_point=die_at))
    record = stack.claimed("pair")
    with pytest.raises(Killed):
        runner.execute(record)
    assert stack.store.launches.get(record.run_id).status == "starting"  # type: ignore[union-attr]
    wait_until(lambda: not stack.store.launches.get(record.run_id).lease_live(  # type: ignore[union-attr]
        stack.store.now_ms()))
    with pytest.raises(WfrunError, match="already ended"):
        stack.coordinator.cancel(record.run_id)
    assert _agrees(stack, project, record.run_id) == "completed"


# -- the lease keeper ----------------------------------------------------------------
def _keepers(runner_id: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"wfrun-lease-{runner_id}"]


def test_the_keeper_renews_a_short_lease_through_a_long_node(project: Project) -> None:
    stack = Stack(project, runner_id="r-keep", lease_seconds=1.5, renew_every=0.2)
    record = stack.claimed("sleepy", {"s": "3.5"})
    outcome = stack.coordinator.execute(record)
    # 3.5 s of node on a 1.5 s lease: only renewals kept the fence passing.
    assert outcome is not None
    assert outcome.status == "completed"
    assert stack.store.launches.get(record.run_id).status == "done"  # type: ignore[union-attr]


def test_a_cancel_request_from_another_process_stops_a_running_run(project: Project) -> None:
    stack = Stack(project, runner_id="r-keep")
    other = Stack(project, runner_id="r-other")  # its own store connection, like a CLI
    record = stack.claimed("sleepy", {"s": "20"})
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.update(
        out=stack.coordinator.execute(record)))
    t0 = time.monotonic()
    worker.start()
    time.sleep(0.3)
    assert other.coordinator.cancel(record.run_id).status == "running"  # a request
    worker.join(timeout=15)
    assert not worker.is_alive()
    assert time.monotonic() - t0 < 10  # the 20 s nap was stopped
    assert result["out"].status == "cancelled"
    assert stack.store.launches.get(record.run_id).status == "cancelled"  # type: ignore[union-attr]
    assert not project.effects()


def test_one_keeper_thread_serves_every_run_of_a_coordinator(project: Project) -> None:
    runner_id = f"r-solo-{uuid.uuid4().hex[:8]}"
    stack = Stack(project, runner_id=runner_id)
    for _ in range(5):
        outcome = stack.coordinator.execute(stack.claimed("tiny"))
        assert outcome is not None
        assert outcome.status == "completed"
        assert len(_keepers(runner_id)) <= 1
    assert len(_keepers(runner_id)) == 1  # lingers for the next run instead of a thread per run


# -- the compile cache ---------------------------------------------------------------
def test_the_compile_cache_reuses_only_byte_identical_sources(project: Project) -> None:
    stack = Stack(project)
    ws = stack.ws
    first, _ = ws.compile("tiny")
    again, _ = ws.compile("tiny")
    assert again is first  # a hit: nothing was re-parsed
    # Same size, same mtime, different bytes: the hash still sees it.
    path = project.root / ".wfrun" / "workflows" / "tiny.yaml"
    st = path.stat()
    path.write_text(path.read_text().replace("{{ 1 }}", "{{ 2 }}"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size
    changed, _ = ws.compile("tiny")
    assert changed.digest != first.digest
    # A path ref through a symlink: pointed at another file, it is that file now
    # (the cache compares the file it resolves to, not the name).
    other = project.root / "other.yaml"
    other.write_text(path.read_text().replace("{{ 2 }}", "{{ 3 }}"))
    link = project.root / "link.yaml"
    link.symlink_to(path)
    via_link, _ = ws.compile(str(link))
    assert via_link.digest == changed.digest
    assert ws.compile(str(link))[0] is via_link
    link.unlink()
    link.symlink_to(other)
    retargeted, _ = ws.compile(str(link))
    assert retargeted.digest not in (changed.digest, first.digest)
    path.unlink()
    with pytest.raises(WfrunError):  # not the cached definition
        ws.compile("tiny")


def test_an_included_file_changed_after_start_fails_activation(project: Project) -> None:
    stack = Stack(project)
    record = stack.claimed("parent")
    child = project.root / ".wfrun" / "workflows" / "child.yaml"
    child.write_text(child.read_text().replace("v1", "v2"))
    assert stack.coordinator.execute(record) is None
    failed = stack.store.launches.get(record.run_id)
    assert failed is not None
    assert (failed.status, failed.error_code) == ("failed", "source_changed")
    assert project.bundles() == []


def test_an_input_the_store_refuses_is_a_preflight_error_in_the_tool_call(
        project: Project) -> None:
    """A 2 MiB input passes the schema but not the store's 1 MiB bound: the tool call
    answers with an error (it used to raise out of the host's turn) and stores nothing."""
    from runner.host.session import SessionController
    from runner.host.session._reference import JsonlHost

    stack = Stack(project)
    controller = SessionController(JsonlHost(project.session_log, lambda _v: "ok"),
                                   stack.coordinator)
    reply = controller.on_tool_call("c1", "workflow", {
        "action": "start", "workflow": "tiny", "input": {"task": "x" * (2 * 1024 * 1024)}})
    assert reply.is_error
    assert reply.details["code"] == "input_invalid"
    assert "limit" in reply.content
    assert stack.store.launches.query() == []


# -- a claim lost while the run is running ---------------------------------------------
TWO_STEPS = """\
    start: one
    nodes:
      one: {action: {shell: ["sh", "-c", "echo one >> effects.log"]}}
      two: {action: {shell: ["sh", "-c", "echo two >> effects.log"]}}
    edges:
      - {from: one, to: two}
"""
LONG_NAP = """\
    start: nap
    nodes:
      nap:
        action: {shell: ["sh", "-c", "sleep 20; echo napped >> effects.log"]}
        timeout: 1m
"""


def _steal(project: Project, run_id: str) -> None:
    """Another runner takes the claim over (as after a lease it missed)."""
    thief = SqliteStore(project.store_path)
    try:
        conn = sqlite3.connect(project.store_path)
        with conn:
            conn.execute("UPDATE workflow_run_queue SET claim_expires_at = 1 WHERE run_id = ?",
                         (run_id,))
        conn.close()
        taken = thief.launches.claim(run_id, runner_id="thief")
        assert isinstance(taken, LaunchRecord)
    finally:
        thief.close()


def test_the_fence_stops_a_run_whose_claim_was_taken_between_nodes(project: Project) -> None:
    project.write_workflow("two", TWO_STEPS)
    # The keeper is kept out of it (it would renew, and notice, only after 60 s).
    stack = Stack(project, runner_id="r-fence", lease_seconds=1.5, renew_every=60)
    record = stack.claimed("two")

    def steal_between_nodes(point: str) -> None:
        if point == "between_nodes":
            _steal(project, record.run_id)
            # A stall past the window in which the fence may answer from its cache
            # (the last third of the lease): the next write must ask the store.
            time.sleep(1.2)

    stack.coordinator.options.crash_point = steal_between_nodes
    assert stack.coordinator.execute(record) is None  # it let go
    assert (project.root / "effects.log").read_text().splitlines() == ["one"]
    row = stack.store.launches.get(record.run_id)
    assert row is not None
    assert (row.status, row.runner_id) == ("running", "thief")  # the winner decides


def test_a_lost_renewal_stops_a_long_node_before_its_next_write(project: Project) -> None:
    """Only the keeper can notice this: the fence is asked at writes, and the nap
    writes nothing for 20 s."""
    project.write_workflow("longnap", LONG_NAP)
    stack = Stack(project, runner_id="r-keeper", lease_seconds=1.5, renew_every=0.2)
    record = stack.claimed("longnap")
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.update(
        out=stack.coordinator.execute(record)))
    t0 = time.monotonic()
    worker.start()
    end = time.monotonic() + 30
    while "node_started" not in [e.get("type") for e in project.trace(record.run_id) or []]:
        assert time.monotonic() < end
        time.sleep(0.02)
    _steal(project, record.run_id)
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert time.monotonic() - t0 < 15  # the 20 s nap was stopped, not waited out
    assert result["out"] is None or result["out"].parked
    assert not (project.root / "effects.log").exists()
    row = stack.store.launches.get(record.run_id)
    assert row is not None
    assert row.runner_id == "thief"


# -- any exception on the run path ends the launch and the bundle together -----------
NUL_ARGV = """\
    input: {type: object, properties: {s: {type: string}}}
    start: echo
    nodes:
      echo: {action: {shell: ["echo", "{{ input.s }}"]}}
"""
NOTIFYING = """\
    start: tell
    nodes:
      tell: {notify: {kind: progress, message: "half way"}}
"""


class _RaisingSink:
    def emit(self, *_args: Any) -> None:
        raise RuntimeError("the outbox is gone")


@pytest.mark.parametrize(("workflow", "text", "value"), [
    ("nul", NUL_ARGV, {"s": "a\u0000b"}),  # a NUL byte reaching argv
    ("notifying", NOTIFYING, {}),  # a notification sink that raises
])
def test_an_exception_while_running_fails_the_launch_and_its_bundle_at_once(
        project: Project, workflow: str, text: str, value: Any) -> None:
    """Issue 9 defect 4: the launch stayed `running` for ever and re-crashed at every
    lease expiry (epoch 2, 3, 4 ...)."""
    project.write_workflow(workflow, text)
    stack = Stack(project)
    stack.coordinator.options.notifications = _RaisingSink()  # type: ignore[assignment]
    record = stack.claimed(workflow, value)
    stack.coordinator.execute(record)
    row = stack.store.launches.get(record.run_id)
    assert row is not None
    assert (row.status, row.error_code, row.epoch) == ("failed", "run_failed", 1)
    assert project.manifest(record.run_id)["status"] == "failed"  # type: ignore[index]
    assert stack.coordinator.claim_next(None) is None  # nothing left to re-crash


def test_a_running_launch_is_fenced_from_its_lease_end_without_asking_the_store(
    project: Project
) -> None:
    """From its claim, then `mark_running`, the fence answers from the lease each answer
    showed (on the engine's clock, a third of the lease kept in hand): a run asks the
    store nothing per node while its lease is young; a stale one asks (the steal test
    above, and tests/integration/launch/test_run_statements.py)."""
    project.write_workflow("two", TWO_STEPS)
    stack = Stack(project, runner_id="r-local", lease_seconds=60, renew_every=20)
    record = stack.claimed("two")
    launches, store = stack.store.launches, stack.store
    # The fence asks the coordinator's launch book, whose methods are the queue's own,
    # taken when it was built: spied there.
    book = stack.coordinator.book
    asked: list[str] = []
    clock_reads: list[int] = []
    real, real_now = book.claim_left, store.now_ms

    def counting(run_id: str, token: str) -> Any:
        current = launches.get(run_id)
        asked.append(current.status if current is not None else "gone")
        return real(run_id, token)

    def now_ms() -> int:  # on Postgres a round trip per call
        clock_reads.append(1)
        return real_now()

    setattr(book, "claim_left", counting)  # noqa: B010  (instrumented, still real)
    setattr(store, "now_ms", now_ms)  # noqa: B010
    outcome = stack.coordinator.execute(record)
    assert outcome is not None
    assert outcome.status == "completed"
    assert (project.root / "effects.log").read_text().splitlines() == ["one", "two"]
    # Never asked: the claim this runner committed showed a young lease (`Claims.sent`),
    # and with a live lease only its holder changes a claimed row (a cancel is asked
    # of it), so the folder, `run_started` and every later write answer from it.
    assert asked == []
    assert clock_reads == []  # nor read the store's clock to judge the lease
