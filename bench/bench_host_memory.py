"""A `wfrun host`'s memory: flat in the runs it has served and in the launches queued.

    .venv/bin/python bench/bench_host_memory.py           # 100, 1,000, 10,000 runs; 100,000 queued
    .venv/bin/python bench/bench_host_memory.py --smoke   # 10, 30, 100 runs; 2,000 queued

A real `wfrun host --no-controllers` subprocess on a temporary SQLite project. Served:
launches of a 3-node compute workflow whose output is ~10 KB are queued through the
real preflight in batches, and the host's RSS (VmRSS of /proc/PID/status) is read once
it has finished 100, 1,000 and 10,000 of them (a host used to keep every run's
outcome, outputs included, until it exited: +2.2 KB per trivial run, 409 MB after 600
runs of a 400 KB output). Queued: a fresh host with one slot, held by a run that
waits on a file, while 100,000 launches (each with a ~2 KB input) wait in the queue,
inserted with one SQL `executemany` as copies of a real queued row; the figure is the
highest RSS over 10 s, a few source-watch passes (it used to load every queued launch
with its input: 445 MB at 93,000). Aims: flat within 20 MB; at most 100 MB queued.
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.benchkit import machine  # noqa: E402
from runner.compiler import build_catalog  # noqa: E402
from runner.host.runtime._launches import detached_coordinator  # noqa: E402
from runner.host.runtime._local import Workspace, open_store, store_path  # noqa: E402

BIG = """
start: one
nodes:
  one: {compute: "{{ input.n }}"}
  two: {compute: "{{ outputs.one + 1 }}"}
  three: {compute: "{{ {'n': outputs.two, 'pad': 'x' * 10000} }}"}
edges:
  - {from: one, to: two}
  - {from: two, to: three}
"""
BLOCK = """
start: wait
nodes:
  wait: {action: {use_shell: true, shell: "while [ -e hold ]; do sleep 0.05; done"}}
"""
BATCH = 500


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        flows = root / ".wfrun" / "workflows"
        flows.mkdir(parents=True)
        (flows / "big.yaml").write_text(BIG)
        (flows / "block.yaml").write_text(BLOCK)
        self.ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")

    def host(self, *args: str) -> subprocess.Popen[bytes]:
        with open(self.root / "host.err", "ab") as err:  # the child keeps its own copy
            return subprocess.Popen(
                [sys.executable, "-m", "runner", "--project", str(self.root), "host",
                 "--no-controllers", "-q", *args], cwd=self.root, stdout=subprocess.DEVNULL,
                stderr=err)

    def queue(self, name: str, count: int, start: int = 0) -> list[str]:
        store = open_store(self.ws)
        try:
            coordinator = detached_coordinator(self.ws, store)
            return [coordinator.prepare(name, {"n": start + i}).run_id for i in range(count)]
        finally:
            store.close()

    def counts(self) -> dict[str, int]:
        with sqlite3.connect(store_path(self.ws)) as db:
            return dict(db.execute("SELECT status, COUNT(*) FROM workflow_run_queue"
                                   " GROUP BY status").fetchall())

    def wait(self, what: str, check: object, host: subprocess.Popen[bytes],
             timeout: float = 3600) -> None:
        deadline = time.monotonic() + timeout
        while not check():  # type: ignore[operator]
            if host.poll() is not None:
                raise RuntimeError(f"the host exited: {(self.root / 'host.err').read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.1)


def stop(host: subprocess.Popen[bytes]) -> None:
    host.send_signal(signal.SIGTERM)
    host.wait(timeout=120)


def served(root: Path, marks: list[int]) -> list[tuple[int, float]]:
    project = Project(root)
    host = project.host()
    out: list[tuple[int, float]] = []
    queued = 0
    try:
        for mark in marks:
            while queued < mark:
                batch = min(BATCH, mark - queued)
                project.queue("big", batch, queued)
                queued += batch
            project.wait(f"{mark} runs done", lambda m=mark: project.counts().get("done", 0) >= m,
                         host)
            out.append((mark, rss_mb(host.pid)))
            print(f"  after {mark:>6,} runs: host RSS {out[-1][1]:6.1f} MB", flush=True)
    finally:
        stop(host)
    return out


def queued_peak(root: Path, count: int, seconds: float) -> float:
    project = Project(root)
    (root / "hold").touch()
    [blocker] = project.queue("block", 1)
    [template] = project.queue("big", 1)
    with sqlite3.connect(store_path(project.ws)) as db:
        row = db.execute("SELECT workflow_ref, workflow_path, workflow_source_json,"
                         " definition_digest, created_at FROM workflow_run_queue"
                         " WHERE run_id = ?", (template,)).fetchone()
        ref, path, source, digest, at = row
        pad = "y" * 2000
        db.executemany(
            "INSERT INTO workflow_run_queue (run_id, workflow_ref, workflow_path,"
            " workflow_source_json, definition_digest, input_json, status, created_at,"
            " updated_at) VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?)",
            ((f"big-bench-{i:07d}", ref, path, source, digest,
              f'{{"n":{i},"pad":"{pad}"}}', at + 1 + i, at + 1 + i) for i in range(count)))
    wall, peak_kb = status(root)
    print(f"  `wfrun status` at {count:,} queued: {wall:.2f} s, peak RSS {peak_kb / 1024:.1f} MB "
          "(a page of 100; it took 12.5 s and 434 MB at 100,000 listing them all)")
    host = project.host("--max-runs", "1")
    try:
        project.wait("the blocker to hold the slot",
                     lambda: project.counts().get("running", 0) == 1, host)
        peak, end = 0.0, time.monotonic() + seconds
        while time.monotonic() < end:
            peak = max(peak, rss_mb(host.pid))
            time.sleep(0.25)
        assert project.counts().get("queued", 0) == count + 1, project.counts()
        del blocker
    finally:
        (root / "hold").unlink()
        stop(host)
    return peak


def status(root: Path) -> tuple[float, int]:
    """`wfrun status` as a child that reports its own peak RSS (kB) on exit."""
    # An exit handler, not `finally`: the CLI ends with os._exit once its exit
    # handlers ran (runner/cli/__init__.py), so nothing after them runs.
    code = ("import atexit, resource, runpy, sys\n"
            "atexit.register(lambda: print('maxrss', resource.getrusage("
            "resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr))\n"
            f"sys.argv = ['wfrun', '--project', {str(root)!r}, 'status']\n"
            "runpy.run_module('runner', run_name='__main__')\n")
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=root, timeout=600)
    wall = time.perf_counter() - t0
    peak = [line for line in done.stderr.splitlines() if line.startswith("maxrss ")]
    assert done.returncode == 0, done.stderr
    assert peak, done.stderr
    return wall, int(peak[-1].split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small counts, a quick check")
    args = parser.parse_args()
    marks = [10, 30, 100] if args.smoke else [100, 1_000, 10_000]
    queued = 2_000 if args.smoke else 100_000
    print(f"bench_host_memory on {machine()}")
    with tempfile.TemporaryDirectory(prefix="wfrun-bench-host-mem-") as tmp:
        print("runs served (one host, ~10 KB output each):")
        figures = served(Path(tmp) / "served", marks)
        growth = figures[-1][1] - figures[0][1]
        print(f"  growth {figures[0][0]:,} -> {figures[-1][0]:,} runs: {growth:+.1f} MB "
              "(aim: within 20 MB)")
        peak = queued_peak(Path(tmp) / "queued", queued, 3.0 if args.smoke else 10.0)
        print(f"launches queued: {queued:,} (~2 KB input each): host peak RSS {peak:.1f} MB "
              "(aim: at most 100 MB)")


if __name__ == "__main__":
    main()
