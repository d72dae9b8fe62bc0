"""Controller runtime benchmark: no-op reconcile passes per second on SQLite.

    .venv/bin/python bench/bench_controllers.py            # all figures
    .venv/bin/python bench/bench_controllers.py --check    # exit 1 if the aim is missed
    .venv/bin/python bench/bench_controllers.py --profile  # cProfile of one thread, top 30

A fresh store (`SqliteStore`: WAL, synchronous=FULL, BEGIN IMMEDIATE per write)
in a temporary folder on the normal disk; N resources of a controller whose
reconcile returns `ctx.settled()` at once (with one Ready condition, so every
pass writes status). A pass is everything the manager does for one key: claim,
read, `reconcile_started` event, reconcile, CAS status write, queue completion,
`reconcile_finished` event.

(a) 4 workers (`ControllerManager.start()`, workers=4): wall time from start
    until every resource reports observed_generation = generation.
(b) 1 thread (`run_until_idle`), for the per-pass cost without contention.
(c) one fsync'd SQLite write transaction on this disk, for scale.

Aim (DESIGN §7, 2-core machine): (a) >= 1,000 passes/s.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runner.controllers import (  # noqa: E402
    Condition,
    ControllerManager,
    ManagerConfig,
    ReconcileContext,
    Result,
    define_controller,
)
from runner.store import SqliteStore  # noqa: E402

AIM_PER_SECOND = 1000.0
READY = [Condition("Ready", "True", "NoOp")]


def noop(ctx: ReconcileContext, resource: Any) -> Result:
    return ctx.settled(None, READY)


def seed(folder: Path, n: int) -> tuple[SqliteStore, ControllerManager]:
    store = SqliteStore(folder / "store.sqlite3")
    ctl = define_controller("noop", noop, timeout=None)
    manager = ControllerManager(store, [ctl], config=ManagerConfig(workers=4, idle_poll=0.01))
    for i in range(n):
        manager.apply("noop", f"key-{i:05d}", {"i": i})
    return store, manager


def all_done(store: SqliteStore) -> bool:
    return not store.reconcile_queue.list("noop")


def bench_workers(n: int, where: str | None = None) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="wfrun-bench-ctl-", dir=where) as tmp:
        store, manager = seed(Path(tmp), n)
        started = time.perf_counter()
        manager.start()
        # Poll the pass counter, not the queue: listing 2,000 rows every few ms would
        # compete with the workers for the interpreter and skew the figure.
        while manager.passes < n:
            time.sleep(0.005)
        while not all_done(store):  # the last completions commit just after the count
            time.sleep(0.002)
        elapsed = time.perf_counter() - started
        manager.stop(grace=5)
        passes = manager.passes
        done = sum(r.status.get("observed_generation") == r.generation
                   for r in store.resources.list("noop"))
        store.close()
    assert done == n, f"only {done} of {n} resources were reconciled"
    return elapsed, passes


def bench_one_thread(n: int, profile: bool = False,
                     where: str | None = None) -> tuple[float, str]:
    with tempfile.TemporaryDirectory(prefix="wfrun-bench-ctl-", dir=where) as tmp:
        store, manager = seed(Path(tmp), n)
        prof = cProfile.Profile() if profile else None
        started = time.perf_counter()
        if prof:
            prof.enable()
        passes = manager.run_until_idle(max_passes=n + 10)
        if prof:
            prof.disable()
        elapsed = time.perf_counter() - started
        store.close()
    assert passes == n, passes
    text = ""
    if prof:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(30)
        text = out.getvalue()
    return elapsed, text


def fsync_write_ms(count: int = 200, where: str | None = None) -> float:
    with tempfile.TemporaryDirectory(prefix="wfrun-bench-ctl-", dir=where) as tmp:
        conn = sqlite3.connect(Path(tmp) / "x.sqlite3", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
        started = time.perf_counter()
        for i in range(count):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (?, ?)", (i, "x"))
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - started
        conn.close()
    return elapsed / count * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=2000, help="resources (default 2000)")
    ap.add_argument("--check", action="store_true", help="exit 1 if the aim is missed")
    ap.add_argument("--profile", action="store_true", help="profile (b) and print the top 30")
    args = ap.parse_args()
    profile = ""

    print(f"python {platform.python_version()}  sqlite {sqlite3.sqlite_version}  "
          f"cpus {os.cpu_count()}  {platform.machine()}")
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    rate = 0.0
    for label, where in (("disk", None), ("RAM disk /dev/shm", shm)):
        if label != "disk" and where is None:
            continue
        print(f"-- store on {label}")
        write_ms = fsync_write_ms(where=where)
        print(f"(c) one fsync'd write transaction:         {write_ms:7.3f} ms")
        one, text = bench_one_thread(args.n, args.profile and label == "disk", where)
        profile = profile or text
        print(f"(b) 1 thread, {args.n} no-op passes:   {args.n / one:7.0f} passes/s  "
              f"({one / args.n * 1000:.3f} ms per pass)")
        elapsed, passes = bench_workers(args.n, where)
        print(f"(a) 4 workers, {args.n} no-op passes:  {passes / elapsed:7.0f} passes/s  "
              f"({passes} passes in {elapsed:.2f} s; aim >= {AIM_PER_SECOND:.0f}/s)")
        if label == "disk":
            rate = passes / elapsed
    if profile:
        print(profile)
    if args.check and rate < AIM_PER_SECOND:
        print(f"MISSED: {rate:.0f} passes/s < {AIM_PER_SECOND:.0f}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
