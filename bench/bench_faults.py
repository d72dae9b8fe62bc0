"""Fault injection over one real SQLite store, 1,000 seeds by default (issue 9).

    python bench/bench_faults.py [--seeds N | --seed S | --smoke]   (--smoke: 3 seeds)

Prints one JSON line per failing seed (with its problems) and a summary line;
exits 1 if any seed broke an invariant. The harness lives beside its test in
tests/integration/launch/faultkit.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"
                       / "launch"))

from faultkit import main

if __name__ == "__main__":
    args = sys.argv[1:]
    raise SystemExit(main(["--seeds", "3", *(a for a in args if a != "--smoke")]
                          if "--smoke" in args else args))
