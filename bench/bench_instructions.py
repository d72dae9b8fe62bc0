"""Instructions per trivial 3-node run, counted by valgrind: a figure this VM's noise
cannot move.

    .venv/bin/python bench/bench_instructions.py              # 60 cycles
    .venv/bin/python bench/bench_instructions.py -n 100
    .venv/bin/python bench/bench_instructions.py --root DIR   # `runner` from DIR (before)

CPU time per run moves by 15-100 % between identical runs on this VM, so a cut of a
few percent cannot be seen in `bench_run_cost`. User-space instructions can:
`valgrind --tool=callgrind` runs this script's cycles (prepare -> claim -> execute of
the 3-node chain on a real `SqliteStore`, as `bench_run_cost --same-thread` does),
once with N cycles and once with none, and the difference over N is the
instructions per run, repeatable to ~0.3 %. Kernel work (fsync, file creation) is
not counted, and an instruction is not a fixed time: it compares two versions of
the Python side, it is no replacement for the CPU figures.

Needs valgrind (`apt-get install valgrind`); it runs the interpreter ~50x slower,
so 60 cycles take about a minute.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchkit import CHAIN3, machine, plain_coordinator, use_root  # bench/ is on sys.path

ROOT = use_root()


def cycles(n: int, no_chain: bool = False) -> None:
    """The measured body, run under valgrind (`--cycles N`)."""
    from runner.compiler import build_catalog
    from runner.host.runtime._local import Workspace
    from runner.store import SqliteStore

    tmp = Path(tempfile.mkdtemp(prefix="wfrun-bench-instr-"))
    try:
        root = tmp / "proj"
        (root / ".wfrun" / "workflows").mkdir(parents=True)
        (root / ".wfrun" / "workflows" / "three.yaml").write_text(CHAIN3)
        ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
        store = SqliteStore(root / ".wfrun" / "state" / "store.sqlite3")
        coord = plain_coordinator(ws, store, "bench-instr")

        # As a busy host slot: the next launch is claimed with the last run's ending
        # (bench_run_cost.py); without `next_claim` (an older --root) or with
        # --no-chain, a claim of its own per run.
        chain = None if no_chain else getattr(coord, "next_claim", None)
        pending: list[Any] = []

        def cycle() -> None:
            coord.prepare("three", None)
            if chain is None:
                record = coord.claim_next(None)
                assert record is not None
                outcome = coord.execute(record)
            else:
                if not pending:
                    coord.prepare("three", None)
                    pending.append(coord.claim_next(None))
                then = chain()
                outcome = coord.execute(pending.pop(), then_claim=then)
                pending.append(then.record)
            if outcome is None or outcome.status != "completed":
                sys.exit(f"the run did not complete: {outcome}")

        for _ in range(30 + n):  # 30 warm-up runs in both: imports, compiles, caches
            cycle()
        store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def instructions(n: int, no_chain: bool) -> int:
    argv = [sys.executable, __file__, "--root", str(ROOT), "--cycles", str(n),
            *(["--no-chain"] if no_chain else [])]
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          *argv], capture_output=True, text=True, check=False)
    found = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if out.returncode != 0 or found is None:
        sys.exit(f"valgrind failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    return int(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    parser.add_argument("-n", type=int, default=60, help="measured cycles (default 60)")
    parser.add_argument("--cycles", type=int, help=argparse.SUPPRESS)  # under valgrind
    parser.add_argument("--no-chain", action="store_true",
                        help="claim each launch apart (before chained claims)")
    args = parser.parse_args()
    if args.smoke:
        args.n = 2
    if args.cycles is not None:
        cycles(args.cycles, args.no_chain)
        return 0
    if args.smoke:  # the cycles still run, uncounted: valgrind would take minutes
        cycles(args.n, args.no_chain)
        print(f"smoke: {args.n} cycles ran without valgrind (it runs the interpreter ~50x "
              "slower); a run without --smoke counts their instructions")
        return 0
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed: apt-get install valgrind")
    base, total = instructions(0, args.no_chain), instructions(args.n, args.no_chain)
    shape = "claim -> execute" if args.no_chain else "execute + the next claim"
    print(f"machine: {machine()}")
    print(f"runner imported from {ROOT}")
    print(f"3-node queued run (prepare -> {shape}), {args.n} runs: "
          f"{(total - base) / args.n / 1e6:.3f} M user-space instructions per run "
          f"(callgrind; {os.cpu_count()} CPU machine, kernel work not counted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
