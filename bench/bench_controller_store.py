"""Controller store benchmarks: resources, the keyed queue's dedupe, and bulk wake-ups.

    .venv/bin/python bench/bench_controller_store.py            # all figures
    .venv/bin/python bench/bench_controller_store.py --check    # exit 1 if the aim is missed
    .venv/bin/python bench/bench_controller_store.py --resources 2000   # a quicker run

On a fresh SqliteStore in a temporary folder (WAL, synchronous=FULL):

(a) `resources.apply` of N resources (10,000), one fsync'd transaction each;
    every apply also enqueues its key.
(b) dedupe: 10 duplicate wake-ups for each of the N keys (100,000 wake-ups)
    with one `enqueue_many`; the queue must still hold exactly N rows. Also the
    same for a sample of keys through single `enqueue` calls (one transaction
    each), to show what batching saves.
(c) the same 100,000 wake-ups while every key is claimed (each row goes dirty).
(d) 100,000 *distinct* wake-ups (no dedupe to help) with one `enqueue_many`.
(e) claim_next + complete(settled) cycles over 1,000 keys.

Aim (brief; 2-core machine): 100,000 wake-ups through `enqueue_many` <= 10 s.
"""

from __future__ import annotations

import argparse
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runner.store import SqliteStore  # noqa: E402

C = "bench"
DUPLICATES = 10
SINGLE_SAMPLE_KEYS = 200
CYCLES = 1000
WAKEUPS = 100_000
AIM_WAKEUPS_SECONDS = 10.0


def timed(action: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def rows(store: SqliteStore) -> int:
    return len(store.reconcile_queue.list(C))


def run(resources: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        store = SqliteStore(Path(folder) / ".wfrun" / "state" / "store.sqlite3")
        keys = [f"pr-{i:06}" for i in range(resources)]

        seconds, _ = timed(lambda: [store.resources.apply(C, k, {"n": k}) for k in keys])
        figures["apply_ms"] = seconds / resources * 1000
        print(f"(a) apply {resources:,} resources: {seconds:.2f} s "
              f"({figures['apply_ms']:.2f} ms each, key enqueued in the same transaction)")
        assert rows(store) == resources

        wakeups = [(C, k) for _ in range(DUPLICATES) for k in keys]
        seconds, taken = timed(lambda: store.reconcile_queue.enqueue_many(wakeups))
        assert taken == len(wakeups)
        assert rows(store) == resources, "dedupe failed"
        figures["dedupe_batch_s"] = seconds
        print(f"(b) {len(wakeups):,} wake-ups ({DUPLICATES} per key) in one enqueue_many: "
              f"{seconds:.3f} s (deduped in Python to {resources:,} keys first, then one "
              f"transaction writing {resources:,} rows) -> {rows(store):,} rows")
        sample = keys[:SINGLE_SAMPLE_KEYS]
        seconds, _ = timed(
            lambda: [store.reconcile_queue.enqueue(C, k) for _ in range(DUPLICATES) for k in sample]
        )
        calls = DUPLICATES * len(sample)
        figures["enqueue_single_ms"] = seconds / calls * 1000
        print(f"    {calls:,} single enqueue calls: {seconds:.2f} s "
              f"({figures['enqueue_single_ms']:.2f} ms each; {len(wakeups):,} this way would "
              f"take ~{figures['enqueue_single_ms'] * len(wakeups) / 1000:.0f} s)")
        assert rows(store) == resources

        claimed = 0
        while store.reconcile_queue.claim_next(runner_id="bench", lease_seconds=600) is not None:
            claimed += 1
        assert claimed == resources
        seconds, _ = timed(lambda: store.reconcile_queue.enqueue_many(wakeups))
        dirty = sum(1 for item in store.reconcile_queue.list(C) if item.dirty)
        assert dirty == resources
        figures["dirty_batch_s"] = seconds
        print(f"(c) {len(wakeups):,} wake-ups for {resources:,} claimed keys: {seconds:.3f} s "
              f"(deduped to {resources:,} row writes, as in b) -> {dirty:,} dirty rows")

        fresh = SqliteStore(Path(folder) / "fresh.sqlite3")
        distinct = [(C, f"wake-{i:06}") for i in range(WAKEUPS)]
        seconds, _ = timed(lambda: fresh.reconcile_queue.enqueue_many(distinct))
        assert rows(fresh) == WAKEUPS
        figures["distinct_batch_s"] = seconds
        print(f"(d) {WAKEUPS:,} distinct wake-ups in one enqueue_many: {seconds:.3f} s "
              f"({WAKEUPS:,} row writes in one transaction: nothing to dedupe)")

        def cycles() -> None:
            q = fresh.reconcile_queue
            for _ in range(CYCLES):
                item = q.claim_next(runner_id="bench", lease_seconds=30)
                assert item is not None
                assert item.claim_token is not None
                q.complete(item.controller, item.key, item.claim_token, outcome="settled")

        seconds, _ = timed(cycles)
        figures["cycle_ms"] = seconds / CYCLES * 1000
        print(f"(e) {CYCLES:,} claim+complete cycles: {seconds:.2f} s "
              f"({figures['cycle_ms']:.2f} ms per cycle, two transactions)")
        fresh.close()
        store.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    parser.add_argument("--resources", type=int, default=10_000)
    parser.add_argument("--check", action="store_true", help="exit 1 if the aim is missed")
    args = parser.parse_args()
    if args.smoke:
        args.resources = 50
    print(f"python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
          f"{platform.machine()}")
    figures = run(args.resources)
    worst = max(figures["dedupe_batch_s"], figures["dirty_batch_s"], figures["distinct_batch_s"])
    verdict = "met" if worst <= AIM_WAKEUPS_SECONDS else "MISSED"
    print(f"aim: 100,000 wake-ups <= {AIM_WAKEUPS_SECONDS:.0f} s in one enqueue_many; slowest "
          f"of (b), (c), (d) {worst:.3f} s -> {verdict}")
    if args.check and worst > AIM_WAKEUPS_SECONDS:
        sys.exit(1)


if __name__ == "__main__":
    main()
