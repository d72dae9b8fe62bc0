"""Two and three `wfrun host` processes on one Postgres (DESIGN §10): every slot of an
`every` trigger starts exactly once over 5 minutes of (shared, file) time, however
the hosts' ticks interleave — the firing's primary key decides, not timing."""

from __future__ import annotations

import secrets
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pgcluster import PgCluster
from standalonekit import Project, wait_for

from runner.clock import CLOCK_FILE_ENV, FileClock
from runner.launch._slots import slot_key
from runner.store.postgres import PostgresStore

PULSE = """\
triggers:
  pulse: {every: 10s, missed: all, overlap: allow, input: {slot: "{{ trigger.slot }}"}}
input: {type: object}
start: a
nodes:
  a: {action: {shell: [echo, "{{ input.slot }}"]}}
"""


@pytest.mark.parametrize("hosts", [2, 3])
def test_hosts_on_one_postgres_start_every_slot_once(pg_cluster: PgCluster, tmp_path: Path,
                                                     hosts: int) -> None:
    url = pg_cluster.create_schema(f"trig_{secrets.token_hex(4)}")
    start = datetime(2030, 6, 1, 12, 0, 3, tzinfo=UTC).timestamp()
    clock = FileClock.create(tmp_path / "clock", start)
    env = {CLOCK_FILE_ENV: clock.path, "WFRUN_STORE": url}
    projects = []
    for n in range(hosts):
        project = Project(tmp_path / f"p{n}")  # one project folder (and host lock) each
        project.workflow("pulse", PULSE)
        projects.append(project)
    try:
        for project in projects:
            project.wait_host_ready(project.host("--max-runs", "8", **env))
        store = PostgresStore(url)
        try:
            wait_for("a host to see the trigger",
                     lambda: store.triggers.state("pulse", "pulse") is not None)
            expected = []
            for step in range(30):  # 5 minutes, one 10 s slot at a time
                clock.advance(10)
                slot = (int(start // 10) + step + 1) * 10
                expected.append(slot_key(slot))
                wait_for(f"slot {step} to be evaluated", lambda s=slot: (
                    store.triggers.state("pulse", "pulse").cursor_at >= s * 1000))  # type: ignore[union-attr]
            firings = store.triggers.firings("pulse", "pulse", limit=1000)
            assert sorted(f.key for f in firings) == expected
            assert Counter(f.outcome for f in firings) == {"launched": 30}
            runs = [f.run_id for f in firings]
            wait_for("every run to end", lambda: all(
                (r := store.launches.get(run_id)) is not None and r.status == "done"
                for run_id in runs if run_id), timeout=120)
            queued = store.launches.query(limit=1000)
            assert len(queued) == 30  # one launch per slot across all hosts
        finally:
            store.close()
    finally:
        for project in projects:
            project.stop_all()
