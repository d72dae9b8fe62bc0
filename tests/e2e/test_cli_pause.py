"""Issue 39 item 2: `wfrun pause RUN` / `wfrun unpause RUN` on any running run, from any
process, through the store: it stops at the next node boundary (the node in flight
finishes, nothing runs twice), frees its host's slot, shows `paused` in `status`,
`show` and `runs`, and `unpause` lets a host resume it.

Two set-ups: a detached run on a SQLite project's host, and a run on a Postgres
host paused and unpaused from another machine's project (its own folder, the same
database).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pgcluster import PgCluster
from waiting import wait_until

pytestmark = pytest.mark.timeout(240)

FLOW = """\
    start: a
    nodes:
      a:
        action:
          shell: [sh, -c, 'cd "{{ project.root }}/.."; echo a >> a.txt; touch a.started;
                  while [ ! -f a.go ]; do sleep 0.1; done']
      b:
        action: {shell: [sh, -c, 'echo b >> "{{ project.root }}/../b.txt"']}
    edges:
      - {from: a, to: b}
    """
QUICK = """\
    start: one
    nodes:
      one: {compute: "{{ 1 }}"}
    """


class Site:
    """One project folder (a machine), its CLI and its host."""

    def __init__(self, root: Path, store: str | None = None) -> None:
        self.root = root
        self.store = store
        folder = root / ".wfrun" / "workflows"
        folder.mkdir(parents=True)
        (folder / "flow.yaml").write_text(textwrap.dedent(FLOW))
        (folder / "quick.yaml").write_text(textwrap.dedent(QUICK))
        self.host_proc: subprocess.Popen[bytes] | None = None

    def argv(self, *args: str) -> list[str]:
        store = ["--store", self.store] if self.store else []
        return [sys.executable, "-m", "runner", "--project", str(self.root), *store, *args]

    def wfrun(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=60,
                              cwd=self.root, env={**os.environ, "COLUMNS": "200"})

    def json(self, *args: str) -> Any:
        done = self.wfrun(*args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def events(self, run_id: str) -> list[str]:
        """The run's store events (a test looks into the store directly)."""
        sql = "SELECT type FROM run_events WHERE run_id = %s ORDER BY seq"
        if self.store:
            with psycopg.connect(self.store) as conn:
                return [str(r[0]) for r in conn.execute(sql, (run_id,)).fetchall()]
        path = self.root / ".wfrun" / "state" / "store.sqlite3"
        with contextlib.closing(sqlite3.connect(path)) as db:
            return [str(r[0]) for r in db.execute(sql.replace("%s", "?"), (run_id,))]

    def state(self, run_id: str) -> str:
        return str(self.json("status", run_id, "--json")["status"])

    def host(self) -> None:
        log = (self.root.parent / f"{self.root.name}-host.log").open("ab")
        self.host_proc = subprocess.Popen(
            self.argv("host", "--no-controllers", "--max-runs", "1", "--lease", "3"),
            stdout=subprocess.DEVNULL, stderr=log, cwd=self.root, start_new_session=True)
        log.close()

    def stop(self) -> None:
        proc = self.host_proc
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _pause_unpause(runner: Site, operator: Site, shared: Path) -> None:
    """`runner`'s host runs the run; `operator` (maybe another machine) pauses it."""
    run_id = runner.json("start", "flow", "--json")["run_id"]
    wait_until((shared / "a.started").exists, what="node a to start on the host")
    assert operator.json("pause", run_id, "--json") == {
        "run_id": run_id, "state": "pausing", "launch": "running"}
    # Its runner reads the request while node a runs (and says so in the store)...
    wait_until(lambda: "pause_seen" in operator.events(run_id), what="the runner to see it")
    (shared / "a.go").touch()  # ...so once node a finishes, the run stops before b
    wait_until(lambda: operator.state(run_id) == "paused", what="the run to pause")
    shown = operator.json("show", run_id, "--json")
    assert (shown["status"], shown["launch"], shown["paused"]) == ("paused", "parked", True)
    assert [(e["node"], e["outcome"]) for e in shown["timeline"]] == [("a", "ok")]
    assert [r["run_id"] for r in operator.json("runs", "--status", "paused", "--json")["runs"]
            ] == [run_id]
    assert not (shared / "b.txt").exists()
    assert "paused (`wfrun pause`)" in operator.wfrun("why", run_id).stdout
    # Paused again: nothing changes, and no host takes it while it is paused.
    assert operator.json("pause", run_id, "--json")["state"] == "paused"
    # Its slot is free (the host runs one at a time): another run goes through.
    quick = runner.json("start", "quick", "--json")["run_id"]
    wait_until(lambda: runner.state(quick) == "completed", what="a run in the freed slot")
    assert runner.state(run_id) == "paused"
    assert operator.json("unpause", run_id, "--json") == {
        "run_id": run_id, "state": "unpaused", "launch": "parked"}
    wait_until(lambda: operator.state(run_id) == "completed", what="the unpaused run to end")
    assert _lines(shared / "a.txt") == ["a"]  # node a ran once: the pause interrupted nothing
    assert _lines(shared / "b.txt") == ["b"]
    # Ended: pause and unpause say so in one line.
    for action, words in (("pause", "already ended"), ("unpause", "is not paused")):
        done = operator.wfrun(action, run_id)
        assert done.returncode != 0
        assert words in done.stderr
        assert "Traceback" not in done.stderr


@pytest.fixture
def sqlite_site(tmp_path: Path) -> Iterator[Site]:
    site = Site(tmp_path / "proj")
    try:
        yield site
    finally:
        site.stop()


def test_pause_and_unpause_a_detached_run_on_a_host(sqlite_site: Site,
                                                    tmp_path: Path) -> None:
    sqlite_site.host()
    _pause_unpause(sqlite_site, sqlite_site, tmp_path)


def test_a_pause_withdrawn_before_the_boundary_changes_nothing(sqlite_site: Site,
                                                               tmp_path: Path) -> None:
    sqlite_site.host()
    run_id = sqlite_site.json("start", "flow", "--json")["run_id"]
    wait_until((tmp_path / "a.started").exists, what="node a to start")
    assert sqlite_site.json("pause", run_id, "--json")["state"] == "pausing"
    assert sqlite_site.json("unpause", run_id, "--json")["launch"] == "running"
    (tmp_path / "a.go").touch()
    wait_until(lambda: sqlite_site.state(run_id) == "completed", what="the run to end")
    assert _lines(tmp_path / "b.txt") == ["b"]
    missing = sqlite_site.wfrun("pause", "flow-20260101T000000Z-00000000")
    assert missing.returncode == 3
    assert "no launch" in missing.stderr


@pytest.fixture
def pg_sites(pg_cluster: PgCluster, tmp_path: Path) -> Iterator[tuple[Site, Site]]:
    url = pg_cluster.create_schema(f"pause_{secrets.token_hex(4)}")
    sites = (Site(tmp_path / "h1", url), Site(tmp_path / "ops", url))
    try:
        yield sites
    finally:
        for site in sites:
            site.stop()


def test_pause_and_unpause_a_run_on_another_postgres_host(
        pg_sites: tuple[Site, Site], tmp_path: Path) -> None:
    host, operator = pg_sites
    host.host()
    _pause_unpause(host, operator, tmp_path)


def test_a_run_whose_runner_died_is_paused_at_once_and_resumed_after(
        sqlite_site: Site, tmp_path: Path) -> None:
    proc = subprocess.Popen(sqlite_site.argv("run", "flow", "-q"), cwd=sqlite_site.root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_until((tmp_path / "a.started").exists, what="node a to start")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    (run_id,) = [r["run_id"] for r in sqlite_site.json("runs", "--json")["runs"]]
    # Its runner is gone: taken over and parked paused here, without waiting for it.
    assert sqlite_site.json("pause", run_id, "--json")["state"] == "paused"
    assert sqlite_site.state(run_id) == "paused"
    sqlite_site.host()  # a host does not take a paused run
    quick = sqlite_site.json("start", "quick", "--json")["run_id"]
    wait_until(lambda: sqlite_site.state(quick) == "completed", what="the host to be up")
    assert sqlite_site.state(run_id) == "paused"
    (tmp_path / "a.go").touch()
    sqlite_site.json("unpause", run_id, "--json")
    wait_until(lambda: sqlite_site.state(run_id) == "completed", what="the host to resume it")
    assert _lines(tmp_path / "a.txt") == ["a", "a"]  # the interrupted node ran again
    assert _lines(tmp_path / "b.txt") == ["b"]
