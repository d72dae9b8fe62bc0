"""Event firings started one by one (`TriggerLoop.fire_event`: a webhook delivery of
an overlap policy other than `allow` or of a controller's trigger, a file batch),
webhooks with real clients against the real server on 127.0.0.1: the claim keeps
the event until the firing settles, so a firing left pending (its host died before
the run was queued; a run ahead of it under `overlap: queue`) is queued later by a
host's tick with that event as its input, and a sender's retry names that run
(issue 38)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from standalonekit import Project
from test_webhooks import HOOKED, SECRET, post

from runner.clock import FakeClock
from runner.compiler import build_catalog
from runner.host.runtime._launches import detached_coordinator
from runner.host.runtime._local import Workspace
from runner.host.runtime._triggers import HostTriggers
from runner.host.runtime._webhooks import WebhookServer
from runner.launch._triggers import STALE_PENDING
from runner.store import SqliteStore


class HostDied(Exception):
    pass


class Host:
    """One host's trigger loop and webhook server on a shared store and clock."""

    def __init__(self, root: Path, store: SqliteStore, clock: FakeClock) -> None:
        ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun",
                       clock=clock)
        self.triggers = HostTriggers(ws, store, detached_coordinator(ws, store),
                                     listening=True)
        self.server = WebhookServer("127.0.0.1:0", self.triggers.loop,
                                    self.triggers.served, {"PUSH_SECRET": SECRET})
        self.server.start()
        self.url = f"http://{self.server.address}/hooks/push"

    def stop(self) -> None:
        self.server.stop()


def _project(tmp_path: Path, overlap: str) -> tuple[Path, SqliteStore, FakeClock]:
    project = Project(tmp_path / "proj")
    project.workflow("hooked", HOOKED.replace(
        "secret: PUSH_SECRET}", f"secret: PUSH_SECRET}}\n    overlap: {overlap}"))
    clock = FakeClock()
    store = SqliteStore(project.root / ".wfrun" / "state" / "store.sqlite3", clock=clock)
    return project.root, store, clock


def test_a_delivery_whose_host_died_before_its_run_was_queued_runs_with_its_event(
        tmp_path: Path) -> None:
    root, store, clock = _project(tmp_path, "skip")
    first = Host(root, store, clock)

    def dies(workflow: str, run_input: Any, run_id: str) -> None:
        raise HostDied("between the claim and the queue")
    first.triggers.loop.launch = dies  # where a SIGKILL would stop the host
    try:
        with httpx.Client(timeout=30) as client:
            lost = post(client, first.url, "d-1", {"ref": "main"})
        assert lost.status_code == 500  # nothing promised: the sender retries
        firing = store.triggers.firing("hooked", "push", "delivery:d-1")
        assert firing is not None
        assert firing.outcome == "pending"
        assert json.loads(firing.event_json or "{}")["body"] == {"ref": "main"}
    finally:
        first.stop()
    second = Host(root, store, clock)  # the host that takes over
    try:
        second.triggers.tick()  # a fresh pending firing may be its host's, queueing now
        assert store.launches.query(limit=10) == []
        clock.advance(STALE_PENDING + 1)
        second.triggers.tick()
        (record,) = store.launches.query(limit=10)
        assert record.run_id == firing.run_id
        assert record.input() == {"ref": "main", "delivery": "d-1"}
        settled = store.triggers.firing("hooked", "push", "delivery:d-1")
        assert settled is not None
        assert (settled.outcome, settled.event_json) == ("launched", None)
        with httpx.Client(timeout=30) as client:
            retry = post(client, second.url, "d-1", {"ref": "main"})
        assert retry.status_code == 200
        assert retry.json()["replayed"] is True
        assert (retry.json()["outcome"], retry.json()["run_id"]) == ("launched", record.run_id)
        second.triggers.tick()
        assert len(store.launches.query(limit=10)) == 1
    finally:
        second.stop()
        store.close()


def test_a_delivery_queued_behind_a_running_run_starts_with_its_own_event(
        tmp_path: Path) -> None:
    root, store, clock = _project(tmp_path, "queue")
    host = Host(root, store, clock)
    try:
        with httpx.Client(timeout=30) as client:
            ahead = post(client, host.url, "d-1", {"ref": "one"})
            assert ahead.status_code == 202, ahead.text
            behind = post(client, host.url, "d-2", {"ref": "two"})
        assert behind.status_code == 202, behind.text
        assert behind.json()["outcome"] == "pending"  # run d-1's run has not ended
        host.triggers.tick()
        assert len(store.launches.query(limit=10)) == 1  # still behind it
        host.triggers.coordinator.cancel(ahead.json()["run_id"])
        host.triggers.tick()
        record = store.launches.get(behind.json()["run_id"])
        assert record is not None
        assert record.input() == {"ref": "two", "delivery": "d-2"}
        firing = store.triggers.firing("hooked", "push", "delivery:d-2")
        assert firing is not None
        assert (firing.outcome, firing.event_json) == ("launched", None)
    finally:
        host.stop()
        store.close()


FILES = """\
triggers:
  edits: {files: {paths: ["src/**/*.py"]}, input: {paths: "{{ event.paths }}"}}
input:
  type: object
  properties: {paths: {type: array, items: {type: string}}}
start: a
nodes:
  a: {compute: {expr: "1"}}
"""


def test_a_file_batch_whose_host_died_before_its_run_was_queued_runs_with_its_paths(
        tmp_path: Path) -> None:
    project = Project(tmp_path / "proj")
    project.workflow("edits", FILES)
    clock = FakeClock()
    store = SqliteStore(project.root / ".wfrun" / "state" / "store.sqlite3", clock=clock)
    root = project.root

    def host() -> HostTriggers:
        ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun",
                       clock=clock)
        return HostTriggers(ws, store, detached_coordinator(ws, store))

    try:
        first = host()
        (item,) = [t for t in first.current() if t.spec.files is not None]

        def dies(workflow: str, run_input: Any, run_id: str) -> None:
            raise HostDied("between the claim and the queue")
        first.loop.launch = dies  # where a SIGKILL would stop the host
        batch = {"paths": ["src/a.py", "src/b.py"]}
        with pytest.raises(HostDied):  # as its file watcher fires a quiet batch
            first.loop.fire_event(item, "files:batch-1", batch)
        second = host()
        second.tick()
        assert store.launches.query(limit=10) == []  # its host may be queueing it now
        clock.advance(STALE_PENDING + 1)
        second.tick()
        (record,) = store.launches.query(limit=10)
        assert record.input() == batch
        firing = store.triggers.firing("edits", "edits", "files:batch-1")
        assert firing is not None
        assert (firing.outcome, firing.run_id, firing.event_json) == (
            "launched", record.run_id, None)
    finally:
        store.close()
