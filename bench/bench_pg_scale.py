"""Durable 3-node runs through real `wfrun host` processes: Postgres with 1, 2 and 4
hosts on one database, and SQLite in the same run.

    .venv/bin/python bench/bench_pg_scale.py                    # 400 launches per row
    .venv/bin/python bench/bench_pg_scale.py --launches 200 --hosts 1,2
    .venv/bin/python bench/bench_pg_scale.py --json

A throwaway PostgreSQL 15 cluster (tests/pgcluster.py; default fsync, with
pg_stat_statements loaded to count statements) holds a `bench` database; each row
gets a fresh schema and fresh host folders (no shared files). SQLite keeps one store
file per project and one host per project, so its rows are one host with the same
number of run slots (`--max-runs` x hosts).

Per row:
1. the hosts start on an empty queue (start-up is not timed; its statements are
   measured apart and left out of the per-run counts);
2. N launches are queued through `wfrun start`'s runtime path in this process
   (`LaunchCoordinator.prepare`; p50 is the `workflow start` figure) while the hosts
   drain them;
3. runs/s = N / (last `launch.done` - first claim), on the store's own clock;
4. once done, the hosts stop; per run: commits that wrote (transaction ids given
   out: Postgres gives one only to a transaction that writes, and one more to each
   savepoint that writes, which are left out), transactions begun
   (the BEGINs counted by pg_stat_statements: claims that found nothing are in),
   committed transactions (pg_stat_database: autocommit reads are in too),
   statements, i.e. round trips including BEGIN/COMMIT (pg_stat_statements), and WAL
   flushes (pg_stat_wal.wal_sync), queueing included;
5. pick-up latency: with the hosts idle again, K launches queued one at a time,
   queued -> claimed on the store clock (Postgres: LISTEN/NOTIFY; SQLite: the 0.5 s
   poll). `wfrun start` as a CLI process (interpreter included) is timed too.
Also printed: one fsync'd 4 KiB append, one SQLite synchronous=FULL commit and one
Postgres commit on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # pgcluster
sys.path.insert(0, str(REPO / "bench"))

import psycopg  # noqa: E402
from benchkit import machine, sqlite_commit_cost  # noqa: E402
from pgcluster import PgCluster  # noqa: E402

from runner.compiler import build_catalog  # noqa: E402
from runner.host.runtime._launches import detached_coordinator  # noqa: E402
from runner.host.runtime._local import Workspace, open_store  # noqa: E402

WORKFLOW = """
    start: one
    nodes:
      one: {compute: "{{ 1 }}"}
      two: {compute: "{{ outputs.one + 1 }}"}
      three: {compute: "{{ outputs.two + 1 }}"}
    edges:
      - {from: one, to: two}
      - {from: two, to: three}
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def project(folder: Path) -> Path:
    (folder / ".wfrun" / "workflows").mkdir(parents=True)
    (folder / ".wfrun" / "workflows" / "three.yaml").write_text(textwrap.dedent(WORKFLOW))
    return folder


def workspace(folder: Path, store: str | None) -> Workspace:
    return Workspace(build_catalog("workflows", folder, None), folder, folder / "state",
                     store_flag=store)


# -- the machine ---------------------------------------------------------------------
def fsync_cost(folder: Path, n: int = 50) -> float:
    times = []
    with open(folder / "fsync.probe", "ab") as f:
        for _ in range(n):
            t = time.perf_counter()
            f.write(b"x" * 4096)
            f.flush()
            os.fsync(f.fileno())
            times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def pg_commit_cost(url: str, n: int = 50) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS public.probe (x INTEGER)")
        times = []
        for i in range(n):
            t = time.perf_counter()
            conn.execute("INSERT INTO public.probe VALUES (%s)", (i,))
            times.append((time.perf_counter() - t) * 1000)
        conn.execute("DROP TABLE public.probe")
    return statistics.median(times)


# -- the server's counters -----------------------------------------------------------
@dataclass
class Counters:
    commits: int
    statements: int
    wal_syncs: int
    writes: int = 0  # transactions begun: BEGINs (reads autocommit, without one)
    xids: int = 0  # transactions that wrote: ids given out (only to those), less savepoints

    def __sub__(self, other: Counters) -> Counters:
        return Counters(self.commits - other.commits, self.statements - other.statements,
                        self.wal_syncs - other.wal_syncs, self.writes - other.writes,
                        self.xids - other.xids)


class Server:
    """The cluster, the `bench` database, and counters read from `postgres` (so reading
    them adds nothing to `bench`'s figures)."""

    def __init__(self) -> None:
        self.cluster = PgCluster()
        self.cluster.start()
        with psycopg.connect(self.cluster.admin_url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        self.cluster.restart()
        with psycopg.connect(self.cluster.admin_url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.base = self.cluster.admin_url.rsplit("/", 1)[0] + "/bench"

    def schema(self) -> str:
        name = f"s_{secrets.token_hex(4)}"
        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        return f"{self.base}?options=-csearch_path%3D{name}"

    def counters(self) -> Counters:
        with psycopg.connect(self.cluster.admin_url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            commits = conn.execute("SELECT xact_commit FROM pg_stat_database"
                                   " WHERE datname = 'bench'").fetchone()
            statements = conn.execute(
                "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s"
                " JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = 'bench'").fetchone()
            wal = conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
            writes = conn.execute(
                "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s"
                " JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = 'bench'"
                " AND s.query = 'BEGIN'").fetchone()
            # A savepoint that writes takes a transaction id of its own (every one in
            # wfrun guards an insert): counted to leave it out of the commits.
            savepoints = conn.execute(
                "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s"
                " JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = 'bench'"
                " AND s.query LIKE 'SAVEPOINT %'").fetchone()
            # The next transaction id, without taking one (this read writes nothing).
            xid = conn.execute("SELECT txid_snapshot_xmax(txid_current_snapshot())").fetchone()
        assert xid is not None
        assert savepoints is not None
        assert commits is not None
        assert statements is not None
        assert wal is not None
        assert writes is not None
        return Counters(int(commits[0]), int(statements[0]), int(wal[0]), int(writes[0]),
                        int(xid[0]) - int(savepoints[0]))

    def top_statements(self, limit: int = 25) -> list[tuple[int, str]]:
        with psycopg.connect(self.cluster.admin_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT s.calls, s.query FROM pg_stat_statements s JOIN pg_database d"
                " ON d.oid = s.dbid WHERE d.datname = 'bench' ORDER BY s.calls DESC LIMIT %s",
                (limit,)).fetchall()
        return [(int(c), " ".join(str(q).split())[:150]) for c, q in rows]

    def reset_statements(self) -> None:
        with psycopg.connect(self.cluster.admin_url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")

    def quiet(self) -> None:
        """Wait until no backend is connected to `bench`: their counters are flushed."""
        deadline = time.monotonic() + 60
        with psycopg.connect(self.cluster.admin_url, autocommit=True) as conn:
            while time.monotonic() < deadline:
                row = conn.execute("SELECT count(*) FROM pg_stat_activity"
                                   " WHERE datname = 'bench'").fetchone()
                if row is not None and row[0] == 0:
                    return
                time.sleep(0.05)
        raise RuntimeError("backends still connected to bench")

    def stop(self) -> None:
        self.cluster.stop()


# -- one row -------------------------------------------------------------------------
@dataclass
class Row:
    backend: str
    hosts: int
    slots: int
    launches: int
    runs_per_s: float = 0.0
    start_p50_ms: float = 0.0
    start_cli_p50_ms: float = 0.0
    pickup_p50_ms: float = 0.0
    pickup_p99_ms: float = 0.0
    per_run: dict[str, float] = field(default_factory=dict)


class Fleet:
    def __init__(self, root: Path, store: str | None, names: list[str], max_runs: int) -> None:
        self.root = root
        self.store = store
        self.max_runs = max_runs
        self.names = names
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        for name in self.names:
            folder = self.root / name
            argv = [sys.executable, "-m", "runner", "--project", str(folder)]
            if self.store is not None:
                argv += ["--store", self.store]
            argv += ["host", "--max-runs", str(self.max_runs), "--no-controllers", "--quiet"]
            log = (self.root / f"{name}.log").open("ab")
            self.procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log,
                                               cwd=folder, start_new_session=True))
            log.close()
        for name, proc in zip(self.names, self.procs, strict=True):
            lock = self.root / name / ".wfrun" / "state" / "host.lock"
            wait(lambda lock=lock, proc=proc: lock.exists()  # type: ignore[misc]
                 and lock.read_text().strip() == str(proc.pid), f"{name} ready")

    def stop(self) -> None:
        for proc in self.procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            proc.wait(timeout=60)
        self.procs = []


def wait(check: Callable[[], Any], what: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out: {what}")
        time.sleep(0.02)


def launch_times(ws: Workspace) -> tuple[dict[str, dict[str, int]], int]:
    """Per run: recorded_at of its queued, starting and done events; and done count."""
    store = open_store(ws)
    try:
        events: dict[str, dict[str, int]] = {}
        for event in store.run_events.read(after_seq=0, limit=1_000_000):
            events.setdefault(event.run_id, {}).setdefault(event.type, event.recorded_at)
        done = store.launches.counts().get("done", 0)
    finally:
        store.close()
    return events, done


def done_count(ws: Workspace) -> int:
    store = open_store(ws)
    try:
        return store.launches.counts().get("done", 0)
    finally:
        store.close()


def bench_row(root: Path, backend: str, hosts: int, max_runs: int, launches: int,
              pickups: int, server: Server | None, statements: bool = False,
              cli_starts: int = 5) -> Row:
    row = Row(backend, hosts, hosts * max_runs, launches)
    url = server.schema() if server is not None else None
    names = [f"h{i}" for i in range(1, hosts + 1)] if url else ["h1"]
    for name in names:
        project(root / name)
    if url is not None:
        enqueuer = workspace(project(root / "enqueuer"), url)
    else:
        enqueuer = workspace(root / "h1", None)
    fleet = Fleet(root, url, names, max_runs if url else hosts * max_runs)
    started = server.counters() if server else None
    fleet.start()
    if server is not None and started is not None:
        fleet.stop()  # start-up once on its own, to leave it out of the per-run counts
        server.quiet()
        startup = server.counters() - started
        fleet.start()
    if server is not None and statements:
        server.reset_statements()
    before = server.counters() if server else None

    store = open_store(enqueuer)
    coordinator = detached_coordinator(enqueuer, store)
    starts = []
    monitor_reads = 0
    try:
        for _ in range(launches):
            t = time.perf_counter()
            coordinator.prepare("three", {})
            starts.append((time.perf_counter() - t) * 1000)
    finally:
        store.close()

    def all_done() -> bool:
        nonlocal monitor_reads
        monitor_reads += 1
        return done_count(enqueuer) >= launches

    wait(all_done, "every launch done")
    events, _ = launch_times(enqueuer)
    monitor_reads += 1
    first = min(e["launch.starting"] for e in events.values())
    last = max(e["launch.done"] for e in events.values())
    row.runs_per_s = launches / max((last - first) / 1000, 1e-9)
    row.start_p50_ms = statistics.median(starts)
    if server is not None and before is not None:
        fleet.stop()
        server.quiet()
        spent = server.counters() - before - startup
        # Each monitor read (open_store's layout check included) is counted apart.
        if statements:
            print(f"# statements per run, {hosts} host(s) (monitor reads included):")
            for calls, query in server.top_statements():
                print(f"#   {calls / launches:6.2f}  {query}")
        reads = measure_reads(server, enqueuer)
        row.per_run = {
            "commits": (spent.commits - monitor_reads * reads.commits) / launches,
            "statements": (spent.statements - monitor_reads * reads.statements) / launches,
            "wal_syncs": (spent.wal_syncs - monitor_reads * reads.wal_syncs) / launches,
            "writes": (spent.writes - monitor_reads * reads.writes) / launches,
            "xids": (spent.xids - monitor_reads * reads.xids) / launches,
        }
        fleet.start()

    # Pick-up latency with idle hosts: one launch at a time.
    store = open_store(enqueuer)
    coordinator = detached_coordinator(enqueuer, store)
    try:
        ids = []
        for n in range(pickups):
            ids.append(coordinator.prepare("three", {}).run_id)
            wait(lambda n=n: (store.launches.counts().get("done", 0)  # type: ignore[misc]
                              >= launches + n + 1), "pick-up")
    finally:
        store.close()
    events, _ = launch_times(enqueuer)
    lat = [events[i]["launch.starting"] - events[i]["launch.queued"] for i in ids]
    row.pickup_p50_ms = pct([float(x) for x in lat], 0.5)
    row.pickup_p99_ms = pct([float(x) for x in lat], 0.99)
    cli = []
    for _ in range(cli_starts):
        argv = [sys.executable, "-m", "runner", "--project", str(enqueuer.project_root)]
        if url is not None:
            argv += ["--store", url]
        t = time.perf_counter()
        subprocess.run([*argv, "start", "three", "--quiet"], check=True, capture_output=True,
                       cwd=enqueuer.project_root)
        cli.append((time.perf_counter() - t) * 1000)
    row.start_cli_p50_ms = statistics.median(cli)
    fleet.stop()
    return row


def measure_reads(server: Server, ws: Workspace) -> Counters:
    """What one `done_count` (an open, a count, a close) costs the server."""
    before = server.counters()
    for _ in range(5):
        done_count(ws)
    server.quiet()
    spent = server.counters() - before
    return Counters(spent.commits // 5, spent.statements // 5, spent.wal_syncs // 5,
                    spent.writes // 5, spent.xids // 5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true",
        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    parser.add_argument("--launches", type=int, default=400)
    parser.add_argument("--hosts", default="1,2,4")
    parser.add_argument("--max-runs", type=int, default=2, help="run slots per host")
    parser.add_argument("--pickups", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--statements", action="store_true",
                        help="print each Postgres row's statements per run")
    parser.add_argument("--cli-starts", type=int, default=5, help="timed `wfrun start`s per row")
    args = parser.parse_args()
    if args.smoke:
        args.launches, args.hosts, args.pickups, args.cli_starts = 4, "1", 1, 1
    counts = [int(h) for h in args.hosts.split(",")]
    rows: list[Row] = []
    server = Server()
    try:
        with tempfile.TemporaryDirectory(prefix="wfrun-pgscale-") as tmp:
            base = Path(tmp)
            fsync_ms = fsync_cost(base)
            sqlite_ms = sqlite_commit_cost(base)
            pg_ms = pg_commit_cost(server.base)
            n = 0
            for hosts in counts:  # interleaved, so both backends see the same load
                for backend in ("postgres", "sqlite"):
                    n += 1
                    folder = base / f"row{n}"
                    folder.mkdir()
                    rows.append(bench_row(folder, backend, hosts, args.max_runs, args.launches,
                                          args.pickups,
                                          server if backend == "postgres" else None,
                                          args.statements, args.cli_starts))
                    if not args.json:
                        print_row(rows[-1])
    finally:
        server.stop()
    if args.json:
        print(json.dumps({"machine": machine(), "fsync_ms": fsync_ms,
                          "sqlite_commit_ms": sqlite_ms, "pg_commit_ms": pg_ms,
                          "rows": [r.__dict__ for r in rows]}, indent=2))
        return 0
    print(f"# {machine()}")
    print(f"# fsync'd 4 KiB append p50 {fsync_ms:.2f} ms; SQLite FULL commit p50 "
          f"{sqlite_ms:.2f} ms; Postgres commit p50 {pg_ms:.2f} ms")
    pg: dict[int, list[float]] = {}
    for r in rows:
        if r.backend == "postgres":
            pg.setdefault(r.hosts, []).append(r.runs_per_s)
    if 1 in pg:  # medians of the repeated rows (`--hosts 1,2,4,4,2,1`)
        one = statistics.median(pg[1])
        print("# Postgres runs/s vs 1 host (medians): " + ", ".join(
            f"{h} hosts {statistics.median(v) / one:.2f}x" for h, v in sorted(pg.items())
            if h != 1))
    return 0


def print_row(r: Row) -> None:
    who = f"{r.hosts} host(s)" if r.backend == "postgres" else f"1 host, {r.slots} slots"
    per = ""
    if r.per_run:
        per = (f"  per run: {r.per_run['xids']:.2f} commits that wrote, "
               f"{r.per_run['writes']:.2f} transactions begun (empty claims too), "
               f"{r.per_run['commits']:.1f} server commits (autocommit reads too), "
               f"{r.per_run['statements']:.1f} statements, "
               f"{r.per_run['wal_syncs']:.1f} WAL flushes")
    print(f"{r.backend:8} {who:17} {r.runs_per_s:6.1f} runs/s  pick-up p50 "
          f"{r.pickup_p50_ms:5.0f} ms p99 {r.pickup_p99_ms:5.0f} ms  start p50 "
          f"{r.start_p50_ms:5.1f} ms (CLI {r.start_cli_p50_ms:4.0f} ms){per}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
