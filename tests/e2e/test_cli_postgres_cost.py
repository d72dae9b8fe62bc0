"""What one CLI command costs the database (issue 34 items 12 and 13).

Every command paid a full layout check (~0.6 s) and two connections (a probe, then
the pool's own, with its threads); now a store whose layout passed opens on one
catalog query, and a command connects once. Counted by the server itself, in a
database of the test's own: `pg_stat_database` for that database (sessions: the
connections made; transactions: each statement outside a transaction is one),
read after the command's backend has gone (a backend reports its counts before
it leaves pg_stat_activity). Timing is bench/bench_cli_start.py's, never asserted.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pgcluster import PgCluster
from waiting import wait_until

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def database(pg_cluster: PgCluster) -> Iterator[tuple[str, str]]:
    """(the store URL, the database's name): a database only this test uses."""
    name = f"cost_{secrets.token_hex(4)}"
    with psycopg.connect(pg_cluster.admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")  # random hex
    yield pg_cluster.admin_url.rsplit("/", 1)[0] + f"/{name}", name
    with psycopg.connect(pg_cluster.admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".wfrun" / "workflows").mkdir(parents=True)
    (tmp_path / ".wfrun" / "workflows" / "shell.yaml").write_text(textwrap.dedent("""
        start: a
        nodes:
          a: {action: {shell: [echo, hi]}}
    """))
    return tmp_path


def wfrun(project: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WFRUN_", "PYTHON"))}
    env.update(WFRUN_STORE=url, WFRUN_HOME=str(project / "home"))
    done = subprocess.run([sys.executable, "-m", "runner", "--project", str(project), *args],
                          capture_output=True, text=True, timeout=120, cwd=project, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def _counts(admin: str, name: str) -> tuple[int, int]:
    """(sessions, committed transactions) of database `name`, once no backend is on it."""
    with psycopg.connect(admin, autocommit=True) as conn:
        def idle() -> bool:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                               (name,)).fetchone()
            return row is not None and row[0] == 0

        wait_until(idle, what=f"the command's backend on {name} to end")
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT sessions, xact_commit FROM pg_stat_database"
                           " WHERE datname = %s", (name,)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_command_connects_once_and_reads_the_layout_mark_only(
        pg_cluster: PgCluster, database: tuple[str, str], project: Path) -> None:
    url, name = database
    run_id = json.loads(wfrun(project, url, "run", "shell", "--json").stdout)["run_id"]
    wfrun(project, url, "status")  # the store exists and carries its layout mark
    # The server's own transaction when a session starts, then: status reads the
    # fingerprint, schema_info, the counts, the active launches; runs the fingerprint,
    # schema_info, the launches, then the listed runs' manifests and traces (two
    # reads, however many runs); show the launch, the run's bundle rows and its reruns.
    for args, most in ((("status",), 5), (("runs",), 7), (("show", run_id), 10)):
        sessions, transactions = _counts(pg_cluster.admin_url, name)
        wfrun(project, url, *args)
        after = _counts(pg_cluster.admin_url, name)
        assert after[0] - sessions == 1, f"wfrun {args[0]} connected {after[0] - sessions} times"
        # The full layout check alone is ~20 statements (a scratch schema, reads of
        # information_schema): a bound of a few catches it running again.
        assert after[1] - transactions <= most, \
            f"wfrun {args[0]} ran {after[1] - transactions} transactions (at most {most})"
    # A page of runs reads its bundles' rows in one go: five runs cost what one did
    # (it was four statements per listed run).
    for _ in range(4):
        wfrun(project, url, "run", "shell", "-q")
    sessions, transactions = _counts(pg_cluster.admin_url, name)
    listed = json.loads(wfrun(project, url, "runs", "--json").stdout)
    assert len(listed["runs"]) == 5
    assert {r["status"] for r in listed["runs"]} == {"completed"}
    after = _counts(pg_cluster.admin_url, name)
    assert after[1] - transactions <= 7, f"wfrun runs ran {after[1] - transactions} " \
        "transactions for five runs (at most 7)"


def test_a_run_on_postgres_leaves_no_folder_on_the_host(
        database: tuple[str, str], project: Path) -> None:
    """Issue 34 item 13: each run left an empty `runs/<id>/logs/` behind, for ever.
    A foreground run and a host's run of a shell step (whose live log is on the host
    while it runs) leave none."""
    url, _ = database
    foreground = json.loads(wfrun(project, url, "run", "shell", "--json").stdout)["run_id"]
    queued = json.loads(wfrun(project, url, "start", "shell", "--json").stdout)["run_id"]
    wfrun(project, url, "host", "--once")
    shown = json.loads(wfrun(project, url, "show", queued, "--json").stdout)
    assert shown["status"] == "completed", shown
    runs = project / ".wfrun" / "runs"
    assert not runs.exists() or sorted(p.name for p in runs.iterdir()) == [], \
        f"left on the host: {sorted(p.name for p in runs.iterdir())} ({foreground}, {queued})"
