"""Shell-step overhead: how much longer a `run_shell` step takes than the bare process.

    .venv/bin/python bench/bench_shell.py             # 200 steps each way
    .venv/bin/python bench/bench_shell.py --root DIR  # import `runner` from DIR (a before copy)

Interleaved in one run, N times each: `subprocess.run(["true"])` (the floor: fork,
exec, exit, reap) and `run_shell(["true"])` as a shell action runs it (own process
group, pipes drained on threads, stdin, the kill-group check after exit, output
decoding). Printed: median and p90 wall ms of each and the median overhead per step.
Wall time is the point here (waiting, not CPU), so compare the two lines of one run.

Aim (issue 15): <= 1 ms overhead per shell step (it was ~12 ms under load: a 20 ms
poll of the child).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument("--root", type=Path, default=REPO)
    args = parser.parse_args()
    if args.smoke:
        args.n = 5
    sys.path.insert(0, str(args.root))
    sys.path.insert(0, str(REPO / "bench"))
    from benchkit import machine

    from runner.clock import SystemClock
    from runner.engine._control import RunControl
    from runner.engine._procs import run_shell

    clock, control = SystemClock(), RunControl()
    bare, shell = [], []
    for _ in range(args.n):
        t0 = time.perf_counter()
        subprocess.run(["true"], check=True, stdin=subprocess.DEVNULL,
                       capture_output=True)
        bare.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        res = run_shell(["true"], use_shell=False, cwd=None, env=None, stdin=None,
                        deadline=None, cap=1_000_000, control=control, clock=clock)
        shell.append((time.perf_counter() - t0) * 1000)
        if res.ending != "exited" or res.exit_code != 0:
            sys.exit(f"the step ended {res.ending} {res.exit_code}: {res.error}")

    def p90(xs: list[float]) -> float:
        return sorted(xs)[int(len(xs) * 0.9)]

    print(f"machine: {machine()}")
    print(f"runner imported from {args.root}")
    print(f"subprocess.run(['true']):   median {statistics.median(bare):.2f} ms, "
          f"p90 {p90(bare):.2f} ms ({args.n} runs)")
    print(f"run_shell(['true']) step:   median {statistics.median(shell):.2f} ms, "
          f"p90 {p90(shell):.2f} ms")
    print(f"overhead per shell step:    {statistics.median(shell) - statistics.median(bare):.2f}"
          " ms (median minus median; aim <= 1 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
