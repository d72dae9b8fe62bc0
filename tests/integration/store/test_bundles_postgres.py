"""Run bundles in Postgres (runner/store/postgres/_bundles.py): the bundle-space
conformance suite (tests/bundlespaces.py) with real launch rows as the fence, the
layout check over the bundle tables, and a reset that keeps them."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from bundlespaces import *  # noqa: F403  (the conformance tests)
from bundlespaces import Holder, Kit
from pgcluster import PgCluster
from storekit import FakeClock, launch

from runner.engine import RunReader
from runner.launch._endings import Step, Transition
from runner.store import LostRace
from runner.store._errors import IncompatibleLayout
from runner.store.postgres import PostgresStore

LEASE = 30.0


@pytest.fixture
def url(pg_cluster: PgCluster) -> str:
    return pg_cluster.create_schema(f"pgb_{secrets.token_hex(4)}")


@pytest.fixture
def pg(url: str) -> Iterator[tuple[PostgresStore, FakeClock]]:
    clock = FakeClock()
    with PostgresStore(url, clock=clock, pool_size=2) as store:
        yield store, clock


@pytest.fixture
def kit(pg: tuple[PostgresStore, FakeClock], tmp_path: Path) -> Kit:
    store, clock = pg

    def claim(run_id: str, runner: str) -> str:
        if store.launches.get(run_id) is None:
            store.launches.enqueue(launch(run_id))
        else:
            clock.advance(LEASE + 1)  # the previous holder's lease expires
        record = store.launches.claim(run_id, runner_id=runner, lease_seconds=LEASE)
        assert not isinstance(record, LostRace), record
        assert record.claim_token is not None
        return record.claim_token

    def hold(run_id: str) -> Holder:
        # The fence callable always says yes: only the launch row, checked in each
        # write's transaction, can refuse.
        token = claim(run_id, f"host-{secrets.token_hex(3)}")
        return Holder(claim=token, revoke=lambda: claim(run_id, "thief"))

    return Kit("postgres", tmp_path / "runs", store.bundles, hold)


def test_bundles_live_only_in_the_database(kit: Kit, url: str) -> None:
    definition = kit.workflow("""
        start: a
        nodes:
          a: {compute: "{{ 'z' * 5000 }}"}
    """)
    out = kit.engine(kit.hold("pg-run-1")).start(definition, run_id="pg-run-1")
    assert out.status == "completed", out.error
    assert not (kit.runs / "pg-run-1").exists()  # nothing on this host's disk
    with psycopg.connect(url) as conn:
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM run_trace WHERE run_id = 'pg-run-1'),"
            " (SELECT count(*) FROM run_artifacts WHERE run_id = 'pg-run-1'),"
            " (SELECT sealed FROM run_bundles WHERE run_id = 'pg-run-1')").fetchone()
    assert counts == (len(kit.reader().trace("pg-run-1")), 1, True)
    # Another host (another folder) reads the same run.
    other = RunReader(kit.runs.parent / "elsewhere", kit.rows)
    assert other.final_output("pg-run-1") == "z" * 5000


@pytest.mark.parametrize("then", ["end", "park"])
def test_a_run_leaves_no_live_log_folder_on_the_host(kit: Kit, then: str) -> None:
    """A shell step's live log lives in `runs/<id>/logs/` on this host while it runs;
    once the run is done or parked nothing is left behind (issue 34 item 13: an
    empty folder per run, for ever)."""
    definition = kit.workflow("""
        start: a
        nodes:
          a: {action: {shell: [echo, hi]}}
          b: {checkpoint: {summary: "go on?"}}
        edges:
          - {from: a, to: b}
    """ if then == "park" else """
        start: a
        nodes:
          a: {action: {shell: [echo, hi]}}
    """)
    run_id = f"pg-logs-{then}"
    out = kit.engine(kit.hold(run_id)).start(definition, run_id=run_id)
    assert out.status == ("waiting" if then == "park" else "completed"), out.error
    assert kit.reader().trace(run_id)  # the step ran and its log was recorded
    assert not (kit.runs / run_id).exists()


def test_a_write_without_the_claim_changes_nothing(pg: tuple[PostgresStore, FakeClock]) -> None:
    store, clock = pg
    rows = store.bundles
    store.launches.enqueue(launch("pg-run-2"))
    record = store.launches.claim("pg-run-2", runner_id="a", lease_seconds=LEASE)
    assert not isinstance(record, LostRace)
    assert record.claim_token is not None
    token = record.claim_token
    assert rows.create_bundle("pg-run-2", token) == "ok"
    assert rows.append_events("pg-run-2", [(1, '{"seq": 1}')], token) == "ok"
    assert rows.append_events("pg-run-2", [(1, '{"seq": 1}')], token) == "exists"
    assert rows.append_events("pg-run-2", [(2, "{}")], "not-the-token") == "fenced"
    clock.advance(LEASE + 1)  # the lease ran out: the old token is refused at once
    assert rows.append_events("pg-run-2", [(2, "{}")], token) == "fenced"
    assert rows.put_document("pg-run-2", "state", "{}", token) == "fenced"
    assert rows.put_artifact("pg-run-2", "ab" * 32, b"x", token) == "fenced"
    assert rows.seal_bundle("pg-run-2", token) == "fenced"
    assert rows.read_events("pg-run-2") == ['{"seq": 1}']
    assert rows.create_bundle("pg-run-3", "no-launch") == "fenced"
    assert not rows.bundle_exists("pg-run-3")
    # A first write that creates the row: fenced after its insert, which rolls back.
    first = [(1, '{"seq": 1}')]
    assert rows.write_batch("pg-run-3", "no-launch", events=first,
                            documents=[("manifest", "{}")], create=True) == "fenced"
    assert not rows.bundle_exists("pg-run-3")
    assert rows.write_batch("pg-run-2", token, events=[(2, "{}")], create=True) == "fenced"
    assert rows.read_events("pg-run-2") == ['{"seq": 1}']


def test_a_first_write_creates_the_bundle_with_its_documents_and_events(
        pg: tuple[PostgresStore, FakeClock]) -> None:
    store, _clock = pg
    rows = store.bundles
    store.launches.enqueue(launch("pg-run-4"))
    record = store.launches.claim("pg-run-4", runner_id="a", lease_seconds=LEASE)
    assert not isinstance(record, LostRace)
    token = record.claim_token
    assert token is not None
    events, docs = [(1, '{"seq": 1}')], [("manifest", '{"m": 1}'), ("workflow", "{}")]
    assert rows.write_batch("pg-run-4", token, events=events, documents=docs,
                            create=True) == "ok"
    assert rows.read_events("pg-run-4") == ['{"seq": 1}']
    assert rows.read_document("pg-run-4", "manifest") == '{"m": 1}'
    # Again (a retry whose first answer was lost): the row is there, nothing is doubled.
    assert rows.write_batch("pg-run-4", token, events=events, documents=docs,
                            create=True) == "exists"
    assert rows.read_events("pg-run-4") == ['{"seq": 1}']


def test_a_batch_in_a_launch_transition_commits_with_it_or_not_at_all(
        pg: tuple[PostgresStore, FakeClock]) -> None:
    """launch/_activator.py RunLink: the first write rides `mark_running`, the seal `finish`;
    a refused batch rolls the transition back, a refused guard writes no batch."""
    store, clock = pg
    rows, launches = store.bundles, store.launches
    store.launches.enqueue(launch("pg-run-5"))
    record = launches.claim("pg-run-5", runner_id="a", lease_seconds=LEASE)
    assert not isinstance(record, LostRace)
    token = record.claim_token
    assert token is not None

    def step(transition: Transition) -> Step:
        return Step(transition)

    first = [(1, '{"seq": 1}'), (2, '{"seq": 2}')]
    # The batch refuses (its events' seq is taken by a row made meanwhile): `running`
    # is rolled back with it.
    assert rows.create_bundle("pg-run-5", token) == "ok"
    assert rows.append_events("pg-run-5", first[:1], token) == "ok"
    running = step(lambda bundle: launches.mark_running("pg-run-5", token, bundle=bundle))
    assert rows.write_batch("pg-run-5", token, events=first, launch=running) == "exists"
    assert launches.get("pg-run-5").status == "starting"  # type: ignore[union-attr]
    assert rows.remove_bundle("pg-run-5", unstarted_only=False)
    # Accepted: the bundle's row, its events and `running` are one commit.
    assert rows.write_batch("pg-run-5", token, events=first, create=True,
                            documents=[("manifest", "{}")], launch=running) == "ok"
    row = launches.get("pg-run-5")
    assert row is not None
    assert (row.status, row.input_cleared) == ("running", True)
    assert len(rows.read_events("pg-run-5")) == 2
    # The seal rides `finish`: both, or (a lost claim) neither.
    ending = [(3, '{"seq": 3}')]
    finish = step(lambda bundle: launches.finish("pg-run-5", "not-the-token", bundle=bundle))
    assert rows.write_batch("pg-run-5", token, events=ending, seal=True,
                            launch=finish) == "fenced"
    assert not rows.bundle_sealed("pg-run-5")
    assert len(rows.read_events("pg-run-5")) == 2
    finish = step(lambda bundle: launches.finish("pg-run-5", token, bundle=bundle))
    assert rows.write_batch("pg-run-5", token, events=ending, seal=True,
                            launch=finish) == "ok"
    assert rows.bundle_sealed("pg-run-5")
    assert launches.get("pg-run-5").status == "done"  # type: ignore[union-attr]
    # A guard that refuses never runs the batch: a sealed bundle stays as it was.
    clock.advance(LEASE + 1)
    again = step(lambda bundle: launches.mark_running("pg-run-5", token, bundle=bundle))
    assert rows.write_batch("pg-run-5", None, events=[(4, "{}")], launch=again) == "fenced"
    assert len(rows.read_events("pg-run-5")) == 3


def test_the_layout_check_covers_the_bundle_tables(url: str) -> None:
    PostgresStore(url, pool_size=1).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE run_trace DROP COLUMN event")
    with pytest.raises(IncompatibleLayout, match="run_trace"):
        PostgresStore(url, pool_size=1)


def test_a_store_reset_keeps_the_bundles(kit: Kit, url: str) -> None:
    definition = kit.workflow("""
        start: a
        nodes:
          a: {compute: "{{ 7 }}"}
    """)
    assert kit.engine().start(definition, run_id="pg-run-4").status == "completed"
    PostgresStore.reset(url).close()
    with PostgresStore(url, pool_size=1) as store:
        assert RunReader(kit.runs, store.bundles).final_output("pg-run-4") == 7


def test_the_ui_and_status_read_a_postgres_project_without_a_sqlite_file(
    url: str, tmp_path: Path
) -> None:
    from runner.compiler import build_catalog
    from runner.engine import RunControl
    from runner.host.runtime._foreground import run_workflow
    from runner.host.runtime._launches import launch_status
    from runner.host.runtime._local import Workspace, open_store, store_exists, store_path
    from runner.ui._data import Site, run_page, runs_page

    project = tmp_path / "project"
    (project / ".wfrun" / "workflows").mkdir(parents=True)
    (project / ".wfrun" / "workflows" / "hi.yaml").write_text(
        "start: a\nnodes:\n  a: {compute: \"{{ 'h' * 5000 }}\"}\n")
    ws = Workspace(build_catalog("workflows", project, None), project, tmp_path / "state",
                   store_flag=url)
    store = open_store(ws)
    try:
        outcome = run_workflow(ws, store, "hi", {}, RunControl())
        assert outcome.status == "completed"
        assert launch_status(ws, store, outcome.run_id)["run"]["status"] == "completed"
    finally:
        store.close()
    assert not store_path(ws).exists()
    assert store_exists(ws)  # a Postgres project has a store without a SQLite file
    assert not (ws.runs_dir / outcome.run_id / "manifest.json").exists()
    site = Site(Workspace(build_catalog("workflows", project, None), project,
                          tmp_path / "state", store_flag=url))
    try:
        page = runs_page(site)
        assert [r["run_id"] for r in page["rows"]] == [outcome.run_id]
        assert page["rows"][0]["status"] == "completed"
        assert run_page(site, outcome.run_id)["bundle"] is True
        assert site.reader.final_output(outcome.run_id) == "h" * 5000
    finally:
        site.close()
