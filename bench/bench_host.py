"""Standalone host throughput: drain N detached trivial 3-node launches, durable end to end.

    .venv/bin/python bench/bench_host.py                 # in-process and CLI figures
    .venv/bin/python bench/bench_host.py --check         # exit 1 if the aim is missed
    .venv/bin/python bench/bench_host.py --profile       # CPU profile of (a), all threads
    .venv/bin/python bench/bench_host.py --json

Setup (untimed): a temporary project with one workflow of three `compute` nodes,
and N launches queued through `LaunchCoordinator.prepare` (the `wfrun start`
path) on a real `SqliteStore` (WAL, synchronous=FULL).

Timed: the host draining the queue until every launch is `done`:
(a) in process: `StandaloneHost(...).run(once=True)` (no interpreter start);
(b) CLI: `wfrun host --once --max-runs M` in a subprocess (includes the
    interpreter start and imports, reported separately).
Every run writes a full run bundle (trace fsynced per node, `durability=full`),
and every launch goes queued -> starting -> running -> done in the store.
Afterwards the bench checks that all N bundles say `completed`.

Aim (DESIGN §8; 2-core machine): >= 150 runs/s.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runner.compiler import build_catalog  # noqa: E402
from runner.engine._bundlefmt import MANIFEST  # noqa: E402
from runner.engine._bundleread import read_json  # noqa: E402
from runner.host._daemon import StandaloneHost  # noqa: E402
from runner.host.runtime._launches import detached_coordinator  # noqa: E402
from runner.host.runtime._local import Workspace  # noqa: E402
from runner.store import SqliteStore  # noqa: E402

AIM_RUNS_PER_S = 150.0
WORKFLOW = """\
input: {type: object, properties: {n: {type: integer}}}
start: one
nodes:
  one: {compute: "{{ input.n | default(0) }}"}
  two: {compute: "{{ outputs.one + 1 }}"}
  three: {compute: "{{ {'sum': outputs.one + outputs.two} }}"}
edges:
  - {from: one, to: two}
  - {from: two, to: three}
"""


def make_project(base: Path) -> Path:
    root = base / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "tiny3.yaml").write_text(WORKFLOW)
    return root


def workspace(root: Path) -> Workspace:
    return Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")


def store_of(root: Path) -> SqliteStore:
    return SqliteStore(root / ".wfrun" / "state" / "store.sqlite3")


def enqueue(root: Path, n: int) -> float:
    ws = workspace(root)
    store = store_of(root)
    coord = detached_coordinator(ws, store)
    t0 = time.perf_counter()
    for i in range(n):
        coord.prepare("tiny3", {"n": i})
    took = time.perf_counter() - t0
    store.close()
    return took


def verify(root: Path, n: int) -> dict[str, int]:
    store = store_of(root)
    counts = {s: len(store.launches.query(statuses=[s]))
              for s in ("queued", "starting", "running", "parked", "done", "failed")}
    store.close()
    runs = root / ".wfrun" / "runs"
    completed = sum(1 for d in runs.iterdir() if not d.name.startswith(".")  # .snapshots
                    if read_json(d / MANIFEST).get("status") == "completed")
    counts["bundles_completed"] = completed
    if counts["done"] != n or completed != n:
        raise SystemExit(f"not drained: {counts}")
    return counts


def bench_inprocess(root: Path, n: int, max_runs: int, profile: bool) -> dict[str, Any]:
    enqueue(root, n)
    ws = workspace(root)
    store = store_of(root)
    host = StandaloneHost(ws, store, max_runs=max_runs)
    profiles: list[cProfile.Profile] = []
    if profile:
        # Runs execute on their own threads: profile each (CPU time) and merge them.
        execute = host._execute
        guard = threading.Lock()

        def profiled(*args: Any) -> None:
            prof = cProfile.Profile(time.thread_time)
            prof.enable()
            try:
                execute(*args)
            finally:
                prof.disable()
                with guard:
                    profiles.append(prof)

        host._execute = profiled  # type: ignore[method-assign]
        profiles.append(cProfile.Profile(time.thread_time))
        profiles[0].enable()
    t0 = time.perf_counter()
    report = host.run(once=True)
    took = time.perf_counter() - t0
    if profiles:
        profiles[0].disable()
        out = io.StringIO()
        stats = pstats.Stats(profiles[0], stream=out)
        for prof in profiles[1:]:
            stats.add(prof)
        stats.sort_stats("tottime").print_stats(35)
        print(out.getvalue())
    store.close()
    counts = verify(root, n)
    return {"n": n, "max_runs": max_runs, "seconds": round(took, 3),
            "runs_per_s": round(n / took, 1), "started": report.started, "counts": counts}


def bench_cli(root: Path, n: int, max_runs: int) -> dict[str, Any]:
    enqueue(root, n)
    argv = [sys.executable, "-m", "runner", "--project", str(root), "host", "--once",
            "--max-runs", str(max_runs), "--no-controllers", "-q"]
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, cwd=root)
    took = time.perf_counter() - t0
    # The interpreter start and imports, measured with an empty queue.
    t1 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, cwd=root)
    empty = time.perf_counter() - t1
    counts = verify(root, n)
    return {"n": n, "max_runs": max_runs, "seconds": round(took, 3),
            "runs_per_s": round(n / took, 1), "empty_host_s": round(empty, 3),
            "runs_per_s_excluding_start": round(n / max(took - empty, 1e-9), 1),
            "counts": counts}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true",
        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    ap.add_argument("-n", type=int, default=1000, help="launches to drain")
    ap.add_argument("--max-runs", type=int, default=4)
    ap.add_argument("--check", action="store_true", help="exit 1 if the aim is missed")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-cli", action="store_true", help="skip the subprocess figure")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.smoke:
        args.n = 10
    with tempfile.TemporaryDirectory(prefix="wfrun-bench-host-") as tmp:
        base = Path(tmp)
        figures: dict[str, Any] = {
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                        "sqlite": sqlite3.sqlite_version},
            "inprocess": bench_inprocess(make_project(base / "a"), args.n, args.max_runs,
                                         args.profile),
        }
        if args.profile:
            return 0
        if not args.no_cli:
            figures["cli"] = bench_cli(make_project(base / "b"), args.n, args.max_runs)
    best = max(figures["inprocess"]["runs_per_s"],
               figures.get("cli", {}).get("runs_per_s", 0.0))
    figures["aim_met"] = best >= AIM_RUNS_PER_S
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        m, a = figures["machine"], figures["inprocess"]
        print(f"machine: Python {m['python']}, {m['cpus']} CPUs, SQLite {m['sqlite']}")
        print(f"(a) StandaloneHost.run(once=True), {a['n']} launches, max_runs "
              f"{a['max_runs']}: {a['seconds']} s, {a['runs_per_s']} runs/s")
        if "cli" in figures:
            c = figures["cli"]
            print(f"(b) wfrun host --once --max-runs {c['max_runs']}, {c['n']} launches: "
                  f"{c['seconds']} s, {c['runs_per_s']} runs/s ({c['runs_per_s_excluding_start']}"
                  f" runs/s without the {c['empty_host_s']} s process start)")
        print(f"aim >= {AIM_RUNS_PER_S} runs/s: {'met' if figures['aim_met'] else 'NOT met'}")
    return 0 if (figures["aim_met"] or not args.check) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
