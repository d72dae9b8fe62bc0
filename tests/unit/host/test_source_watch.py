"""Source drift of queued launches (`source_drift`) and its live form (`SourceWatch`):
real files, a real watchdog observer, waits on events with a generous deadline."""

from __future__ import annotations

import os
import shutil
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from waiting import DEADLINE, wait_until

from runner.clock import FakeClock
from runner.compiler import Compiler, Diagnostic, WorkflowDefinition, build_catalog
from runner.host.runtime._watch import (
    Drift,
    SourceWatch,
    display_path,
    recorded_files,
    source_drift,
)
from runner.store import LaunchRecord

pytestmark = pytest.mark.timeout(60)

CHILD = """\
    start: work
    nodes:
      work: {compute: "{{ 'v1' }}"}
    exits:
      done: work
"""
PARENT = """\
    start: kid
    includes:
      kid: child
    nodes:
      after: {compute: {call: "./hooks.py:after"}}
    edges:
      - {from: kid.done, to: after}
"""
HOOKS = "def after(ctx):\n    return 1\n"
FLOW = """\
    start: one
    nodes:
      one: {compute: "{{ 1 + 1 }}"}
"""


def _project(root: Path) -> Path:
    folder = root / ".wfrun" / "workflows"
    folder.mkdir(parents=True)
    for name, text in {"child.yaml": CHILD, "parent.yaml": PARENT, "flow.yaml": FLOW}.items():
        (folder / name).write_text(textwrap.dedent(text))
    (folder / "hooks.py").write_text(HOOKS)
    return folder


def _compile(root: Path, name: str) -> WorkflowDefinition:
    catalog = build_catalog("workflows", root, None)
    out = Compiler(catalog).compile_name(name)
    assert not isinstance(out, Diagnostic), out
    assert out.definition is not None, out.diagnostics
    return out.definition


def queued(root: Path, name: str, run_id: str | None = None) -> LaunchRecord:
    """A `queued` launch row exactly as preflight records its source identity."""
    d = _compile(root, name)
    source = {"source": d.source.to_json() if d.source else None,
              "sources": [s.to_json() for s in d.sources]}
    return LaunchRecord(
        run_id=run_id or f"{name}-1", workflow_ref=name, workflow_path=None, source=source,
        definition_digest=d.digest, input_json="{}", options_json=None, status="queued",
        runner_id=None, claim_token=None, claim_expires_at=None, epoch=0,
        affinity_runner_id=None, origin_session_id=None, parent_run_id=None, error_code=None,
        error_message=None, created_at=0, updated_at=0, started_at=None, finished_at=None)


def save(path: Path, text: str) -> None:
    """An editor's save: write a temp file, then rename it over the target."""
    tmp = path.with_name(f".{path.name}.swp")
    tmp.write_text(text)
    os.replace(tmp, path)


# -- source_drift ------------------------------------------------------------------------

def test_an_unchanged_launch_has_no_drift(tmp_path: Path) -> None:
    _project(tmp_path)
    record = queued(tmp_path, "parent")
    names = sorted(Path(p).name for p, _ in recorded_files(record))
    assert names == ["child.yaml", "hooks.py", "parent.yaml"]  # YAML, include, hook
    assert Path(recorded_files(record)[0][0]).name == "parent.yaml"  # its own file first
    assert source_drift(record) is None


def test_an_edited_workflow_file_drifts(tmp_path: Path) -> None:
    folder = _project(tmp_path)
    record = queued(tmp_path, "flow")
    save(folder / "flow.yaml", textwrap.dedent(FLOW).replace("1 + 1", "2 + 2"))

    drift = source_drift(record)

    assert drift is not None
    assert (drift.run_id, Path(drift.path).name, drift.kind) == ("flow-1", "flow.yaml", "edited")
    assert drift.detail == "edited since it was queued"
    assert drift.actual not in (None, drift.expected)
    assert drift.to_json(tmp_path) == {"changed": True, "file": ".wfrun/workflows/flow.yaml",
                                       "detail": "edited since it was queued"}


def test_a_removed_workflow_file_drifts(tmp_path: Path) -> None:
    folder = _project(tmp_path)
    record = queued(tmp_path, "flow")
    (folder / "flow.yaml").unlink()

    drift = source_drift(record)

    assert drift is not None
    assert (drift.kind, drift.detail, drift.actual) == ("removed", "removed", None)
    shutil.rmtree(folder)  # the whole folder gone: still a plain answer
    assert source_drift(record) == drift


@pytest.mark.parametrize("changed", ["child.yaml", "hooks.py"])
def test_an_included_workflow_or_hook_file_change_drifts(tmp_path: Path, changed: str) -> None:
    folder = _project(tmp_path)
    record = queued(tmp_path, "parent")
    path = folder / changed
    save(path, path.read_text() + "\n# edited\n")

    drift = source_drift(record)

    assert drift is not None
    assert (Path(drift.path).name, drift.kind) == (changed, "edited")
    assert drift.display(tmp_path) == f".wfrun/workflows/{changed}"


def test_restoring_the_bytes_clears_the_drift(tmp_path: Path) -> None:
    folder = _project(tmp_path)
    record = queued(tmp_path, "flow")
    original = (folder / "flow.yaml").read_text()
    save(folder / "flow.yaml", original + "# a comment\n")
    assert source_drift(record) is not None  # a hash check: any byte counts
    save(folder / "flow.yaml", original)
    assert source_drift(record) is None


def test_paths_outside_the_project_are_shown_whole(tmp_path: Path) -> None:
    assert display_path("/elsewhere/x.yaml", tmp_path) == "/elsewhere/x.yaml"
    assert display_path(str(tmp_path / "a" / "b.yaml"), tmp_path) == "a/b.yaml"
    assert display_path("/x.yaml", None) == "/x.yaml"


def test_a_launch_without_file_sources_never_drifts(tmp_path: Path) -> None:
    _project(tmp_path)
    record = queued(tmp_path, "flow")
    builtin = LaunchRecord(**{**{f: getattr(record, f) for f in record.__slots__},
                              "source": {"source": {"kind": "builtin", "name": "x",
                                                    "sha256": "0" * 64}, "sources": []}})
    assert recorded_files(builtin) == []
    assert source_drift(builtin) is None


# -- SourceWatch ---------------------------------------------------------------------------

class Seen:
    def __init__(self) -> None:
        self.drifts: list[Drift] = []
        self.cleared: list[str] = []
        self._cond = threading.Condition()

    def drift(self, record: LaunchRecord, drift: Drift) -> None:
        with self._cond:
            self.drifts.append(drift)
            self._cond.notify_all()

    def clear(self, record: LaunchRecord) -> None:
        with self._cond:
            self.cleared.append(record.run_id)
            self._cond.notify_all()

    def wait(self, count: int, *, cleared: int = 0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.drifts) >= count
                                       and len(self.cleared) >= cleared, DEADLINE), \
                (self.drifts, self.cleared)


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def watch(seen: Seen) -> Iterator[SourceWatch]:
    w = SourceWatch(seen.drift, on_clear=seen.clear)
    yield w
    w.stop()


def test_an_edit_to_a_queued_launchs_file_fires_the_callback(tmp_path: Path, seen: Seen,
                                                             watch: SourceWatch) -> None:
    folder = _project(tmp_path)
    flow, parent = queued(tmp_path, "flow"), queued(tmp_path, "parent")
    watch.update([flow, parent])
    watch.start()
    watch.start()  # idempotent
    assert watch.wait_batches(1, DEADLINE)  # the first check of what joined: no drift
    assert watch.folders == {str(folder.resolve())}
    assert seen.drifts == []
    assert watch.drifted == frozenset()

    save(folder / "child.yaml", textwrap.dedent(CHILD).replace("'v1'", "'v2'"))

    seen.wait(1)
    (drift,) = seen.drifts
    assert (drift.run_id, Path(drift.path).name, drift.kind) == ("parent-1", "child.yaml",
                                                                 "edited")
    assert watch.drifted == {"parent-1"}
    assert watch.drift("parent-1") == drift

    save(folder / "child.yaml", textwrap.dedent(CHILD))  # restored: forgotten, no decision
    seen.wait(1, cleared=1)
    assert seen.cleared == ["parent-1"]
    assert watch.drifted == frozenset()


def test_a_launch_that_joins_after_its_file_changed_is_reported_at_once(
        tmp_path: Path, seen: Seen, watch: SourceWatch) -> None:
    folder = _project(tmp_path)
    record = queued(tmp_path, "flow")
    watch.start()
    save(folder / "flow.yaml", "start: one\nnodes:\n  one: {compute: '{{ 3 }}'}\n")

    watch.update([record])

    seen.wait(1)
    assert [d.kind for d in seen.drifts] == ["edited"]
    watch.update([record])  # the same launch again: nothing new to report
    save(folder / "flow.yaml", "start: one\nnodes:\n  one: {compute: '{{ 3 }}'}\n")
    watch.update([])  # claimed or cancelled: it leaves the set and its drift with it
    assert watch.drifted == frozenset()
    assert len(seen.drifts) == 1


def test_a_folder_that_disappears_and_comes_back_is_watched_again(
        tmp_path: Path, seen: Seen, watch: SourceWatch) -> None:
    folder = _project(tmp_path)
    record = queued(tmp_path, "flow")
    original = (folder / "flow.yaml").read_text()
    watch.update([record])
    watch.start()
    assert watch.wait_batches(1, DEADLINE)

    shutil.rmtree(folder)

    seen.wait(1)
    assert seen.drifts[0].kind == "removed"
    wait_until(lambda: str(folder.parent.resolve()) in watch.folders,
               what="the watch to move to the surviving ancestor")
    folder.mkdir()
    wait_until(lambda: str(folder.resolve()) in watch.folders,
               what="the watch to return to the re-created folder")
    (folder / "flow.yaml").write_text(original)
    seen.wait(1, cleared=1)
    assert watch.drifted == frozenset()
    watch.update([record])  # refreshing with nothing new is harmless
    watch.stop()
    watch.stop()  # idempotent
    assert not watch.running


def test_debouncing_runs_on_the_injected_clock(tmp_path: Path, seen: Seen) -> None:
    folder = _project(tmp_path)
    record = queued(tmp_path, "flow")
    clock = FakeClock()
    # An hour of quiet before a check: on a fake clock that wait takes no real time.
    with SourceWatch(seen.drift, clock=clock, debounce=3600, max_delay=7200) as w:
        start = clock.monotonic()
        w.update([record])
        assert w.wait_batches(1, DEADLINE)
        assert clock.monotonic() - start >= 3600
        save(folder / "flow.yaml", "start: one\nnodes:\n  one: {compute: '{{ 4 }}'}\n")
        seen.wait(1)
    assert seen.drifts[0].kind == "edited"


def test_a_session_controller_hands_its_queued_launches_to_its_watch(
        tmp_path: Path, seen: Seen, watch: SourceWatch) -> None:
    from runner.host.runtime._launches import detached_coordinator
    from runner.host.runtime._local import Workspace, store_path
    from runner.host.session import SessionController
    from runner.host.session._reference import JsonlHost
    from runner.store import SqliteStore

    folder = _project(tmp_path)
    ws = Workspace(build_catalog("workflows", tmp_path, None), tmp_path, tmp_path)
    store = SqliteStore(store_path(ws))
    try:
        host = JsonlHost(tmp_path / "session.jsonl", lambda _view: "ok", sid="s-1")
        controller = SessionController(host, detached_coordinator(ws, store), watch=watch)
        watch.start()
        reply = controller.on_tool_call("c-1", "workflow", {"action": "start",
                                                            "workflow": "flow"})
        assert not reply.is_error, reply.content
        run_id = reply.details["runId"]

        save(folder / "flow.yaml", "start: one\nnodes:\n  one: {compute: '{{ 9 }}'}\n")

        seen.wait(1)
        assert [(d.run_id, d.kind) for d in seen.drifts] == [(run_id, "edited")]
        assert watch.drifted == {run_id}
    finally:
        store.close()


def test_reading_a_watched_file_delivers_no_event(tmp_path: Path, seen: Seen,
                                                 watch: SourceWatch) -> None:
    # The host reads a workflow's file at every activation (the compile cache re-hashes
    # it): inotify is not asked for opens and unwritten closes, so a read wakes nobody.
    folder = _project(tmp_path)
    record = queued(tmp_path, "flow")
    delivered: list[str] = []
    handle = watch._handler.on_any_event

    def recording(event: Any) -> None:
        delivered.append(event.event_type)
        handle(event)

    watch._handler.on_any_event = recording  # type: ignore[method-assign]
    watch.update([record])
    watch.start()
    assert watch.wait_batches(1, DEADLINE)
    for _ in range(10):
        (folder / "flow.yaml").read_bytes()
    # Written in place (no rename): the events of the write arrive after the reads'.
    (folder / "flow.yaml").write_text("start: one\nnodes:\n  one: {compute: '{{ 5 }}'}\n")
    seen.wait(1)
    assert [d.kind for d in seen.drifts] == ["edited"]
    assert "modified" in delivered
    assert not {"opened", "closed_no_write"} & set(delivered), delivered
