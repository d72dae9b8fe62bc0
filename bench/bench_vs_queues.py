"""wfrun beside huey and DBOS: the same trivial 3-step pipelines, interleaved in one run.

    .venv/bin/python bench/bench_vs_queues.py                 # 3 rounds of 300 pipelines
    .venv/bin/python bench/bench_vs_queues.py -n 500 --rounds 5
    .venv/bin/python bench/bench_vs_queues.py --systems wfrun,wfrun-p2,huey,huey-proc
    .venv/bin/python bench/bench_vs_queues.py --systems wfrun,huey --before DIR
                            # also `runner` from DIR (`git archive C runner`), interleaved
    .venv/bin/python bench/bench_vs_queues.py --root DIR    # wfrun's `runner` from DIR

Bench only: not part of scripts/setup or the test suite. On its first run it makes a
bench venv, `.bench-venv/` at the repository root (gitignored), and installs huey 3.x
and DBOS 3.x into it from PyPI (`--venv DIR` elsewhere); later runs reuse it. huey and
DBOS run on that venv's Python, wfrun on the interpreter running this script (the
project venv), each system in its own fresh process per round, the order rotated
each round so no system always runs on a warmer or quieter machine.

Each system gets N pipelines of three steps (x+1, three times), durable on SQLite:

- wfrun: a workflow of three `compute` nodes (`durability: full`): N launches queued
  with `LaunchCoordinator.prepare` (the `wfrun start` path), then drained by
  `StandaloneHost(max_runs=4).run(once=True)`, the loop `wfrun host --max-runs 4`
  runs after its start-up (WAL, synchronous=FULL, every node fsynced in the bundle);
  `--cli` also drains a second batch through the real `wfrun host --once --max-runs 4`
  subprocess (its interpreter start printed apart).
- wfrun-p2: the same, drained as `wfrun host --max-runs 4 --processes 2` does: the
  host forks one worker process (two slots each), whose CPU is counted too.
- wfrun-p4: `--processes 4`: three workers beside the host, one slot each, the
  shape of huey-proc (four processes, one task at a time each).
- huey: `SqliteHuey(fsync=True)` (WAL, synchronous=FULL), a `step.s(0).then(step)
  .then(step)` pipeline per run, N enqueued, then a consumer of 4 worker threads.
- huey-proc: the same with huey's 4 worker processes (`worker_type="process"`), the
  like-for-like rival of wfrun-p2; their CPU is counted once they are joined.
- DBOS: a `@DBOS.workflow` of three `@DBOS.step`s on a SQLite system database, N
  enqueued with `DBOSClient` before the queue (`worker_concurrency=4`, polled every
  10 ms) is registered, so the drain starts with a full queue as the others do.

Printed per system (medians over the rounds, and each ratio to wfrun):
- runs/s: N / the drain's wall time (queue full -> last pipeline finished);
- CPU ms per run: the process's user+sys CPU during the drain / N (all threads);
- per step: the drain's CPU per run / 3 steps;
- enqueue p50: one enqueue call's wall time (queueing, before the drain starts).
Printed beside them: this disk's fsync'd 1-line append and WAL FULL commit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".bench-venv"
REQUIREMENTS = ("huey>=3,<4", "dbos>=3,<4")
SYSTEMS = ("wfrun", "wfrun-p2", "wfrun-p4", "huey", "huey-proc", "dbos")
WFRUN_SYSTEMS = {"wfrun": 1, "wfrun-p2": 2, "wfrun-p4": 4}  # system -> host processes
BEFORE = "before"  # wfrun from `--before DIR`, to compare two versions in one run
STEPS = 3
DRAIN_TIMEOUT_S = 180.0


# -- the children: one system, one round, one JSON line on stdout --------------------
def _cpu(children: bool = False) -> float:
    """This process's CPU seconds (all threads), and with `children` that of its
    children that ended and were waited for (process workers)."""
    t = os.times()
    return t.user + t.system + (t.children_user + t.children_system if children else 0.0)


def _result(system: str, n: int, enqueue_ms: list[float], drain_s: float,
            cpu_s: float, **extra: Any) -> dict[str, Any]:
    return {"system": system, "n": n, "runs_per_s": n / drain_s,
            "cpu_ms_per_run": cpu_s * 1000 / n,
            "cpu_ms_per_step": cpu_s * 1000 / n / STEPS,
            "enqueue_p50_ms": statistics.median(enqueue_ms), **extra}


WFRUN_WORKFLOW = """\
input: {type: object, properties: {n: {type: integer}}}
start: one
nodes:
  one: {compute: "{{ input.n + 1 }}"}
  two: {compute: "{{ outputs.one + 1 }}"}
  three: {compute: "{{ outputs.two + 1 }}"}
edges:
  - {from: one, to: two}
  - {from: two, to: three}
"""


def child_wfrun(folder: Path, n: int, cli: bool, runner_root: Path = REPO,
                processes: int = 1) -> dict[str, Any]:
    sys.path.insert(0, str(runner_root))
    from benchkit import settled_project

    from runner.compiler import build_catalog
    from runner.host._daemon import StandaloneHost
    from runner.host.runtime._launches import detached_coordinator
    from runner.host.runtime._local import Workspace
    from runner.store import SqliteStore

    root = folder / "proj"
    settled_project(root, {"pipe.yaml": WFRUN_WORKFLOW})  # as a host's project: not new
    store_path = root / ".wfrun" / "state" / "store.sqlite3"

    def queue(count: int, offset: int) -> list[float]:
        ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
        store = SqliteStore(store_path)
        coord = detached_coordinator(ws, store)
        coord.prepare("pipe", {"n": -1})  # warm: the first prepare compiles
        store.launches.cancel(store.launches.query(statuses=["queued"])[0].run_id)
        times = []
        for i in range(count):
            t0 = time.perf_counter()
            coord.prepare("pipe", {"n": offset + i})
            times.append((time.perf_counter() - t0) * 1000)
        store.close()
        return times

    def done() -> int:
        store = SqliteStore(store_path)
        count = len(store.launches.query(statuses=["done"]))
        store.close()
        return count

    enqueue_ms = queue(n, 0)
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
    c0, t0 = _cpu(children=True), time.perf_counter()
    if processes > 1:  # as `wfrun host --processes N` does: fork before opening the store
        from runner.host._daemon import WorkerSettings, fork_workers, host_lock

        lock = host_lock(ws)
        lock.acquire()
        settings = WorkerSettings(open_store=lambda: SqliteStore(store_path), once=True)
        pool, share = fork_workers(ws, lock, processes=processes, max_runs=4,
                                   settings=settings)
        store = SqliteStore(store_path)
        host = StandaloneHost(ws, store, max_runs=share, lock=lock, pool=pool)
    else:
        store = SqliteStore(store_path)
        host = StandaloneHost(ws, store, max_runs=4)
        c0, t0 = _cpu(children=True), time.perf_counter()
    host.run(once=True)  # returns once every worker process has ended (and been reaped)
    drain, cpu = time.perf_counter() - t0, _cpu(children=True) - c0
    store.close()
    if done() != n:
        raise SystemExit(f"wfrun: {done()} of {n} launches done")
    extra: dict[str, Any] = {}
    if cli:
        import resource

        queue(n, n)
        argv = [sys.executable, "-m", "runner", "--project", str(root), "host", "--once",
                "--max-runs", "4", "--no-controllers", "-q"]
        env = {**os.environ, "PYTHONPATH": str(runner_root)}
        r0, t1 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, cwd=root, env=env)
        took = time.perf_counter() - t1
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t2 = time.perf_counter()  # the interpreter start and imports: an empty queue
        subprocess.run(argv, check=True, capture_output=True, cwd=root, env=env)
        empty = time.perf_counter() - t2
        if done() != 2 * n:
            raise SystemExit(f"wfrun host: {done() - n} of {n} launches done")
        child_cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        extra = {"cli_runs_per_s": n / took, "cli_start_s": empty,
                 "cli_runs_per_s_without_start": n / max(took - empty, 1e-9),
                 "cli_cpu_ms_per_run": child_cpu * 1000 / n}
    return _result("wfrun", n, enqueue_ms, drain, cpu, **extra)


def child_huey(folder: Path, n: int, worker_type: str = "thread") -> dict[str, Any]:
    import multiprocessing

    from huey import SqliteHuey

    huey = SqliteHuey("bench", filename=str(folder / "huey.sqlite3"), fsync=True,
                      journal_mode="wal")
    finished = threading.Event()
    # Shared memory, so that process workers (forked by the consumer) count here too.
    count = multiprocessing.get_context("fork").Value("i", 0)

    @huey.task()
    def step(x: int) -> int:
        return x + 1

    @huey.task()
    def last(x: int) -> int:
        with count.get_lock():
            count.value += 1
            if count.value == n and worker_type == "thread":
                finished.set()
        return x + 1

    pipeline = step.s(-1).then(step).then(last)
    huey.enqueue(pipeline)  # warm
    huey.flush()
    enqueue_ms = []
    for i in range(n):
        pipeline = step.s(i).then(step).then(last)
        t0 = time.perf_counter()
        huey.enqueue(pipeline)
        enqueue_ms.append((time.perf_counter() - t0) * 1000)
    consumer = huey.create_consumer(workers=4, worker_type=worker_type, periodic=False,
                                    initial_delay=0.001, max_delay=0.01)
    c0, t0 = _cpu(children=True), time.perf_counter()
    consumer.start()
    if worker_type == "thread":
        done = finished.wait(DRAIN_TIMEOUT_S)
    else:  # the workers are other processes: watch the shared count
        end = time.monotonic() + DRAIN_TIMEOUT_S
        while count.value < n and time.monotonic() < end:
            time.sleep(0.0005)
        done = count.value >= n
    if not done:
        raise SystemExit(f"huey: {count.value} of {n} pipelines finished")
    drain = time.perf_counter() - t0
    consumer.stop(graceful=True)  # process workers are joined: their CPU is counted
    cpu = _cpu(children=True) - c0
    return _result("huey" if worker_type == "thread" else "huey-proc", n, enqueue_ms,
                   drain, cpu)


def child_dbos(folder: Path, n: int) -> dict[str, Any]:
    import logging

    from dbos import DBOS, DBOSClient

    url = f"sqlite:///{folder / 'dbos.sqlite3'}"
    DBOS(config={"name": "bench", "system_database_url": url, "log_level": "WARNING"})
    logging.getLogger("dbos").setLevel(logging.WARNING)
    finished = threading.Event()
    lock, count = threading.Lock(), [0]

    @DBOS.step()
    def step(x: int) -> int:
        return x + 1

    @DBOS.workflow(name="pipe")
    def pipe(x: int) -> int:
        out = step(step(step(x)))
        with lock:
            count[0] += 1
            if count[0] == n:
                finished.set()
        return int(out)

    DBOS.launch()
    client = DBOSClient(system_database_url=url)
    options: Any = {"queue_name": "bench", "workflow_name": "pipe"}
    client.enqueue(options, -1)  # warm; it runs with the others
    enqueue_ms = []
    for i in range(n - 1):
        t0 = time.perf_counter()
        client.enqueue(options, i)
        enqueue_ms.append((time.perf_counter() - t0) * 1000)
    c0, t0 = _cpu(), time.perf_counter()
    DBOS.register_queue("bench", worker_concurrency=4, polling_interval_sec=0.01)
    if not finished.wait(DRAIN_TIMEOUT_S):
        raise SystemExit(f"dbos: {count[0]} of {n} workflows finished")
    drain, cpu = time.perf_counter() - t0, _cpu() - c0
    import sqlite3

    conn = sqlite3.connect(folder / "dbos.sqlite3")
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    conn.close()
    DBOS.destroy()
    return _result("dbos", n, enqueue_ms, drain, cpu, journal_mode=journal)


def child(system: str, n: int, cli: bool, root: Path = REPO,
          folder: Path | None = None) -> int:
    """One round of one system in `folder` (the parent's, kept until its last round;
    alone: a temporary one)."""
    if folder is None:
        with tempfile.TemporaryDirectory(prefix=f"wfrun-bench-vs-{system}-") as tmp:
            return child(system, n, cli, root, Path(tmp))
    folder.mkdir(parents=True, exist_ok=True)
    if system in WFRUN_SYSTEMS or system == BEFORE:
        processes = WFRUN_SYSTEMS.get(system, 1)
        out = child_wfrun(folder, n, cli and processes == 1, root, processes=processes)
        out["system"] = system
    elif system in ("huey", "huey-proc"):
        out = child_huey(folder, n, "thread" if system == "huey" else "process")
    else:
        out = child_dbos(folder, n)
    print("RESULT " + json.dumps(out), flush=True)
    return 0


# -- the parent: the bench venv, the rounds, the table -----------------------------------
def venv_ready(venv: Path) -> bool:
    stamp = venv / ".wfrun-bench-stamp"
    return stamp.exists() and stamp.read_text() == " ".join(REQUIREMENTS)


def ensure_venv(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if venv_ready(venv):
        return python
    print(f"making the bench venv {venv} (huey, DBOS from PyPI) ...", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *REQUIREMENTS], check=True)
    (venv / ".wfrun-bench-stamp").write_text(" ".join(REQUIREMENTS))
    return python


def run_child(python: Path, system: str, n: int, cli: bool, root: Path,
              folder: Path) -> dict[str, Any]:
    argv = [str(python), str(Path(__file__).resolve()), "--child", system, "-n", str(n),
            "--root", str(root), "--folder", str(folder)]
    if cli:
        argv.append("--cli")
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT "):])
            return result
    sys.exit(f"{system} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def versions(python: Path) -> str:
    code = ("import importlib.metadata as m; "
            "print(' '.join(f'{p} {m.version(p)}' for p in ('huey', 'dbos')))")
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--smoke", action="store_true",
        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    ap.add_argument("-n", type=int, default=300, help="pipelines per system per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--cli", action="store_true",
                    help="wfrun also drains through the `wfrun host` subprocess")
    ap.add_argument("--venv", type=Path, default=VENV, help="the bench venv (made if missing)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--before", type=Path, metavar="DIR",
                    help="also run wfrun with `runner` imported from DIR (an older copy), "
                         f"as system '{BEFORE}', interleaved with the others")
    ap.add_argument("--child", choices=(*SYSTEMS, BEFORE), help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)  # a child's round folder
    ap.add_argument("--root", type=Path, default=REPO, metavar="DIR",
                    help="import wfrun's `runner` from DIR instead of this checkout")
    args = ap.parse_args(argv)
    if args.smoke:
        args.n, args.rounds = 5, 1
    if args.child:
        return child(args.child, args.n, args.cli, args.root.resolve(), args.folder)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        ap.error(f"unknown system {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")
    peers = sorted(set(systems) - {*WFRUN_SYSTEMS, BEFORE})
    if args.smoke and peers and not venv_ready(args.venv):
        # The test suite runs this offline: no PyPI install for a smoke run.
        print(f"smoke: {', '.join(peers)} skipped: the bench venv {args.venv} is not made "
              "(a run without --smoke makes it)")
        systems = [s for s in systems if s not in peers]
    if args.before is not None:
        if not (args.before / "runner" / "__init__.py").is_file():
            ap.error(f"--before {args.before}: no runner/ package there; make one with "
                     "`git archive COMMIT runner | tar -x -C DIR`")
        systems.insert(1, BEFORE)
    others = ensure_venv(args.venv) if set(systems) - {*WFRUN_SYSTEMS, BEFORE} \
        else Path(sys.executable)
    sys.path.insert(0, str(REPO / "bench"))
    from bench_engine import time_fsync
    from benchkit import file_create_cost, machine, sqlite_commit_cost

    # Every round's folder is kept until the last round has run: on a file system that
    # skips recently freed inodes when it allocates (this VM's ext4 has no journal),
    # deleting a round's thousands of files made the next round's file creations cost
    # up to 50x more kernel CPU, so the figures measured the order of the rounds.
    session = Path(tempfile.mkdtemp(prefix="wfrun-bench-vs-"))
    rounds: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    try:
        for r in range(args.rounds):
            order = systems[r % len(systems):] + systems[:r % len(systems)]
            for system in order:
                python = Path(sys.executable) \
                    if system in WFRUN_SYSTEMS or system == BEFORE else others
                root = args.before.resolve() if system == BEFORE else args.root.resolve()
                rounds[system].append(run_child(python, system, args.n, args.cli, root,
                                                session / f"round-{r + 1}-{system}"))
                print(f"round {r + 1}/{args.rounds} {system}: "
                      f"{rounds[system][-1]['runs_per_s']:.0f} runs/s", file=sys.stderr)
        disk = session / "disk"  # probed last, in the same folder as the rounds
        disk.mkdir()
        fsync_ms, commit_ms = time_fsync(disk), sqlite_commit_cost(disk)
        create_us = file_create_cost(disk)
    finally:
        shutil.rmtree(session, ignore_errors=True)
    keys = ("runs_per_s", "cpu_ms_per_run", "cpu_ms_per_step", "enqueue_p50_ms")
    extra_keys = ("cli_runs_per_s", "cli_runs_per_s_without_start", "cli_start_s",
                  "cli_cpu_ms_per_run")
    medians = {s: {k: statistics.median(x[k] for x in rs) for k in keys + extra_keys
                   if k in rs[0]} for s, rs in rounds.items()}
    figures = {"machine": machine(), "fsync_ms": fsync_ms, "commit_ms": commit_ms,
               "file_create_us": create_us, "tmpdir": tempfile.gettempdir(),
               "versions": versions(others) if others != Path(sys.executable) else "",
               "n": args.n, "rounds": args.rounds, "medians": medians, "each": rounds}
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"machine: {figures['machine']}")
    print(f"{figures['versions']}; disk ({figures['tmpdir']}): one fsync'd append "
          f"{fsync_ms:.3f} ms, one WAL FULL commit {commit_ms:.3f} ms, one file created "
          f"{create_us:.0f} µs CPU")
    print(f"{args.n} trivial 3-step pipelines per system, 4 workers each, median of "
          f"{args.rounds} interleaved rounds (ratio: wfrun's figure / the system's, "
          "> 1 means wfrun is better)")
    print(f"  {'system':<9} {'runs/s':>8} {'CPU ms/run':>11} {'CPU ms/step':>12} "
          f"{'enqueue p50 ms':>15}")
    base = medians.get("wfrun")
    for s in systems:
        m = medians[s]
        print(f"  {s:<9} {m['runs_per_s']:8.0f} {m['cpu_ms_per_run']:11.2f} "
              f"{m['cpu_ms_per_step']:12.3f} {m['enqueue_p50_ms']:15.3f}")
        if base is not None and s != "wfrun":
            print(f"  {'ratio':<9} {base['runs_per_s'] / m['runs_per_s']:7.2f}x "
                  f"{m['cpu_ms_per_run'] / base['cpu_ms_per_run']:10.2f}x "
                  f"{m['cpu_ms_per_step'] / base['cpu_ms_per_step']:11.2f}x "
                  f"{m['enqueue_p50_ms'] / base['enqueue_p50_ms']:14.2f}x")
    if base is not None and "cli_runs_per_s" in base:
        print(f"  wfrun host --once --max-runs 4 (subprocess): {base['cli_runs_per_s']:.0f} "
              f"runs/s, {base['cli_runs_per_s_without_start']:.0f} runs/s without its "
              f"{base['cli_start_s']:.2f} s start, {base['cli_cpu_ms_per_run']:.2f} CPU "
              "ms per run (start included)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
