"""`wfrun dev` lists queued launches pinned to an older digest of a workflow that was
just saved (issue 9): real saves, a real watchdog observer, a real store."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from devkit import Dev, digest_of, project_catalog

from runner.host.runtime._launches import detached_coordinator
from runner.host.runtime._local import Workspace
from runner.launch import LaunchCoordinator
from runner.store import SqliteStore

FLOW = """\
    start: one
    nodes:
      one: {compute: "{{ 1 + 1 }}"}
"""
OTHER = """\
    start: one
    nodes:
      one: {compute: "{{ 'other' }}"}
"""
MakeDev = Callable[..., Dev]


def pinned(run_id: str, name: str) -> str:
    return (f"queued launch {run_id} is pinned to an older version of {name}; it will fail "
            "with source_changed")


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[tuple[SqliteStore, LaunchCoordinator]]:
    root = tmp_path / "proj"
    folder = root / ".wfrun" / "workflows"
    folder.mkdir(parents=True)
    for name, text in {"flow.yaml": FLOW, "other.yaml": OTHER}.items():
        (folder / name).write_text(textwrap.dedent(text))
    store = SqliteStore(root / ".wfrun" / "state" / "store.sqlite3")
    ws = Workspace(project_catalog(root)(), root, root)
    yield store, detached_coordinator(ws, store)
    store.close()


def test_a_save_lists_the_queued_launches_pinned_to_the_older_digest(
        make_dev: MakeDev, queue: tuple[SqliteStore, LaunchCoordinator]) -> None:
    store, coordinator = queue
    first, second = coordinator.prepare("flow").run_id, coordinator.prepare("flow").run_id
    untouched = coordinator.prepare("other").run_id
    dev = make_dev(queued=lambda: store.launches.query(statuses=["queued"]))
    assert not any("pinned" in t for _, t in dev.since(0))  # nothing is behind yet
    mark = dev.mark()

    path = dev.save("flow.yaml", FLOW.replace("1 + 1", "2 + 2"))

    for run_id in (first, second):
        kind, _ = dev.wait_line(mark, lambda k, t, r=run_id: t == pinned(r, "flow"))
        assert kind == "note"
    dev.wait_line(mark, lambda k, t: k == "ok" and t == f"ok flow {digest_of(path, dev.root)}")
    dev.settle()
    lines = [t for _, t in dev.since(mark)]
    assert not any(untouched in t for t in lines)  # another workflow's launch: not listed
    assert sum("pinned" in t for t in lines) == 2  # once per launch

    # Another save (a second newer digest) lists them again; a comment-only save keeps
    # the digest, so no launch is pinned to anything new (only its file note changes).
    mark = dev.mark()
    dev.save("flow.yaml", FLOW.replace("1 + 1", "3 + 3"))
    dev.wait_line(mark, lambda k, t: t == pinned(first, "flow"))
    dev.wait_line(mark, lambda k, t: t == pinned(second, "flow"))
    dev.settle()
    mark = dev.mark()
    dev.save("flow.yaml", FLOW.replace("1 + 1", "3 + 3") + "# a comment\n")
    dev.wait_line(mark, lambda k, t: k == "ok" and t.startswith("ok flow "))
    dev.settle()
    assert not any("pinned" in t for _, t in dev.since(mark))

    # Restored to what was queued: nothing is pinned any more, and nothing is said.
    mark = dev.mark()
    dev.save("flow.yaml", FLOW)
    dev.wait_line(mark, lambda k, t: k == "ok" and t.startswith("ok flow "))
    dev.settle()
    assert not any("pinned" in t for _, t in dev.since(mark))


def test_launches_already_behind_are_listed_when_dev_starts(
        make_dev: MakeDev, queue: tuple[SqliteStore, LaunchCoordinator],
        tmp_path: Path) -> None:
    store, coordinator = queue
    run_id = coordinator.prepare("flow").run_id
    path = tmp_path / "proj" / ".wfrun" / "workflows" / "flow.yaml"
    path.write_text(textwrap.dedent(FLOW).replace("1 + 1", "5 + 5"))

    dev = make_dev(queued=lambda: store.launches.query(statuses=["queued"]))

    lines = [t for _, t in dev.since(0)]
    assert pinned(run_id, "flow") in lines
    assert f"queued run {run_id}: its source {path.resolve()} changed; activation will " \
           "refuse it (source_changed)" in lines
