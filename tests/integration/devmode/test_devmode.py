"""`wfrun dev` re-validation (DESIGN §8), driven by real saves on a real file system."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from devkit import DIGEST, Dev, digest_of, project_catalog
from waiting import DEADLINE

from runner.host.runtime import _devmode as devmode
from runner.host.runtime._devmode import DEBOUNCE
from runner.host.runtime._launches import detached_coordinator
from runner.host.runtime._local import Workspace
from runner.store import SqliteStore

FLOW = """\
    start: one
    nodes:
      one: {compute: "{{ 1 + 1 }}"}
"""
BROKEN = """\
    start: one
    nodes:
      one: {compute: "{{ 1 + 1 }}", colour: red}
"""
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
      after: {compute: "{{ outputs.kid.output }}"}
    edges:
      - {from: kid.done, to: after}
"""
MakeDev = Callable[..., Dev]


def ok(name: str) -> Callable[[str, str], bool]:
    return lambda kind, text: kind == "ok" and text.startswith(f"ok {name} ")


def test_a_broken_save_shows_its_diagnostic_and_the_fix_shows_ok(make_dev: MakeDev) -> None:
    dev = make_dev({})
    mark = dev.mark()

    path = dev.save("flow.yaml", BROKEN)

    _kind, text = dev.wait_line(mark, lambda k, _t: k == "error")
    assert f"{path.as_posix()}:3:" in text  # file:line:col of the bad key
    assert "error[unknown-key]" in text
    assert not dev.dev.state.results["flow"].valid

    mark = dev.mark()
    dev.save("flow.yaml", FLOW)
    _, text = dev.wait_line(mark, ok("flow"))

    assert text == f"ok flow {digest_of(path, dev.root)}"
    assert DIGEST.fullmatch(text.split()[-1])
    assert dev.dev.state.results["flow"].valid


def test_editing_an_included_child_revalidates_its_parent(make_dev: MakeDev) -> None:
    dev = make_dev({"child.yaml": CHILD, "parent.yaml": PARENT})
    before = dev.dev.state.results["parent"].definition
    assert before is not None
    mark = dev.mark()

    dev.save("child.yaml", CHILD.replace("'v1'", "'v2'"))

    _, text = dev.wait_line(mark, ok("parent"))
    assert text == f"ok parent {digest_of(dev.folder / 'parent.yaml', dev.root)}"
    assert text != f"ok parent {before.digest}"  # the child is part of the parent's digest
    assert dev.wait_line(mark, ok("child"))

    mark = dev.mark()
    dev.save("child.yaml", CHILD.replace("start: work", "start: nowhere"))
    _, text = dev.wait_line(mark, lambda k, t: k == "error" and "parent.yaml" in t)
    assert "include-invalid" in text


def test_a_deleted_file_leaves_the_catalog(make_dev: MakeDev) -> None:
    dev = make_dev({"flow.yaml": FLOW, "child.yaml": CHILD, "parent.yaml": PARENT})
    mark = dev.mark()

    (dev.folder / "child.yaml").unlink()

    _, text = dev.wait_line(mark, lambda k, _t: k == "removed")
    assert text == "child removed from the catalog"
    _, text = dev.wait_line(mark, lambda k, t: k == "error" and "parent.yaml" in t)
    assert "workflow-not-found" in text
    assert "child" not in dev.dev.state.results
    assert "child" not in dev.dev.catalog.names()
    assert dev.dev.state.results["flow"].valid  # untouched
    assert not any(t.startswith("ok flow") for _, t in dev.since(mark))


def test_a_workflows_folder_created_after_start_is_picked_up(make_dev: MakeDev) -> None:
    dev = make_dev()  # .wfrun/ exists, .wfrun/workflows/ does not yet
    assert dev.dev.state.results == {}
    batches = dev.dev.state.batches

    dev.folder.mkdir()
    assert dev.dev.wait_batches(batches + 1, timeout=DEADLINE)
    mark = dev.mark()
    dev.save("late.yaml", FLOW)

    _, text = dev.wait_line(mark, ok("late"))
    assert text == f"ok late {digest_of(dev.folder / 'late.yaml', dev.root)}"
    assert dev.dev.catalog.names() == ["late"]


def test_changes_that_keep_coming_within_the_window_are_one_batch(
        make_dev: MakeDev, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window is quiet time, not a fixed delay: changes the watcher hands over
    spread out (a loaded machine) but each within the window of the last make one
    batch, even when together they take longer than the window."""
    window = 1.0
    monkeypatch.setattr(devmode, "DEBOUNCE", window)
    monkeypatch.setattr(devmode, "MAX_DEBOUNCE", 30.0)
    dev = make_dev({"flow.yaml": FLOW})
    batches = dev.settle(quiet=2 * window)
    path = dev.folder / "flow.yaml"
    t0 = time.monotonic()
    for _ in range(6):  # 2 s of changes, 0.4 s apart
        dev.dev.touch(path)
        time.sleep(0.4)
    assert time.monotonic() - t0 > window
    assert dev.dev.wait_batches(batches + 1, timeout=DEADLINE)
    assert dev.settle(quiet=2 * window) == batches + 1


def test_a_burst_of_saves_is_debounced_into_one_batch(make_dev: MakeDev,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The shipped window (DEBOUNCE, 30 ms) is shorter than a preemption on a loaded
    # machine; the debouncing itself is what is tested, on a window the burst fits in.
    window = max(DEBOUNCE, 0.5)
    monkeypatch.setattr(devmode, "DEBOUNCE", window)
    dev = make_dev({"flow.yaml": FLOW})
    batches = dev.settle(quiet=2 * window)
    mark = dev.mark()

    t0 = time.monotonic()
    for i in range(6):  # an editor's save storm: temp write, rename, chmod
        path = dev.save("flow.yaml", FLOW.replace("1 + 1", f"1 + {i}"))
        os.chmod(path, 0o644)
    burst = time.monotonic() - t0
    assert burst < window, "the burst itself must fit in the debounce window"

    assert dev.dev.wait_batches(batches + 1, timeout=DEADLINE)
    assert dev.settle(quiet=2 * window) == batches + 1  # and no second batch
    lines = dev.since(mark)
    assert lines == [("ok", f"ok flow {digest_of(path, dev.root)}")]  # the last save only


def test_run_reruns_the_workflow_after_each_valid_save(make_dev: MakeDev) -> None:
    dev = make_dev({"flow.yaml": FLOW}, run="flow")
    assert dev.since(0)[-1][0] == "note"  # starting does not run anything
    mark = dev.mark()

    dev.save("flow.yaml", FLOW.replace("1 + 1", "40 + 2"))

    _, text = dev.wait_line(mark, lambda k, _t: k == "run")
    assert text.startswith("run flow completed (flow-")
    run_id = text.split("(")[1].rstrip(")")
    assert (dev.root / ".wfrun" / "runs" / run_id / "manifest.json").is_file()
    # Through the launch queue like every other run: its launch row ended done.
    store = SqliteStore(dev.root / ".wfrun" / "state" / "store.sqlite3")
    try:
        record = store.launches.get(run_id)
        assert record is not None
        assert (record.status, record.ending) == ("done", "completed")
    finally:
        store.close()

    mark = dev.mark()
    dev.save("flow.yaml", BROKEN)
    dev.wait_line(mark, lambda k, _t: k == "error")
    dev.settle()
    assert not any(k == "run" for k, _ in dev.since(mark))  # an invalid save runs nothing

    mark = dev.mark()
    dev.save("flow.yaml", FLOW.replace("{{ 1 + 1 }}", "{{ 1 // 0 }}"))
    _, text = dev.wait_line(mark, lambda k, _t: k == "run")
    assert text.startswith("run flow failed (flow-")
    assert "ZeroDivisionError" in text or "division" in text


def test_queued_runs_whose_sources_change_are_flagged_once(make_dev: MakeDev,
                                                            tmp_path: Path) -> None:
    root = tmp_path / "proj"
    folder = root / ".wfrun" / "workflows"
    folder.mkdir(parents=True)
    for name, text in {"flow.yaml": FLOW, "child.yaml": CHILD, "parent.yaml": PARENT}.items():
        (folder / name).write_text(text)
    store = SqliteStore(root / ".wfrun" / "state" / "store.sqlite3")
    try:
        coordinator = detached_coordinator(Workspace(project_catalog(root)(), root, root),
                                           store)
        flow_run = coordinator.prepare("flow").run_id
        parent_run = coordinator.prepare("parent").run_id
        dev = make_dev(queued=lambda: store.launches.query(statuses=["queued"]))
        mark = dev.mark()

        dev.save("flow.yaml", FLOW.replace("1 + 1", "2 + 2"))
        _, text = dev.wait_line(mark, lambda k, t: k == "note" and flow_run in t)
        assert text == (f"queued run {flow_run}: its source {folder / 'flow.yaml'} changed; "
                        "activation will refuse it (source_changed)")

        dev.save("child.yaml", CHILD.replace("'v1'", "'v3'"))  # an included file counts
        _, text = dev.wait_line(mark, lambda k, t: k == "note" and parent_run in t)
        assert f"its source {folder / 'child.yaml'} changed" in text
        dev.settle()
        notes = [t for k, t in dev.since(mark) if k == "note" and t.startswith("queued run")]
        assert len(notes) == 2  # each change is flagged once, not on every later save
    finally:
        store.close()
