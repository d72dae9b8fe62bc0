"""A foreground run (`wfrun run`, `start --wait`, `answer`) is never taken by a host.

Its launch used to be queued in one commit and claimed by id in the next; an idle
`wfrun host` woken by the enqueue's notice (Postgres) or polling (SQLite) could claim
it in between and run it elsewhere, without the foreground process's secrets, while
`wfrun run` failed "being run by another process" (issue 35). Now it is queued and
claimed in one commit. On both backends: a claimer that looks at the worst moment
(just after the enqueue committed) finds nothing, and a real idle host running beside
a loop of foreground runs takes none of them.
"""

from __future__ import annotations

import secrets
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pgcluster import PgCluster

from runner.compiler import build_catalog
from runner.engine import RunControl
from runner.host._daemon import StandaloneHost
from runner.host.runtime._foreground import queue_here, run_workflow, start_and_wait
from runner.host.runtime._launches import detached_coordinator
from runner.host.runtime._local import Workspace, open_store
from runner.store import LaunchRecord

TINY = """
    start: one
    nodes:
      one: {compute: "{{ 1 }}"}
      two: {compute: "{{ outputs.one + 1 }}"}
    edges:
      - {from: one, to: two}
"""
RUNS = 10
PROMPT = 30.0


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    return cluster.create_schema(f"fg_{secrets.token_hex(4)}")


def _workspace(root: Path, url: str | None) -> Workspace:
    flows = root / ".wfrun" / "workflows"
    flows.mkdir(parents=True, exist_ok=True)
    (flows / "tiny.yaml").write_text(textwrap.dedent(TINY))
    return Workspace(build_catalog("workflows", root, None), root, root / ".wfrun",
                     store_flag=url)


def test_a_claimer_right_after_the_enqueue_finds_nothing(tmp_path: Path,
                                                         url: str | None) -> None:
    ws = _workspace(tmp_path / "proj", url)
    store, other = open_store(ws), open_store(ws)
    stolen: list[LaunchRecord | None] = []

    def at(point: str) -> None:
        if point == "after_queued_commit":  # the old window between enqueue and claim
            stolen.append(other.launches.claim_next(runner_id="an-idle-host"))

    ws.crash_point = at
    try:
        outcome = run_workflow(ws, store, "tiny", {}, RunControl())
        assert outcome.status == "completed"
        coordinator = detached_coordinator(ws, store)
        _name, claimed = queue_here(coordinator, "tiny", {})  # `wfrun start --wait`
        assert claimed.status == "starting"
        assert claimed.claim_token is not None
        stolen.append(other.launches.claim_next(runner_id="an-idle-host"))
        assert start_and_wait(coordinator, claimed, RunControl(), None).status == "completed"
    finally:
        store.close()
        other.close()
    assert stolen == [None, None]
    assert _events(ws, outcome.run_id)[:2] == ["launch.queued", "launch.starting"]


def _events(ws: Workspace, run_id: str) -> list[str]:
    store = open_store(ws, read_only=True)
    try:
        return [e.type for e in store.run_events.read(run_id=run_id)]
    finally:
        store.close()


@pytest.fixture
def idle_host(tmp_path: Path, url: str | None) -> Iterator[tuple[Workspace, StandaloneHost]]:
    ws = _workspace(tmp_path / "proj", url)
    host_ws = _workspace(tmp_path / "proj", url)  # the same project, another process's view
    store = open_store(host_ws)
    # Polling fast on SQLite (no notices there); on Postgres the notice wakes it.
    host = StandaloneHost(host_ws, store, poll=0.01 if url is None else 60.0)
    thread = threading.Thread(target=host.run, daemon=True)
    thread.start()
    try:
        assert host.idle.wait(PROMPT), "the host never went idle"
        yield ws, host
    finally:
        host.stop()
        thread.join(timeout=PROMPT)
        store.close()


def test_an_idle_host_takes_no_foreground_run(idle_host: tuple[Workspace, StandaloneHost]
                                              ) -> None:
    ws, host = idle_host
    store = open_store(ws)
    try:
        outcomes = [run_workflow(ws, store, "tiny", {}, RunControl()) for _ in range(RUNS)]
    finally:
        store.close()
    assert [o.status for o in outcomes] == ["completed"] * RUNS
    assert host.report.started == 0  # 0 stolen
