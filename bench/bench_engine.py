"""Engine benchmarks: per-node overhead of a run, and a whole `wfrun run` process.

    .venv/bin/python bench/bench_engine.py            # all figures
    .venv/bin/python bench/bench_engine.py --check    # exit 1 if the aim is missed
    .venv/bin/python bench/bench_engine.py --profile  # cProfile of the durable chain, top 30

(a) a 200-node chain of trivial compute nodes (`{{ i }}`), run in this process
    with `Engine(durability="full")` (node_finished and run-level events fsync'd)
    and `durability="normal"` (no fsync): time of `Engine.start` (wall, and this
    process's CPU) divided by the node count, median of 7 runs after a warm-up,
    a fresh Engine and bundle each. Also one fsync'd append on this disk, for scale.
(b) the whole `wfrun run demo` process (the built-in tour: compute, notify and
    one `uname` action, 13 steps, no agent), start to exit, median of 5 after a
    warm-up; next to `wfrun --version` so interpreter start-up is visible.

Aim (DESIGN §4; 2-core machine): (a) durable <= 1 ms per node.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchkit import machine  # noqa: E402

from runner.compiler import Compiler, WorkflowDefinition  # noqa: E402
from runner.engine import Engine  # noqa: E402

CHAIN_NODES = 200
AIM_DURABLE_MS = 1.0


def chain_yaml(n: int) -> str:
    lines = ["name: chain", "start: n0", f"max_steps: {n + 10}", "nodes:"]
    lines += [f'  n{i}: {{compute: "{{{{ {i} }}}}"}}' for i in range(n)]
    lines.append("edges:")
    lines += [f"  - {{from: n{i}, to: n{i + 1}}}" for i in range(n - 1)]
    return "\n".join(lines) + "\n"


def compile_chain(folder: Path, n: int) -> WorkflowDefinition:
    path = folder / "chain.yaml"
    path.write_text(chain_yaml(n))
    result = Compiler().compile_path(path)
    if not result.valid or result.definition is None:
        sys.exit("the chain does not compile: " + "; ".join(d.message for d in result.errors))
    return result.definition


def run_chain(folder: Path, definition: WorkflowDefinition, durability: str
              ) -> tuple[float, float]:
    """Wall and CPU seconds of one whole run (start to sealed bundle)."""
    engine = Engine(runs_dir=folder / f"runs-{durability}", durability=durability,
                    project_root=folder)
    c0, t0 = time.process_time(), time.perf_counter()
    outcome = engine.start(definition)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if outcome.status != "completed" or outcome.final_output != len(definition.nodes) - 1:
        sys.exit(f"the chain ended {outcome.status}: {outcome.error}")
    return wall, cpu


def time_chain(folder: Path, definition: WorkflowDefinition, durability: str,
               runs: int = 7) -> tuple[list[float], list[float]]:
    """Wall and CPU milliseconds per node, one figure per run."""
    run_chain(folder, definition, durability)  # warm-up: imports, template environments
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = run_chain(folder, definition, durability)
        walls.append(wall * 1000 / len(definition.nodes))
        cpus.append(cpu * 1000 / len(definition.nodes))
    return walls, cpus


def time_fsync(folder: Path, count: int = 200) -> float:
    """Median milliseconds of one small append + fsync on this disk."""
    fd = os.open(folder / "fsync-probe", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    times = []
    try:
        for _ in range(count):
            t0 = time.perf_counter()
            os.write(fd, b'{"seq":1,"type":"node_finished"}\n')
            os.fsync(fd)
            times.append((time.perf_counter() - t0) * 1000)
    finally:
        os.close(fd)
    return statistics.median(times)


def wfrun_command() -> list[str]:
    exe = Path(sys.executable).with_name("wfrun")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "runner"]


def time_process(args: list[str], folder: Path, runs: int = 5) -> list[float]:
    """Wall seconds of whole `wfrun ...` processes; the first (cache-warming) run dropped."""
    project = folder / "project"
    (project / ".wfrun").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("WFRUN_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["WFRUN_HOME"] = str(folder / "home")
    cmd = [*wfrun_command(), "--project", str(project), *args]
    walls = []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True,
                              check=False)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.exit(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        if i:
            walls.append(wall)
    return walls


def profile(folder: Path, definition: WorkflowDefinition) -> None:
    run_chain(folder, definition, "full")  # warm-up
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(3):
        run_chain(folder, definition, "full")
    prof.disable()
    for order in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(order).print_stats(30)
        print(f"--- 3 x {CHAIN_NODES}-node chain, durability full, by {order} ---\n"
              f"{out.getvalue()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the aim is missed")
    parser.add_argument("--profile", action="store_true", help="print cProfile reports")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    args = parser.parse_args()
    nodes, runs = (10, 1) if args.smoke else (CHAIN_NODES, 0)
    tmp = Path(tempfile.mkdtemp(prefix="wfrun-bench-engine-"))
    try:
        definition = compile_chain(tmp, nodes)
        if args.profile:
            profile(tmp, definition)
            return 0
        full, full_cpu = time_chain(tmp, definition, "full", runs or 7)
        normal, normal_cpu = time_chain(tmp, definition, "normal", runs or 7)
        fsync_ms = time_fsync(tmp)
        demo = time_process(["run", "demo", "-q"], tmp, runs or 5)
        version = time_process(["--version"], tmp, runs or 5)
        full_ms, normal_ms = statistics.median(full), statistics.median(normal)
        figures: dict[str, Any] = {
            "machine": machine(),
            "chain": {"nodes": nodes, "aim_durable_ms_per_node": AIM_DURABLE_MS,
                      "full_ms_per_node": round(full_ms, 3),
                      "normal_ms_per_node": round(normal_ms, 3),
                      "full_cpu_ms_per_node": round(statistics.median(full_cpu), 3),
                      "normal_cpu_ms_per_node": round(statistics.median(normal_cpu), 3),
                      "full_runs": [round(t, 3) for t in full],
                      "normal_runs": [round(t, 3) for t in normal],
                      "fsync_ms": round(fsync_ms, 3)},
            "process": {"demo_s": round(statistics.median(demo), 3),
                        "demo_runs": [round(t, 3) for t in demo],
                        "version_s": round(statistics.median(version), 3)},
        }
        if args.json:
            print(json.dumps(figures, indent=2))
        else:
            c, p = figures["chain"], figures["process"]
            print(f"machine: {figures['machine']}")
            print(f"(a) {nodes}-node compute chain, in process, median of {len(full)}:")
            print(f"    durability full:   {full_ms:.3f} ms/node wall, "
                  f"{c['full_cpu_ms_per_node']:.3f} CPU (aim <= {AIM_DURABLE_MS} ms)  "
                  + " ".join(f"{t:.3f}" for t in full))
            print(f"    durability normal: {normal_ms:.3f} ms/node wall, "
                  f"{c['normal_cpu_ms_per_node']:.3f} CPU  "
                  + " ".join(f"{t:.3f}" for t in normal))
            print(f"    one fsync'd append on this disk: {c['fsync_ms']:.3f} ms")
            print(f"(b) `wfrun run demo` process: median {p['demo_s']:.3f} s of {len(demo)} "
                  f"(`wfrun --version`: {p['version_s']:.3f} s)  "
                  + " ".join(f"{t:.3f}" for t in demo))
        missed = full_ms > AIM_DURABLE_MS
        if missed:
            print("aim missed", file=sys.stderr)
        return 1 if (missed and args.check) else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
