"""`wfrun runs` first page and `wfrun status` at 200 and at 100,000 runs (issue 15).

    .venv/bin/python bench/bench_runs_list.py                  # 200 and 100,000 runs
    .venv/bin/python bench/bench_runs_list.py --sizes 200,10000
    .venv/bin/python bench/bench_runs_list.py --json

Setup, per size, in a temporary project: 200 real runs of a one-node workflow
(every 10th fails, every 25th waits at a checkpoint) through the real foreground
runtime (launch row, claim, engine, bundle), and 5 queued launches through the
real store API, so `wfrun status` has something to list. The rest of the size
are synthetic `done` launch rows inserted with one SQL `executemany` into the
same store file, all older than the real ones and without bundles: the first page
is made of real runs, and a listing that touched the synthetic rows' bundles
would find none (so this measures the SQL page, not 100,000 bundle reads).

Figures: each command as a real `wfrun` subprocess (wall and CPU of the child,
the median of --repeat runs; Python start-up and imports included), and the page
itself in-process (`page_runs`, no start-up) to show what grows with the store.
"""

from __future__ import annotations

import argparse
import json
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.benchkit import machine  # noqa: E402
from runner.compiler import build_catalog  # noqa: E402
from runner.engine import RunControl, RunReader  # noqa: E402
from runner.host.runtime._foreground import run_workflow  # noqa: E402
from runner.host.runtime._local import Workspace, open_store, store_path  # noqa: E402
from runner.host.runtime._runlist import page_runs  # noqa: E402
from runner.host.runtime._views import RunFilter  # noqa: E402

REAL = 200
QUEUED = 5
WORKFLOWS = {
    "quick": "name: quick\nstart: one\nnodes:\n  one: {compute: \"{{ {'n': input.n} }}\"}\n",
    "boom": "name: boom\nstart: fail\nnodes:\n  fail: {action: {shell: [sh, -c, 'exit 3']}}\n",
    "ask": "name: ask\nstart: ask\nnodes:\n  ask: {checkpoint: {summary: \"ok?\"}}\n",
}
COMMANDS: dict[str, list[str]] = {
    "runs (first page)": ["runs", "--json"],
    "runs --workflow quick": ["runs", "--workflow", "quick", "--json"],
    "runs --status failed": ["runs", "--status", "failed", "--json"],
    "runs --status waiting": ["runs", "--status", "waiting", "--json"],
    "status": ["status", "--json"],
}


def make_project(root: Path, size: int) -> None:
    folder = root / ".wfrun" / "workflows"
    folder.mkdir(parents=True)
    for name, text in WORKFLOWS.items():
        (folder / f"{name}.yaml").write_text(text)
    ws = Workspace(build_catalog("workflows", root, None), root, root / "state")
    store = open_store(ws)
    for i in range(REAL):
        name = "boom" if i % 10 == 9 else "ask" if i % 25 == 24 else "quick"
        run_workflow(ws, store, name, {"n": i} if name == "quick" else {}, RunControl())
    from bench.benchkit import plain_coordinator  # the real preflight queues them

    coordinator = plain_coordinator(ws, store, "bench:1", clock=ws.clock)
    for i in range(QUEUED):
        coordinator.prepare("quick", {"n": -i})
    store.close()
    synthetic = size - REAL
    if synthetic <= 0:
        return
    oldest = min(int(r[0]) for r in sqlite3.connect(store_path(ws)).execute(
        "SELECT created_at FROM workflow_run_queue"))
    source = json.dumps({"source": None, "sources": []})
    rows = []
    for i in range(synthetic):
        at = oldest - (synthetic - i) * 1000  # one a second, all before the real runs
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(at / 1000))
        rows.append((f"quick-{stamp}-s{i:07x}", "quick", source, "sha256:" + "0" * 64,
                     at, at + 5, at + 1, at + 5))
    with sqlite3.connect(store_path(ws)) as db:
        db.executemany(
            "INSERT INTO workflow_run_queue (run_id, workflow_ref, workflow_source_json,"
            " definition_digest, status, created_at, updated_at, started_at, finished_at,"
            " ending) VALUES (?, ?, ?, ?, 'done', ?, ?, ?, ?, 'completed')", rows)


def child(root: Path, args: list[str]) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "runner", "--project", str(root), *args],
                          capture_output=True, text=True, cwd=root, timeout=600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def measure(size: int, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="wfrun-bench-runs-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        make_project(root, size)
        out: dict[str, Any] = {"runs": size, "setup_s": round(time.perf_counter() - t0, 1)}
        for label, args in COMMANDS.items():
            samples = [child(root, args) for _ in range(repeat)]
            shown = json.loads(samples[-1][2])
            rows = len(shown.get("runs", shown.get("launches", [])))
            out[label] = {"wall_ms": round(statistics.median(s[0] for s in samples) * 1000, 1),
                          "cpu_ms": round(statistics.median(s[1] for s in samples) * 1000, 1),
                          "rows": rows}
        ws = Workspace(build_catalog("workflows", root, None), root, root / "state")
        store = open_store(ws, read_only=True)
        reader = RunReader(ws.runs_dir)
        times = []
        for _ in range(max(repeat, 5)):
            t1 = time.perf_counter()
            page_runs(store, reader, RunFilter())
            times.append(time.perf_counter() - t1)
        store.close()
        out["page_runs in-process"] = {"ms": round(statistics.median(times) * 1000, 2)}
        return out


def main() -> None:
    global REAL  # --smoke makes fewer real runs
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default=f"{REAL},100000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    args = parser.parse_args()
    if args.smoke:
        REAL, args.sizes, args.repeat = 5, "5,50", 1
    sizes = [int(s) for s in args.sizes.split(",")]
    if any(s < REAL for s in sizes):
        parser.error(f"every size must be at least {REAL} (the real runs)")
    results = [measure(size, args.repeat) for size in sizes]
    if args.json:
        print(json.dumps({"machine": machine(), "results": results}, indent=2))
        return
    print(f"machine: {machine()}")
    for r in results:
        print(f"\n{r['runs']:,} runs ({REAL} real, {r['runs'] - REAL:,} synthetic rows;"
              f" setup {r['setup_s']} s)")
        for label in COMMANDS:
            f = r[label]
            print(f"  wfrun {label:<24} wall {f['wall_ms']:7.1f} ms  cpu {f['cpu_ms']:7.1f} ms"
                  f"  ({f['rows']} rows)")
        print(f"  page_runs in-process            {r['page_runs in-process']['ms']:7.2f} ms")


if __name__ == "__main__":
    main()
