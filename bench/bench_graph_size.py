"""Per-node cost against workflow size: is a run linear in its node count?

    .venv/bin/python bench/bench_graph_size.py                  # 10, 50, 500, 5000 nodes
    .venv/bin/python bench/bench_graph_size.py --sizes 10,500   # other sizes
    .venv/bin/python bench/bench_graph_size.py --check          # exit 1 if the aim is missed
    .venv/bin/python bench/bench_graph_size.py --profile 5000   # cProfile of one run, top 25
    .venv/bin/python bench/bench_graph_size.py --root DIR       # `runner` from DIR (before)

For each size N: a chain of N compute nodes where node i renders
`{{ outputs.n<i-1> + 1 }}` (so every node reads the previous node's output through
the template context), run in this process with `Engine(durability="full")`
(node_finished and run-level events fsync'd). Printed: this process's CPU time
(time.process_time, not wall: the machine may be shared) for `Engine.start` divided
by N, best and median of the runs, a fresh Engine and bundle each, after one
first run of the same definition (printed apart: it also compiles each node's
template, which later runs of the workflow in this process reuse). The YAML
compile is not counted. One fsync'd append on this disk is printed beside the
figures, for scale.

Aim (issue 15): CPU per node flat from 10 to 5,000 nodes, <= 0.5 ms at 5,000.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchkit import machine, use_root  # bench/ is on sys.path

ROOT = use_root()  # `--root DIR`: `runner` from DIR (benchkit.use_root)

from runner.compiler import Compiler, WorkflowDefinition  # noqa: E402
from runner.engine import Engine  # noqa: E402

AIM_MS_AT_5000 = 0.5
SIZES = (10, 50, 500, 5000)


def chain_yaml(n: int) -> str:
    lines = ["name: chain", "start: n0", f"max_steps: {n + 10}", "nodes:",
             '  n0: {compute: "{{ 0 }}"}']
    lines += [f'  n{i}: {{compute: "{{{{ outputs.n{i - 1} + 1 }}}}"}}' for i in range(1, n)]
    lines.append("edges:")
    lines += [f"  - {{from: n{i}, to: n{i + 1}}}" for i in range(n - 1)]
    return "\n".join(lines) + "\n"


def compile_chain(folder: Path, n: int) -> WorkflowDefinition:
    sub = folder / f"def{n}"  # the file name is the workflow's name
    sub.mkdir(exist_ok=True)
    path = sub / "chain.yaml"
    path.write_text(chain_yaml(n))
    result = Compiler().compile_path(path)
    if not result.valid or result.definition is None:
        sys.exit("the chain does not compile: " + "; ".join(d.message for d in result.errors))
    return result.definition


def run_once(folder: Path, definition: WorkflowDefinition, n: int, tag: str) -> float:
    """CPU seconds of one whole run (start to sealed bundle)."""
    engine = Engine(runs_dir=folder / f"runs-{tag}", durability="full", project_root=folder)
    c0 = time.process_time()
    outcome = engine.start(definition)
    cpu = time.process_time() - c0
    if outcome.status != "completed" or outcome.final_output != n - 1:
        sys.exit(f"the {n}-node chain ended {outcome.status}: {outcome.error}")
    return cpu


def runs_for(n: int) -> int:
    return 7 if n <= 50 else 5 if n <= 500 else 3


def main() -> int:
    from bench_engine import time_fsync  # here: it puts REPO first on sys.path

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--check", action="store_true", help="exit 1 if the aim is missed")
    parser.add_argument("--profile", type=int, metavar="N", help="profile one N-node run")
    parser.add_argument("--runs", type=int, help="timed runs per size (default 7/5/3)")
    args = parser.parse_args()
    if args.smoke:
        args.sizes, args.runs = "10,50", 1
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="wfrun-bench-graph-"))
    try:
        if args.profile:
            definition = compile_chain(tmp, args.profile)
            run_once(tmp, compile_chain(tmp, 10), 10, "warm")
            prof = cProfile.Profile()
            prof.enable()
            run_once(tmp, definition, args.profile, "prof")
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
            print(out.getvalue())
            return 0
        print(f"machine: {machine()}")
        print(f"runner imported from {ROOT}")
        print(f"one fsync'd append on this disk: {time_fsync(tmp):.3f} ms")
        print("compute chain, each node reads the previous output; durability full; "
              "CPU ms per node (process_time of Engine.start / N):")
        run_once(tmp, compile_chain(tmp, min(sizes)), min(sizes), "warm")
        medians: dict[int, float] = {}
        for n in sizes:
            definition = compile_chain(tmp, n)
            first = run_once(tmp, definition, n, f"{n}-first") * 1000 / n
            per_node = [run_once(tmp, definition, n, f"{n}-{i}") * 1000 / n
                        for i in range(args.runs or runs_for(n))]
            medians[n] = statistics.median(per_node)
            print(f"  {n:>6} nodes: median {medians[n]:.3f}  best {min(per_node):.3f}  "
                  f"({len(per_node)} runs: " + " ".join(f"{t:.3f}" for t in per_node)
                  + f"); first run {first:.3f} (compiles its {n} templates)")
        low, high = min(sizes), max(sizes)
        print(f"  ratio {high}/{low} nodes: {medians[high] / medians[low]:.2f}x "
              f"(flat = 1.0x); aim <= {AIM_MS_AT_5000} ms per node at 5000")
        missed = 5000 in medians and medians[5000] > AIM_MS_AT_5000
        if missed:
            print("aim missed", file=sys.stderr)
        return 1 if (missed and args.check) else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
