"""Run bundles in a folder and in Postgres rows, in the same run: what the bundle of
one 3-node run costs (runner/engine/_space.py).

    .venv/bin/python bench/bench_bundle_spaces.py               # a throwaway PG 15 cluster
    .venv/bin/python bench/bench_bundle_spaces.py --url postgresql://u@h/db  # an existing one
    .venv/bin/python bench/bench_bundle_spaces.py --runs 50               # quicker

Per space: N runs of a 3-node compute workflow through `Engine.start` (no launch
queue: the bundle alone; Postgres writes carry no claim, so the fence query is not
in these figures, add one `SELECT ... FOR SHARE` per write for it). Printed: runs/s,
p50/p99 per run, bundle writes per run (rows-protocol calls), and on Postgres the
server's committed transactions per run (pg_stat_database.xact_commit, reads
included) and the rows a run leaves.
"""

from __future__ import annotations

import argparse
import platform
import secrets
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # pgcluster

from bundlespaces import CHAIN3

from runner.compiler import Compiler, WorkflowDefinition
from runner.engine import Engine

WORKFLOW = CHAIN3
WRITES = ("create_bundle", "append_events", "put_document", "put_artifact",
          "truncate_events", "seal_bundle", "write_batch")


class Counting:
    """A rows object that counts the write calls it passes on."""

    def __init__(self, rows: Any) -> None:
        self.rows = rows
        self.writes = 0

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.rows, name)
        if name not in WRITES:
            return target

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.writes += 1
            return target(*args, **kwargs)
        return counted


def _definition(root: Path) -> WorkflowDefinition:
    path = root / "three.yaml"
    path.write_text(textwrap.dedent(WORKFLOW))
    out = Compiler().compile_path(path)
    assert out.definition is not None
    return out.definition


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _runs(engine: Engine, definition: WorkflowDefinition, n: int) -> tuple[float, list[float]]:
    spent: list[float] = []
    start = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        out = engine.start(definition, run_id=f"three-{secrets.token_hex(6)}-{i}")
        assert out.status == "completed", out.error
        spent.append(time.perf_counter() - t)
    return time.perf_counter() - start, spent


def _commits(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT xact_commit FROM pg_stat_database"
                           " WHERE datname = current_database()").fetchone()
    assert row is not None
    return int(row[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true",
        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--url", help="an existing database (default: a throwaway cluster)")
    args = parser.parse_args()
    if args.smoke:
        args.runs = 5
    print(f"{platform.platform()}, python {platform.python_version()}, {args.runs} runs of a "
          "3-node compute workflow per space")
    print(f"{'space':<10} {'runs/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'writes/run':>11} "
          f"{'commits/run':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        definition = _definition(root)
        total, spent = _runs(Engine(runs_dir=root / "runs"), definition, args.runs)
        print(f"{'folder':<10} {args.runs / total:>8.1f} {_pct(spent, 0.5):>8.2f} "
              f"{_pct(spent, 0.99):>8.2f} {'(files)':>11} {'-':>12}")
        cluster = None
        url = args.url
        if url is None:
            from pgcluster import PgCluster

            cluster = PgCluster()
            cluster.start()
            url = cluster.create_schema(f"bench_{secrets.token_hex(4)}")
        try:
            from runner.store.postgres import PostgresStore

            with PostgresStore(url, pool_size=2) as store:
                rows = Counting(store.bundles)
                engine = Engine(runs_dir=root / "pg-logs", rows=rows)
                before = _commits(url)
                total, spent = _runs(engine, definition, args.runs)
                commits = (_commits(url) - before) / args.runs
                print(f"{'postgres':<10} {args.runs / total:>8.1f} {_pct(spent, 0.5):>8.2f} "
                      f"{_pct(spent, 0.99):>8.2f} {rows.writes / args.runs:>11.1f} "
                      f"{commits:>12.1f}")
        finally:
            if cluster is not None:
                cluster.stop()


if __name__ == "__main__":
    main()
