"""`wfrun host` on Postgres wakes on LISTEN/NOTIFY, not on its poll: with a 60 s poll
interval an idle host still claims a launch enqueued by another process at once, also
after its listening connection was killed (it listens again and claims once to catch
up). The host runs in-process (its `idle` event says it is asleep); the launches are
queued through another store handle, as another machine would.
"""

from __future__ import annotations

import secrets
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from pgcluster import PgCluster
from waiting import wait_until

from runner.compiler import build_catalog
from runner.engine import RunOutcome
from runner.host._daemon import StandaloneHost
from runner.host.runtime._foreground import queue_detached
from runner.host.runtime._launches import detached_coordinator
from runner.host.runtime._local import Workspace, open_store
from runner.store import Store

POLL = 60.0  # far beyond every wait below: a claim within them was not the poll's doing
PROMPT = 30.0  # how long a woken host may take to claim and finish a trivial run
TINY = """
    start: one
    nodes:
      one: {compute: "{{ 1 }}"}
      two: {compute: "{{ outputs.one + 1 }}"}
      three: {compute: "{{ outputs.two + 1 }}"}
    edges:
      - {from: one, to: two}
      - {from: two, to: three}
"""


def _workspace(folder: Path, url: str) -> Workspace:
    (folder / ".wfrun" / "workflows").mkdir(parents=True)
    (folder / ".wfrun" / "workflows" / "tiny.yaml").write_text(textwrap.dedent(TINY))
    return Workspace(build_catalog("workflows", folder, None), folder, folder / "state",
                     store_flag=url)


@dataclass
class Running:
    host: StandaloneHost
    store: Store
    enqueuer: Workspace
    enqueuer_store: Store
    ended: dict[str, threading.Event]
    outcomes: dict[str, RunOutcome | None]
    schema: str

    def enqueue(self) -> str:
        _name, run_id = queue_detached(detached_coordinator(self.enqueuer, self.enqueuer_store),
                                       "tiny", {})
        return run_id

    def wait_ended(self, run_id: str) -> RunOutcome | None:
        event = self.ended.setdefault(run_id, threading.Event())
        assert event.wait(PROMPT), f"run {run_id} not finished within {PROMPT} s"
        return self.outcomes[run_id]

    def wait_idle(self) -> None:
        assert self.host.idle.wait(PROMPT), "the host never went idle"


@pytest.fixture
def running(pg_cluster: PgCluster, tmp_path: Path) -> Iterator[Running]:
    schema = f"wake_{secrets.token_hex(4)}"
    url = pg_cluster.create_schema(schema)
    ws = _workspace(tmp_path / "host", url)
    enqueuer = _workspace(tmp_path / "enqueuer", url)
    store, enqueuer_store = open_store(ws), open_store(enqueuer)
    ended: dict[str, threading.Event] = {}
    outcomes: dict[str, RunOutcome | None] = {}
    lock = threading.Lock()

    def on_ended(run_id: str, outcome: RunOutcome | None) -> None:
        with lock:
            outcomes[run_id] = outcome
            ended.setdefault(run_id, threading.Event()).set()

    host = StandaloneHost(ws, store, poll=POLL, on_run_ended=on_ended)
    thread = threading.Thread(target=host.run, daemon=True)
    thread.start()
    try:
        yield Running(host, store, enqueuer, enqueuer_store, ended, outcomes, schema)
    finally:
        host.stop()
        thread.join(timeout=30)
        store.close()
        enqueuer_store.close()


def test_an_idle_host_claims_a_new_launch_on_its_notice(running: Running) -> None:
    for _ in range(3):  # each one while the host sleeps in a 60 s poll
        running.wait_idle()
        run_id = running.enqueue()
        outcome = running.wait_ended(run_id)
        assert outcome is not None
        assert outcome.status == "completed"
    assert running.host.listener is not None
    assert running.host.listener.notices >= 3
    assert running.host.report.started == 3


def test_a_killed_listening_connection_reconnects_and_loses_no_launch(
        running: Running, pg_cluster: PgCluster) -> None:
    running.wait_idle()  # listening since before its first claim
    listener = running.host.listener
    assert listener is not None
    with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE query LIKE %s", (f'LISTEN "wfrun_launch_{running.schema}"',)).fetchall()
    assert killed, "no listening connection found"
    wait_until(lambda: listener.reconnects >= 1, timeout=PROMPT, what="the listener back")
    running.wait_idle()
    run_id = running.enqueue()
    outcome = running.wait_ended(run_id)
    assert outcome is not None
    assert outcome.status == "completed"
