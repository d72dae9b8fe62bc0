"""Fan-out items across hosts (issue 37, ADR 0008 phase 2): figures printed, never asserted.

    .venv/bin/python bench/bench_fanout_hosts.py            # both parts, full sizes
    .venv/bin/python bench/bench_fanout_hosts.py --part pg  # or --part huey
    .venv/bin/python bench/bench_fanout_hosts.py --smoke    # tiny sizes, seconds
    .venv/bin/python bench/bench_fanout_hosts.py --part huey --instructions 100  # callgrind

Part `pg`: a 10,000-item map of shell items (`printenv WFRUN_RUNNER_MARK`, which names
the runner process that ran it) at max_concurrency 32 drains on Postgres with 1, 2 and
3 `wfrun host` processes (each in its own project folder, `--max-runs 8`), a fresh
schema per row (a throwaway cluster, tests/pgcluster.py). Timed from the hosts'
start (the map is queued before) to the run's `done` on the launch row; printed: items/s
and how many items each host ran.

Part `huey`: 1,000 `sleep 0.1` shell items at 16 at once on one host (SQLite, `wfrun
host --once --max-runs 16`; and a foreground `wfrun run`) against the same work as
1,000 huey tasks (each runs `sleep 0.1` as a process) on 16 thread workers (SqliteHuey,
fsync), from the bench venv bench/bench_vs_queues.py makes (huey and DBOS from PyPI; a
smoke run without it says it skipped). Each side is timed the same way: the work is
queued first by another process (`wfrun start`; huey's enqueue), then one process is
timed from its spawn to its exit, interpreter start-up included (the bytecode of wfrun
and of what it imports written first, as pip compiles an installed package's and did
huey's), the run checked `completed`. Rounds interleave the systems (`--before DIR`
adds wfrun from an older copy, A/B); printed: median wall, floor/wall (floor: items x
0.1 s / 16), the ratio to huey, and per item the CPU of the process and its children
(rusage) and their user-space instructions (`perf stat`, when it can count; the `sleep`
children count alike on both sides). `--instructions N` runs N items of `sleep 0.01` instead, each
timed process under callgrind (the process alone, start-up included: the steady figure
on a shared VM without hardware counters).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from benchkit import machine, use_root  # bench/ is on sys.path

ROOT = use_root()
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # pgcluster

MAP = """\
    name: NAME
    start: each
    max_steps: 100000
    nodes:
      each:
        map:
          over: "{{ range(input.n) | list }}"
          max_items: 100000
          max_concurrency: AT_ONCE
          do: {action: {shell: BODY}}
"""
HUEY_CHILD = """\
import json, subprocess, sys, threading, time
from huey import SqliteHuey
mode, n, workers, seconds, path = sys.argv[1:6]
n, workers = int(n), int(workers)
huey = SqliteHuey("bench", filename=path, fsync=True)
done = threading.Semaphore(0)

@huey.task()
def item(i):
    subprocess.run(["sleep", seconds], check=True)
    done.release()

if mode == "enqueue":  # as `wfrun start`: the work is queued by another process
    for i in range(n):
        item(i)
    sys.exit(0)
t0 = time.perf_counter()
consumer = huey.create_consumer(workers=workers, worker_type="thread", periodic=False)
threading.Thread(target=consumer.run, daemon=True).start()
for _ in range(n):
    done.acquire()
print(json.dumps({"wall": time.perf_counter() - t0}))
consumer.stop(graceful=False)
"""


class Measured:
    """One timed process: wall from its spawn to its exit, the CPU of it and its
    children (rusage), and their user-space instructions (`perf stat`, when present)."""

    #: Count with callgrind instead of `perf stat` (`--instructions`: this VM has no
    #: hardware counters); only the timed process itself, not its `sleep` children.
    callgrind = False

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        perf = None if self.callgrind else shutil.which("perf")
        out = Path(tempfile.mkstemp(suffix=".perf")[1])
        if perf:
            argv = [perf, "stat", "-x", ",", "-e", "instructions:u", "-o", str(out), *argv]
        elif self.callgrind:
            argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        self.done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                                   check=False, timeout=3600)
        self.wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        self.instructions: float | None = None
        self.status = "completed"  # how the run ended (wfrun's, checked by the caller)
        for line in out.read_text().splitlines() if perf else ():
            fields = line.split(",")
            if len(fields) > 2 and fields[2].startswith("instructions") \
                    and fields[0].isdigit():
                self.instructions = float(fields[0])
        out.unlink(missing_ok=True)
        found = re.search(r"Collected\s*:\s*(\d+)", self.done.stderr) if self.callgrind \
            else None
        if found is not None:
            self.instructions = float(found.group(1))
        if self.done.returncode not in (0, 1):
            raise SystemExit(f"{argv[-6:]}: {self.done.stderr[-2000:]}")


def _env(root: Path | None, store: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
    if store:
        env["WFRUN_STORE"] = store
    if root is not None:  # `--before DIR`: wfrun imported from that copy
        env["PYTHONPATH"] = str(root)
    return env


def _wfrun(folder: Path, *args: str, store: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
    if store:
        env["WFRUN_STORE"] = store
    done = subprocess.run([sys.executable, "-m", "runner", "--project", str(folder), *args],
                          cwd=folder, env=env, capture_output=True, text=True, check=False,
                          timeout=3600)
    if done.returncode not in (0, 1):
        raise SystemExit(f"wfrun {' '.join(args)}: {done.stderr[-2000:]}")
    return done.stdout


def _folder(root: Path, name: str, flow: str) -> Path:
    flows = root / name / ".wfrun" / "workflows"
    flows.mkdir(parents=True)
    (flows / "fan.yaml").write_text(textwrap.dedent(flow))
    return root / name


def _host(folder: Path, store: str | None, *extra: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
    if store:
        env["WFRUN_STORE"] = store
    return subprocess.Popen([sys.executable, "-m", "runner", "--project", str(folder),
                             "host", "--no-controllers", "-q", *extra], cwd=folder, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def pg_part(sizes: tuple[int, ...], counts: tuple[int, ...]) -> None:
    import psycopg
    from pgcluster import PgCluster

    cluster = PgCluster()
    cluster.start()
    try:
        flow = MAP.replace("NAME", "fan").replace("AT_ONCE", "32").replace(
            "BODY", "[printenv, WFRUN_RUNNER_MARK]")
        print(f"{'items':>7} {'hosts':>5} {'drain s':>8} {'items/s':>8}  items per host")
        for n in sizes:
            for hosts in counts:
                schema = f"fan_{secrets.token_hex(4)}"
                with psycopg.connect(cluster.admin_url, autocommit=True) as conn:
                    conn.execute(f'CREATE SCHEMA "{schema}"')
                url = cluster.admin_url + f"?options=-csearch_path%3D{schema}"
                with tempfile.TemporaryDirectory() as tmp:
                    folders = [_folder(Path(tmp), f"h{i}", flow) for i in range(hosts)]
                    out = json.loads(_wfrun(folders[0], "start", "fan", "--json", "--input",
                                            json.dumps({"n": n}), store=url))
                    run_id = out["run_id"]
                    procs = [_host(f, url, "--max-runs", "8") for f in folders]
                    t0 = time.perf_counter()
                    try:
                        while True:
                            with psycopg.connect(url) as conn:
                                row = conn.execute("SELECT status FROM workflow_run_queue"
                                                   " WHERE run_id = %s", (run_id,)).fetchone()
                            if row and row[0] in ("done", "failed", "cancelled"):
                                break
                            time.sleep(0.2)
                        wall = time.perf_counter() - t0
                    finally:
                        for p in procs:
                            os.killpg(p.pid, signal.SIGTERM)
                        for p in procs:
                            p.wait(timeout=60)
                    shown = json.loads(_wfrun(folders[0], "show", run_id, "--json",
                                              store=url))
                    assert shown["status"] == "completed", shown.get("error")
                    per = collections.Counter(o["stdout"].split(":")[1]
                                              for o in shown["final_output"])
                    print(f"{n:>7,} {hosts:>5} {wall:>8.1f} {n / wall:>8.0f}  "
                          f"{sorted(per.values(), reverse=True)}")
    finally:
        cluster.stop()


def _wfrun_round(kind: str, n: int, flow: str, root: Path | None,
                 at_once: int, *, warm: bool = False) -> Measured:
    """One timed wfrun process over the queued map: `host` (`wfrun host --once`, the
    map queued by `wfrun start` first, untimed) or `run` (a foreground `wfrun run`).
    `warm`: every process may write the bytecode of what it imports (a warm-up round)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = _folder(Path(tmp), "p", flow)
        env = _env(root)
        if warm:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        cli = [sys.executable, "-m", "runner", "--project", str(folder)]
        if kind == "host":
            subprocess.run([*cli, "start", "fan", "--input", json.dumps({"n": n})], cwd=folder,
                           env=env, check=True, capture_output=True, timeout=600)
            got = Measured([*cli, "host", "--once", "--no-controllers", "-q", "--max-runs",
                            str(at_once)], folder, env)
        else:
            got = Measured([*cli, "run", "fan", "--input", json.dumps({"n": n}), "-q"],
                           folder, env)
        shown = json.loads(subprocess.run([*cli, "runs", "--json"], cwd=folder, env=env,
                                          capture_output=True, text=True, check=True).stdout)
        runs = shown if isinstance(shown, list) else shown.get("runs", [])
        got.status = str(runs[0].get("status")) if runs else "missing"
        return got


def _huey_round(python: Path, n: int, at_once: int, seconds: float) -> tuple[Measured, float]:
    """The consumer process timed from its spawn (the tasks queued first by another
    process, untimed), as `wfrun host --once` is; and its own figure from after its
    imports (what this bench printed before 2026-12-05)."""
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "huey.db")
        args = [str(n), str(at_once), str(seconds), db]
        subprocess.run([str(python), "-c", HUEY_CHILD, "enqueue", *args], check=True,
                       capture_output=True, timeout=600)
        got = Measured([str(python), "-c", HUEY_CHILD, "consume", *args], Path(tmp))
        return got, json.loads(got.done.stdout.splitlines()[-1])["wall"]


def huey_part(n: int, at_once: int, seconds: float, venv: Path, smoke: bool,
              rounds: int, before: Path | None) -> None:
    """The systems interleaved round by round (a load swing hits each alike); medians."""
    floor = n * seconds / at_once
    print(f"{n:,} x sleep {seconds} at {at_once} at once (floor {floor:.2f} s), "
          f"{rounds} round(s) interleaved, medians; wall from each process's spawn to its exit")
    flow = MAP.replace("NAME", "fan").replace("AT_ONCE", str(at_once)).replace(
        "BODY", f"[sleep, '{seconds}']")
    venv = venv.absolute()  # the consumer runs in a temporary folder
    python = venv / "bin" / "python"
    have_huey = python.exists() and (venv / ".wfrun-bench-stamp").exists()
    if not have_huey and not smoke:
        from bench_vs_queues import ensure_venv

        ensure_venv(venv)
        have_huey = True
    versions: list[tuple[str, Path | None]] = [("", None)]
    if before is not None:
        versions.append((" (before)", before))
    for root in (REPO, before):
        # Bytecode as an installed package has it (pip compiles at install, as it did
        # huey's): an editable checkout under PYTHONDONTWRITEBYTECODE would compile
        # ~180 modules at every process start (1-2 s here) and time that instead. The
        # same for the dependencies the timed processes import (click, jinja2, ...): a
        # venv installed with `pip --no-compile` (scripts/setup) has none of theirs, and
        # compiling them cost each wfrun process ~100 ms here; one small warm-up round
        # of each kind writes what they import.
        if root is not None:
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "runner")],
                           check=True, capture_output=True,
                           env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})
            small = flow.replace(f"max_concurrency: {at_once}", "max_concurrency: 2")
            for kind in () if smoke else ("host", "run"):  # smoke: figures mean nothing
                _wfrun_round(kind, 2, small, None if root == REPO else root, 2, warm=True)
    got: dict[str, list[Measured]] = collections.defaultdict(list)
    huey_own: list[float] = []
    huey_name = f"huey, {at_once} thread workers"
    for _ in range(rounds):
        for label, root in versions:
            got[f"wfrun host --once{label}"].append(_wfrun_round("host", n, flow, root,
                                                                 at_once))
            got[f"wfrun run{label}"].append(_wfrun_round("run", n, flow, root, at_once))
        if have_huey:
            measured, own = _huey_round(python, n, at_once, seconds)
            got[huey_name].append(measured)
            huey_own.append(own)
    huey = statistics.median(m.wall for m in got[huey_name]) \
        if have_huey else None
    print(f"  {'system':<30} {'wall s':>7} {'floor/wall':>10} {'vs huey':>8} "
          f"{'CPU ms/item':>12} {'instr M/item':>13}")
    for name, ms in got.items():
        wall = statistics.median(m.wall for m in ms)
        cpu = statistics.median(m.cpu for m in ms) * 1000 / n
        counted = [m.instructions for m in ms if m.instructions is not None]
        instr = f"{statistics.median(counted) / n / 1e6:>13.2f}" if counted else f"{'-':>13}"
        vs = f"{huey / wall:>7.2f}x" if huey else f"{'-':>8}"
        ended = sorted({m.status for m in ms} - {"completed"})
        note = f"  NOT COMPLETED: {', '.join(ended)}" if ended else ""
        print(f"  {name:<30} {wall:>7.2f} {floor / wall:>10.2f} {vs} {cpu:>12.2f} {instr}"
              f"{note}")
    if huey_own:
        print(f"  (huey's consumer from after its imports, as printed before: "
              f"{statistics.median(huey_own):.2f} s)")
    else:
        print(f"  huey skipped: the bench venv {venv} is not made (a run without --smoke "
              "makes it)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds")
    parser.add_argument("--part", choices=("pg", "huey", "both"), default="both")
    parser.add_argument("--venv", type=Path, default=REPO / ".bench-venv")
    parser.add_argument("--items", type=int, default=10_000, help="the Postgres map's size")
    parser.add_argument("--rounds", type=int, default=3, help="huey part: rounds (medians)")
    parser.add_argument("--before", type=Path, default=None,
                        help="huey part: also run wfrun from this copy of an older `runner` "
                        "(`git archive COMMIT runner | tar -x -C DIR`), interleaved")
    parser.add_argument("--instructions", type=int, default=0, metavar="N",
                        help="huey part: N items of `sleep 0.01` instead, each timed process "
                        "under callgrind (user-space instructions per item, start-up included; "
                        "slow: ~50x)")
    args = parser.parse_args()
    print(f"# bench_fanout_hosts  {machine()}  runner from {ROOT}")
    if args.part in ("huey", "both"):
        if args.smoke:  # twice the at-once limit: the limit still holds items back
            huey_part(8, 4, 0.01, args.venv, True, 1, args.before)
        elif args.instructions:
            Measured.callgrind = True
            huey_part(args.instructions, 16, 0.01, args.venv, False, args.rounds, args.before)
        else:
            huey_part(1_000, 16, 0.1, args.venv, False, args.rounds, args.before)
    if args.part in ("pg", "both"):
        # Smoke: one row of two hosts (a one-host row runs the same code); 12 items are more
        # than one host's 8 run slots, so the second host takes some.
        pg_part((12,) if args.smoke else (args.items,), (2,) if args.smoke else (1, 2, 3))


if __name__ == "__main__":
    main()
