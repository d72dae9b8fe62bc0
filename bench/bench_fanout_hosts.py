"""Fan-out items across hosts (issue 37, ADR 0008 phase 2): figures printed, never asserted.

    .venv/bin/python bench/bench_fanout_hosts.py            # both parts, full sizes
    .venv/bin/python bench/bench_fanout_hosts.py --part pg  # or --part huey
    .venv/bin/python bench/bench_fanout_hosts.py --smoke    # tiny sizes, seconds

Part `pg`: a 10,000-item map of shell items (`printenv WFRUN_RUNNER_MARK`, which names
the runner process that ran it) at max_concurrency 32 drains on Postgres with 1, 2 and
3 `wfrun host` processes (each in its own project folder, `--max-runs 8`), a fresh
schema per row (a throwaway cluster, tests/pgcluster.py). Timed from the hosts'
start (the map is queued before) to the run's `done` on the launch row; printed: items/s
and how many items each host ran.

Part `huey`: 1,000 `sleep 0.1` shell items at 16 at once on one host (SQLite, `wfrun
host --once --max-runs 16`, one and two processes) against the same work as 1,000 huey
tasks (each runs `sleep 0.1` as a process) on 16 thread workers (SqliteHuey, fsync),
from the bench venv bench/bench_vs_queues.py makes (huey and DBOS from PyPI; a smoke
run without it says it skipped). Floor: items x 0.1 s / 16.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import secrets
import signal
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
n, workers, seconds, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
huey = SqliteHuey("bench", filename=path, fsync=True)
done = threading.Semaphore(0)

@huey.task()
def item(i):
    subprocess.run(["sleep", seconds], check=True)
    done.release()

for i in range(n):
    item(i)
t0 = time.perf_counter()
consumer = huey.create_consumer(workers=workers, worker_type="thread", periodic=False)
threading.Thread(target=consumer.run, daemon=True).start()
for _ in range(n):
    done.acquire()
print(json.dumps({"wall": time.perf_counter() - t0}))
consumer.stop(graceful=False)
"""


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


def huey_part(n: int, at_once: int, seconds: float, venv: Path, smoke: bool) -> None:
    floor = n * seconds / at_once
    print(f"{n:,} x sleep {seconds} at {at_once} at once (floor {floor:.2f} s)")
    flow = MAP.replace("NAME", "fan").replace("AT_ONCE", str(at_once)).replace(
        "BODY", f"[sleep, '{seconds}']")
    results: dict[str, float] = {}
    for processes in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            folder = _folder(Path(tmp), "p", flow)
            _wfrun(folder, "start", "fan", "--input", json.dumps({"n": n}))
            t0 = time.perf_counter()
            _wfrun(folder, "host", "--once", "--no-controllers", "-q", "--max-runs",
                   str(at_once), "--processes", str(processes))
            wall = time.perf_counter() - t0
            results[f"wfrun host, {processes} process(es)"] = wall
    with tempfile.TemporaryDirectory() as tmp:
        folder = _folder(Path(tmp), "p", flow)
        t0 = time.perf_counter()
        _wfrun(folder, "run", "fan", "--input", json.dumps({"n": n}), "-q")
        results["wfrun run (foreground)"] = time.perf_counter() - t0
    python = venv / "bin" / "python"
    huey: float | None = None
    if python.exists() and (venv / ".wfrun-bench-stamp").exists():
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run([str(python), "-c", HUEY_CHILD, str(n), str(at_once),
                                   str(seconds), str(Path(tmp) / "huey.db")],
                                  capture_output=True, text=True, check=True, timeout=3600)
            huey = json.loads(done.stdout.splitlines()[-1])["wall"]
    elif not smoke:
        from bench_vs_queues import ensure_venv

        ensure_venv(venv)
        return huey_part(n, at_once, seconds, venv, smoke)
    for name, wall in results.items():
        vs = f", {huey / wall:.2f}x huey's speed" if huey else ""
        print(f"  {name:<28} {wall:>7.2f} s (floor/wall {floor / wall:.2f}){vs}")
    if huey:
        print(f"  {'huey, 16 thread workers':<28} {huey:>7.2f} s (floor/wall {floor / huey:.2f})")
    else:
        print(f"  huey skipped: the bench venv {venv} is not made (a run without --smoke "
              "makes it)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds")
    parser.add_argument("--part", choices=("pg", "huey", "both"), default="both")
    parser.add_argument("--venv", type=Path, default=REPO / ".bench-venv")
    parser.add_argument("--items", type=int, default=10_000, help="the Postgres map's size")
    args = parser.parse_args()
    print(f"# bench_fanout_hosts  {machine()}  runner from {ROOT}")
    if args.part in ("huey", "both"):
        if args.smoke:
            huey_part(24, 4, 0.01, args.venv, smoke=True)
        else:
            huey_part(1_000, 16, 0.1, args.venv, smoke=False)
    if args.part in ("pg", "both"):
        pg_part((60,) if args.smoke else (args.items,), (1, 2) if args.smoke else (1, 2, 3))


if __name__ == "__main__":
    main()
