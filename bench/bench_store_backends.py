"""The launch queue on SQLite and on Postgres, in the same run: claim latency, the
store's share of a 3-node run's lifecycle, and how it scales with workers.

    .venv/bin/python bench/bench_store_backends.py               # a throwaway PG 15 cluster
    .venv/bin/python bench/bench_store_backends.py --url postgresql://u@h/db  # an existing one
    .venv/bin/python bench/bench_store_backends.py --launches 200              # quicker

Per backend: N launches are enqueued (`enqueue` p50/p99), then W workers (1, 2, 4),
each with its own store handle (its own connection pool on Postgres: as separate
hosts would), drain them with the store calls of one run: `claim_next`,
`mark_running`, `check_claim` x3 (a fence per node), `finish`. Printed: lifecycles
per second and `claim_next` p50/p99. On Postgres also the server's committed
transactions per run (pg_stat_database.xact_commit; autocommit reads count too, so
it is the round trips that commit). Store calls only: the engine and the bundle
writes are not in these figures (bench_run_cost.py has those for SQLite).
"""

from __future__ import annotations

import argparse
import platform
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # pgcluster

from runner.store import NewLaunch, SqliteStore, Store

Opener = Callable[[], Store]


def _launch(i: int) -> NewLaunch:
    return NewLaunch(f"run-{i:06d}", "three", {"kind": "file", "path": "/p/three.yaml",
                                               "sha256": "ab" * 32},
                     "sha256:" + "cd" * 32, {"n": i})


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _drain(open_store: Opener, workers: int) -> tuple[float, list[float], int]:
    claims: list[float] = []
    done = [0]
    lock = threading.Lock()

    def work(n: int) -> None:
        store = open_store()
        try:
            while True:
                t = time.perf_counter()
                record = store.launches.claim_next(runner_id=f"host-{n}")
                spent = time.perf_counter() - t
                if record is None:
                    return
                token = record.claim_token or ""
                store.launches.mark_running(record.run_id, token)
                for _ in range(3):
                    store.launches.check_claim(record.run_id, token)
                store.launches.finish(record.run_id, token)
                with lock:
                    claims.append(spent)
                    done[0] += 1
        finally:
            store.close()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, claims, done[0]


def _xact(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT xact_commit FROM pg_stat_database"
                           " WHERE datname = current_database()").fetchone()
    assert row is not None
    return int(row[0])


def run(name: str, fresh: Callable[[], tuple[Opener, str | None]], launches: int) -> None:
    for workers in (1, 2, 4):
        open_store, url = fresh()
        store = open_store()
        enq: list[float] = []
        for i in range(launches):
            t = time.perf_counter()
            store.launches.enqueue(_launch(i))
            enq.append(time.perf_counter() - t)
        store.close()
        before = _xact(url) if url else 0
        elapsed, claims, done = _drain(open_store, workers)
        after = _xact(url) if url else 0
        per_run = f"  commits/run {(after - before) / max(done, 1):.1f}" if url else ""
        print(f"{name:8} workers={workers}  {done / elapsed:7.1f} lifecycles/s  "
              f"enqueue p50 {_pct(enq, .5):5.2f} ms p99 {_pct(enq, .99):6.2f} ms  "
              f"claim p50 {_pct(claims, .5):5.2f} ms p99 {_pct(claims, .99):6.2f} ms"
              f"{per_run}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true",
        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    parser.add_argument("--launches", type=int, default=500)
    parser.add_argument("--url", help="an existing Postgres database (default: throwaway)")
    args = parser.parse_args()
    if args.smoke:
        args.launches = 10
    print(f"# {platform.platform()}, {launches_text(args.launches)}")

    with tempfile.TemporaryDirectory() as tmp:
        counter = [0]

        def sqlite() -> tuple[Opener, str | None]:
            counter[0] += 1
            path = Path(tmp) / f"{counter[0]}.sqlite3"
            return (lambda: SqliteStore(path)), None

        run("sqlite", sqlite, args.launches)

    cluster = None
    base = args.url
    if base is None:
        from pgcluster import PgCluster

        cluster = PgCluster()
        cluster.start()
    try:
        from runner.store.postgres import PostgresStore

        def postgres() -> tuple[Opener, str | None]:
            if cluster is not None:
                url = cluster.create_schema(f"bench_{secrets.token_hex(4)}")
            else:
                url = str(base)
                PostgresStore.reset(url).close()
            return (lambda: PostgresStore(url, pool_size=2)), url

        run("postgres", postgres, args.launches)
    finally:
        if cluster is not None:
            cluster.stop()


def launches_text(n: int) -> str:
    return f"{n} launches per row; store calls of one 3-node run per lifecycle"


if __name__ == "__main__":
    main()
