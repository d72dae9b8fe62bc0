"""Several `wfrun host` processes, each in its own project folder, draining detached
launches from one Postgres database: one host SIGKILLed and restarted, and the
server restarted (`pg_ctl restart`) under load.

Every launch ends in exactly one terminal state, none is activated twice (one
`launch.running` each), and a node's side effect repeats only for a run that was
taken over (its interrupted node runs again). Run bundles live in the database, so
a run taken over by *another* host after its holder died is finished there: every
launch ends `done` (tests/e2e/test_cli_postgres_bundles.py shows one such takeover
step by step).
"""

from __future__ import annotations

import collections
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pgcluster import PgCluster
from waiting import wait_until

pytestmark = pytest.mark.timeout(420)

LAUNCHES = 30
AFTER_RESTART = 6
IDLE_POLL = 60.0  # the batch after the restart must not wait for it (0.75 of it)
HERE = Path(__file__).parent
TERMINAL = ("done", "failed", "cancelled")
WORKFLOW = """
    start: a
    nodes:
      a: {compute: "{{ 1 }}"}
      b: {action: {shell: [sh, -c, 'echo "{{ run.id }}" >> EFFECTS; sleep 0.2']}}
      c: {compute: "{{ 3 }}"}
    edges:
      - {from: a, to: b}
      - {from: b, to: c}
"""


class Fleet:
    def __init__(self, root: Path, url: str, lease: float) -> None:
        self.root = root
        self.url = url
        self.lease = lease
        self.effects = root / "effects.log"
        self.hosts: dict[str, subprocess.Popen[bytes]] = {}
        text = textwrap.dedent(WORKFLOW).replace("EFFECTS", str(self.effects))
        for name in ("enqueuer", "h1", "h2", "h3"):
            folder = root / name / ".wfrun" / "workflows"
            folder.mkdir(parents=True)
            (folder / "three.yaml").write_text(text)

    def enqueue(self, count: int) -> list[str]:
        done = subprocess.run(
            [sys.executable, str(HERE / "pg_enqueue.py"), str(self.root / "enqueuer"),
             self.url, "three", str(count)],
            capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    def start(self, name: str, *extra: str) -> None:
        folder = self.root / name
        log = (self.root / f"{name}.log").open("ab")
        self.hosts[name] = subprocess.Popen(
            [sys.executable, "-m", "runner", "--project", str(folder), "--store", self.url,
             "host", "--lease", str(self.lease), "--max-runs", "2", "--no-controllers",
             *extra],
            stdout=subprocess.DEVNULL, stderr=log, cwd=folder, start_new_session=True)
        log.close()

    def kill(self, name: str) -> None:
        process = self.hosts[name]
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def stop_all(self) -> None:
        for process in self.hosts.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.hosts.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def rows(self) -> dict[str, tuple[str, str | None, str | None]]:
        with psycopg.connect(self.url) as conn:
            found = conn.execute("SELECT run_id, status, error_code, error_message"
                                 " FROM workflow_run_queue").fetchall()
        return {str(r[0]): (str(r[1]), r[2], r[3]) for r in found}

    def counts(self) -> collections.Counter[str]:
        return collections.Counter(status for status, _, _ in self.rows().values())

    def events(self) -> dict[str, collections.Counter[str]]:
        with psycopg.connect(self.url) as conn:
            found = conn.execute("SELECT run_id, type FROM run_events").fetchall()
        out: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for run_id, kind in found:
            out[str(run_id)][str(kind)] += 1
        return out

    def all_ended(self, launches: int = LAUNCHES) -> bool:
        counts = self.counts()
        return sum(counts[s] for s in TERMINAL) == launches

    def check_invariants(self, ids: list[str]) -> dict[str, tuple[str, str | None, str | None]]:
        rows = self.rows()
        assert sorted(rows) == sorted(ids)
        events = self.events()
        effects = collections.Counter(self.effects.read_text().split())
        for run_id, (status, code, message) in rows.items():
            kinds = events[run_id]
            assert sum(kinds[f"launch.{s}"] for s in TERMINAL) == 1, (run_id, kinds)
            assert kinds["launch.running"] == 1, (run_id, kinds)  # never activated twice
            # Taken over or not, the run finishes from its bundle in the database.
            assert status == "done", (run_id, status, code, message)
            if not kinds["launch.reclaimed"]:
                assert effects[run_id] == 1, run_id
            assert effects[run_id] <= 2, run_id  # at most the interrupted node again
        return rows


@pytest.fixture
def fleet(pg_cluster: PgCluster, tmp_path: Path, request: pytest.FixtureRequest
          ) -> Iterator[Fleet]:
    url = pg_cluster.create_schema(f"fleet_{secrets.token_hex(4)}")
    made = Fleet(tmp_path, url, lease=request.param)
    try:
        yield made
    finally:
        made.stop_all()


@pytest.mark.parametrize("fleet", [2.0], indirect=True)
def test_three_hosts_drain_the_queue_with_one_killed_and_restarted(fleet: Fleet) -> None:
    ids = fleet.enqueue(LAUNCHES)
    for name in ("h1", "h2", "h3"):
        fleet.start(name)
    wait_until(lambda: fleet.counts()["done"] >= 5, timeout=180, what="five runs done")
    fleet.kill("h1")
    fleet.start("h1")
    wait_until(fleet.all_ended, timeout=240, what=lambda: f"every launch ended: {fleet.counts()}")
    rows = fleet.check_invariants(ids)
    assert {status for status, _, _ in rows.values()} == {"done"}


@pytest.mark.parametrize("fleet", [120.0], indirect=True)
def test_hosts_survive_the_server_restarting_under_load(
    fleet: Fleet, pg_cluster: PgCluster
) -> None:
    ids = fleet.enqueue(LAUNCHES)
    for name in ("h1", "h2", "h3"):  # a poll far beyond the waits: notices wake them
        fleet.start(name, "--poll", str(IDLE_POLL))
    # Every host up first: one still opening its store when the server goes away exits
    # with the one-line error, which is start-up's behaviour, not what is tested here.
    wait_until(lambda: all("Ctrl-C stops it" in (fleet.root / f"{n}.log").read_text()
                           for n in ("h1", "h2", "h3")), timeout=120, what="three hosts up")
    wait_until(lambda: fleet.counts()["done"] >= 5, timeout=180, what="five runs done")
    pg_cluster.restart()
    restarted = time.monotonic()
    # A host that let go of a run while the server was down gives its lease back once
    # it answers again: the runs are taken over at once, not after the 120 s lease.
    wait_until(fleet.all_ended, timeout=fleet.lease / 2,
               what=lambda: f"every launch ended well before the lease: {fleet.counts()}")
    assert time.monotonic() - restarted < fleet.lease / 2
    assert all(p.poll() is None for p in fleet.hosts.values())  # no host died of it
    # The hosts listen again: a batch queued while they are idle after the restart is
    # claimed on its notices (their poll would take IDLE_POLL seconds).
    ids += fleet.enqueue(AFTER_RESTART)
    wait_until(lambda: fleet.all_ended(LAUNCHES + AFTER_RESTART), timeout=IDLE_POLL * 0.75,
               what=lambda: f"the batch queued after the restart: {fleet.counts()}")
    rows = fleet.check_invariants(ids)
    # Every one finished, each side effect once: a write waits out the restart (its
    # patience is longer), and a run let go on a failed read is handed back before
    # any node of it ran unrecorded, so the next holder repeats nothing.
    assert {status for status, _, _ in rows.values()} == {"done"}
    assert collections.Counter(fleet.effects.read_text().split()) == {i: 1 for i in ids}


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


@pytest.mark.parametrize("fleet", [2.0], indirect=True)
def test_a_host_of_two_processes_drains_the_queue_and_outlives_its_killed_worker(
        fleet: Fleet) -> None:
    ids = fleet.enqueue(LAUNCHES)
    fleet.start("h1", "--processes", "2")  # one slot each (`--max-runs 2`)
    host = fleet.hosts["h1"].pid
    wait_until(lambda: fleet.counts()["done"] >= 5, timeout=180, what="five runs done")
    with psycopg.connect(fleet.url) as conn:
        runners = {str(r[0]) for r in conn.execute(
            "SELECT DISTINCT runner_id FROM workflow_run_queue WHERE runner_id IS NOT NULL")}
    [worker] = [p for p in _children(host) if any(r.endswith(f":{p}") for r in runners)]
    assert any(r.endswith(f":{host}") for r in runners)  # both processes claimed runs

    os.kill(worker, signal.SIGKILL)  # its run comes back to the host after its lease

    wait_until(fleet.all_ended, timeout=240, what=lambda: f"every launch ended: {fleet.counts()}")
    rows = fleet.check_invariants(ids)
    assert {status for status, _, _ in rows.values()} == {"done"}
    assert fleet.hosts["h1"].poll() is None  # the host goes on without it
    log = (fleet.root / "h1.log").read_text()
    assert f"wfrun host: worker process {worker} ended (signal 9)" in log
