"""Launch benchmarks: `workflow start` latency, activation latency, sustained cycles.

    .venv/bin/python bench/bench_launch.py            # all figures
    .venv/bin/python bench/bench_launch.py --check    # exit 1 if an aim is missed
    .venv/bin/python bench/bench_launch.py --profile  # cProfile of the start path, top 30
    .venv/bin/python bench/bench_launch.py --json     # figures as one JSON object
    .venv/bin/python bench/bench_launch.py --cycles-only --rounds 3  # (c) only, 3 times
    .venv/bin/python bench/bench_launch.py --root DIR ...  # `runner` from DIR (an older
        commit: `git archive COMMIT runner | tar -x -C DIR`), to compare in one session

Everything runs on a real `SqliteStore` (WAL, synchronous=FULL) in a temporary
project with a one-node compute workflow that has an input schema.

(a) start: `SessionController.on_tool_call("workflow", {"action": "start", ...})`
    from the call to the committed `queued` row and the reply (the full preflight:
    resolve + validate the workflow and input, the session reservation, the
    insert). Each launch is cancelled (untimed) to free the session reservation.
(b) activation after settle: `claim_next` -> `execute` of a one-node run to its
    recorded ending (activation, the node, the ending's commit and fsyncs).
(c) cycles: N processes on one store file, each looping prepare -> claim ->
    execute (a detached `wfrun start --wait` without the process start),
    for a fixed time; total completed cycles per second, and the mean wait to
    begin a store write (from asking for `SqliteDatabase.transaction` to holding it: the
    in-process lock, the writers' turn, SQLite's busy handler).
(d) turns: N processes on one store file, each writing one row per transaction in a
    tight loop: writes/s and each process's share (the writers' turn alone: is it
    fair, and how fast does it hand over).

Aims (2-core machine): (a) p50 <= 1 ms, p99 <= 10 ms (seed 000); (c) >= 300 cycles/s
with 4 processes (the hot-path issue's aim).
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
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO
if sys.argv[1:2] == ["--root"]:
    ROOT = Path(sys.argv[2]).resolve()
    del sys.argv[1:3]
sys.path.insert(0, str(ROOT))

from benchkit import plain_coordinator, sqlite_commit_cost  # noqa: E402

from runner.compiler import build_catalog  # noqa: E402
from runner.host.runtime._local import Workspace  # noqa: E402
from runner.host.session import SessionController  # noqa: E402
from runner.host.session._protocol import SessionEntry  # noqa: E402
from runner.launch import LaunchCoordinator  # noqa: E402
from runner.store import SqliteStore  # noqa: E402

AIM_START_P50_MS = 1.0
AIM_START_P99_MS = 10.0
AIM_CYCLES_PER_S = 300.0
WORKFLOW = """\
input: {type: object, required: [task], properties: {task: {type: string, maxLength: 200}}}
start: one
nodes:
  one: {compute: "{{ input.task | length }}"}
"""
INPUT = {"task": "benchmark the launch path"}


class QuietHost:
    """The smallest `Host`: always idle, remembers nothing (no session log to scan)."""

    def __init__(self, sid: str) -> None:
        self.sid = sid

    def session_id(self) -> str:
        return self.sid

    def is_idle(self) -> bool:
        return True

    def append_message(self, custom_type: str, content: str, details: dict[str, Any], *,
                       deliver_as: str = "follow_up", trigger_turn: bool = False) -> str:
        return "e"

    def read_session_entries(self) -> Iterable[SessionEntry]:
        return []

    def abort_turn(self) -> None:
        pass

    def notify(self, text: str, level: str = "info") -> None:
        pass


def make_project(base: Path) -> Path:
    root = base / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "tiny.yaml").write_text(WORKFLOW)
    return root


SCRUB = True  # --no-scrub: no WAL checkpoint after input is cleared (to compare)


def coordinator(root: Path, runner_id: str) -> tuple[SqliteStore, LaunchCoordinator]:
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
    store = SqliteStore(root / ".wfrun" / "state" / "store.sqlite3")
    return store, plain_coordinator(ws, store, runner_id,
                                    scrub_input=SCRUB)


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary(samples_s: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples_s]
    return {"n": len(ms), "p50_ms": round(pct(ms, 50), 3), "p90_ms": round(pct(ms, 90), 3),
            "p99_ms": round(pct(ms, 99), 3), "max_ms": round(max(ms), 3),
            "mean_ms": round(statistics.fmean(ms), 3)}


# -- (a) start latency ---------------------------------------------------------------
def bench_start(root: Path, n: int, profile: bool = False) -> dict[str, Any]:
    store, coord = coordinator(root, "bench-start")
    controller = SessionController(QuietHost("bench-session"), coord)
    args = {"action": "start", "workflow": "tiny", "input": INPUT}
    samples: list[float] = []
    profiler = cProfile.Profile() if profile else None
    for i in range(n + 20):
        if profiler is not None and i == 20:
            profiler.enable()
        t0 = time.perf_counter()
        reply = controller.on_tool_call(f"call-{i}", "workflow", args)
        elapsed = time.perf_counter() - t0
        if reply.is_error:
            raise SystemExit(f"start failed: {reply.content}")
        if i >= 20:  # warm-up: imports, first compile, page cache
            samples.append(elapsed)
        coord.cancel(reply.details["runId"])
    if profiler is not None:
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
        print(out.getvalue())
    store.close()
    return summary(samples)


# -- (b) activation latency ----------------------------------------------------------
def bench_activation(root: Path, n: int) -> dict[str, Any]:
    store, coord = coordinator(root, "bench-activate")
    samples: list[float] = []
    for i in range(n + 10):
        coord.prepare("tiny", INPUT)
        t0 = time.perf_counter()
        record = coord.claim_next(None)
        assert record is not None
        # Claim to recorded ending of a one-node run: activation is most of it.
        outcome = coord.execute(record)
        elapsed = time.perf_counter() - t0
        if i >= 10:
            samples.append(elapsed)
        if outcome is None or outcome.status != "completed":
            raise SystemExit(f"the run did not complete: {outcome}")
    store.close()
    return summary(samples)


# -- (c) sustained cycles --------------------------------------------------------------
def _timed_writes() -> tuple[list[float], list[float]]:
    """Wrap the store's write transaction in this worker process, before its store is
    made (the SQLite connector takes `SqliteDatabase.transaction` as its write when
    built; `write` in an older `--root` runner): how long each write waited, and how
    long it then held the writers' turn (its body and COMMIT)."""
    from contextlib import contextmanager

    from runner.store.sqlite import _db as db

    waits: list[float] = []
    holds: list[float] = []
    name = "transaction" if hasattr(db.SqliteDatabase, "transaction") else "write"
    plain = getattr(db.SqliteDatabase, name)

    @contextmanager
    def write(self: Any, *args: Any, **kwargs: Any) -> Any:  # durable= since relaxed commits
        t0 = time.perf_counter()
        with plain(self, *args, **kwargs) as tx:
            t1 = time.perf_counter()
            waits.append(t1 - t0)
            try:
                yield tx
            finally:
                t2 = time.perf_counter()
                holds.append(t2 - t1)

    setattr(db.SqliteDatabase, name, write)
    return waits, holds


def worker(root: Path, seconds: float, start_at: float) -> None:
    waits, holds = _timed_writes()
    store, coord = coordinator(root, f"bench-{os.getpid()}")
    while time.time() < start_at:
        time.sleep(0.001)
    end = time.monotonic() + seconds
    cpu0 = time.process_time()
    del waits[:], holds[:]  # the store's open and the start-up wait are not cycles
    done = 0
    busy = 0
    while time.monotonic() < end:
        record = coord.prepare("tiny", INPUT)
        claimed = store.launches.claim(record.run_id, runner_id=coord.runner_id)
        if not hasattr(claimed, "claim_token"):
            busy += 1
            continue
        outcome = coord.execute(claimed)
        if outcome is not None and outcome.status == "completed":
            done += 1
    print(json.dumps({"done": done, "lost": busy, "cpu_s": time.process_time() - cpu0,
                      "writes": len(waits), "wait_s": sum(waits), "hold_s": sum(holds)}))
    store.close()


def bench_cycles(root: Path, procs: int, seconds: float) -> dict[str, Any]:
    setup = coordinator(root, "bench-setup")[0]  # create the store before the race
    settings = setup.settings()
    setup.close()
    start_at = time.time() + 1.5  # every worker imported and opened before the clock runs
    rooted = ["--root", str(ROOT)] if ROOT != REPO else []
    children = [subprocess.Popen([sys.executable, __file__, *rooted, "--worker", str(root),
                                  str(seconds), str(start_at), "1" if SCRUB else "0"],
                                 stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    results = []
    for child in children:
        out, _ = child.communicate(timeout=seconds + 60)
        if child.returncode != 0:
            raise SystemExit(f"a cycle worker failed ({child.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    done = sum(r["done"] for r in results)
    cpu = sum(r["cpu_s"] for r in results)
    return {"procs": procs, "seconds": seconds, "cycles": done,
            "cycles_per_s": round(done / seconds, 1), "lost": sum(r["lost"] for r in results),
            "per_proc": [r["done"] for r in results],
            "wait_ms_per_write": round(sum(r["wait_s"] for r in results) * 1000
                                       / max(sum(r["writes"] for r in results), 1), 3),
            "hold_ms_per_write": round(sum(r["hold_s"] for r in results) * 1000
                                       / max(sum(r["writes"] for r in results), 1), 3),
            "writes_per_cycle": round(sum(r["writes"] for r in results) / max(done, 1), 2),
            # Share of the run's time some process held the writers' turn: near 1.0,
            # the turn (one writer at a time) is what limits the cycles.
            "turn_busy": round(sum(r["hold_s"] for r in results) / seconds, 3),
            "cpu_ms_per_cycle": round(cpu / max(done, 1) * 1000, 3),
            "cpu_bound_cycles_per_s": round((os.cpu_count() or 1) / max(cpu / max(done, 1),
                                                                        1e-9), 1),
            "store_settings": settings}


# -- (d) the writers' turn alone ------------------------------------------------------
def turn_worker(path: Path, seconds: float, start_at: float) -> None:
    from runner.store.sqlite._db import SqliteDatabase

    db = SqliteDatabase(path)
    while time.time() < start_at:
        time.sleep(0.001)
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        with db.write() as conn:
            conn.execute("INSERT INTO t VALUES (?)", ("x" * 100,))
        n += 1
    print(json.dumps({"writes": n}))
    db.close()


def bench_turns(folder: Path, procs: int, seconds: float) -> dict[str, Any]:
    from runner.store.sqlite._open import open_database

    path = folder / "turns.sqlite3"
    db = open_database(path, now_ms=0, busy_timeout_ms=30_000)
    with db.write() as conn:
        conn.execute("CREATE TABLE t (v TEXT)")
    db.close()
    start_at = time.time() + 1.0
    rooted = ["--root", str(ROOT)] if ROOT != REPO else []
    children = [subprocess.Popen([sys.executable, __file__, *rooted, "--turn-worker", str(path),
                                  str(seconds), str(start_at)], stdout=subprocess.PIPE, text=True)
                for _ in range(procs)]
    counts = []
    for child in children:
        out, _ = child.communicate(timeout=seconds + 60)
        if child.returncode != 0:
            raise SystemExit(f"a turn worker failed ({child.returncode})")
        counts.append(json.loads(out.strip().splitlines()[-1])["writes"])
    return {"procs": procs, "seconds": seconds, "writes_per_s": round(sum(counts) / seconds),
            "per_proc": counts, "min_share": round(min(counts) / max(sum(counts), 1), 3)}


def fsync_probe(folder: Path, n: int = 50) -> float:
    path = folder / "probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    samples = []
    try:
        for _ in range(n):
            os.write(fd, b"x" * 100)
            t0 = time.perf_counter()
            os.fsync(fd)
            samples.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    return round(statistics.median(samples) * 1000, 3)


def main(argv: list[str]) -> int:
    global SCRUB
    if argv[:1] == ["--turn-worker"]:
        turn_worker(Path(argv[1]), float(argv[2]), float(argv[3]))
        return 0
    if argv[:1] == ["--worker"]:
        SCRUB = argv[4] == "1"
        worker(Path(argv[1]), float(argv[2]), float(argv[3]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true",
        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    ap.add_argument("--starts", type=int, default=1000)
    ap.add_argument("--activations", type=int, default=300)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--check", action="store_true", help="exit 1 if an aim is missed")
    ap.add_argument("--profile", action="store_true", help="cProfile the start path")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-scrub", action="store_true",
                    help="no WAL checkpoint after private input is cleared (for comparison)")
    ap.add_argument("--dir", type=Path, help="where the temporary projects go (default: TMPDIR)")
    ap.add_argument("--cycles-only", action="store_true", help="only (c), the cycles")
    ap.add_argument("--rounds", type=int, default=1, help="(c) this many times (median)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.starts, args.activations, args.procs, args.seconds = 10, 5, 2, 0.5
    SCRUB = not args.no_scrub
    with tempfile.TemporaryDirectory(prefix="wfrun-bench-launch-", dir=args.dir) as tmp:
        base = Path(tmp)
        figures: dict[str, Any] = {
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                        "sqlite": sqlite3.sqlite_version,
                        "fsync_median_ms": fsync_probe(base),
                        "commit_median_ms": round(sqlite_commit_cost(base), 3)},
        }
        if not args.cycles_only:
            figures["start"] = bench_start(make_project(base / "a"), args.starts,
                                           args.profile)
            if args.profile:
                return 0
            figures["activation"] = bench_activation(make_project(base / "b"),
                                                     args.activations)
        rounds = [bench_cycles(make_project(base / f"c{i}"), args.procs, args.seconds)
                  for i in range(max(args.rounds, 1))]
        figures["cycles"] = sorted(rounds, key=lambda r: r["cycles_per_s"])[len(rounds) // 2]
        figures["cycles"]["rounds_cycles_per_s"] = [r["cycles_per_s"] for r in rounds]
        figures["turns"] = bench_turns(base, args.procs, min(args.seconds, 3.0))
    aims = {"cycles": figures["cycles"]["cycles_per_s"] >= AIM_CYCLES_PER_S}
    if "start" in figures:
        aims["start_p50"] = figures["start"]["p50_ms"] <= AIM_START_P50_MS
        aims["start_p99"] = figures["start"]["p99_ms"] <= AIM_START_P99_MS
    figures["aims_met"] = aims
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        m, c = figures["machine"], figures["cycles"]
        print(f"machine: Python {m['python']}, {m['cpus']} CPUs, SQLite {m['sqlite']}, "
              f"fsync median {m['fsync_median_ms']} ms, WAL FULL commit median "
              f"{m['commit_median_ms']} ms")
        if "start" in figures:
            s, a = figures["start"], figures["activation"]
            print(f"(a) workflow start -> queued row ({s['n']} starts): p50 {s['p50_ms']} "
                  f"ms, p90 {s['p90_ms']} ms, p99 {s['p99_ms']} ms, max {s['max_ms']} ms "
                  f"(aim p50 <= {AIM_START_P50_MS}, p99 <= {AIM_START_P99_MS})")
            print(f"(b) claim -> recorded ending of a one-node run ({a['n']} activations): "
                  f"p50 {a['p50_ms']} ms, "
                  f"p90 {a['p90_ms']} ms, p99 {a['p99_ms']} ms, max {a['max_ms']} ms")
        if len(c["rounds_cycles_per_s"]) > 1:
            print(f"(c) rounds: {c['rounds_cycles_per_s']} cycles/s; the median round:")
        print(f"(c) launch+activate+run cycles, {c['procs']} processes, {c['seconds']} s, "
              f"synchronous={c['store_settings'].get('synchronous')} (2 = FULL): "
              f"{c['cycles_per_s']} cycles/s ({c['cycles']} total, per process "
              f"{c['per_proc']}, lost {c['lost']}) (aim >= {AIM_CYCLES_PER_S})")
        print(f"    {c['writes_per_cycle']} store writes per cycle; mean wait to begin one "
              f"{c['wait_ms_per_write']} ms, then held {c['hold_ms_per_write']} ms (body and "
              f"COMMIT); a writer held the turn {c['turn_busy']:.0%} of the time")
        print(f"    runner imported from {ROOT}")
        print(f"    CPU {c['cpu_ms_per_cycle']} ms per cycle (this process tree): at most "
              f"{c['cpu_bound_cycles_per_s']} cycles/s on {m['cpus']} idle CPUs")
        t = figures["turns"]
        print(f"(d) the writers' turn alone, {t['procs']} processes writing one row per "
              f"transaction for {t['seconds']} s: {t['writes_per_s']} writes/s, per process "
              f"{t['per_proc']} (the smallest share {t['min_share']:.0%}; fair: "
              f"{1 / t['procs']:.0%})")
        print(f"    load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print("aims met: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in aims.items()))
    return 0 if (all(aims.values()) or not args.check) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
