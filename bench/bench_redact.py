"""What `redact` costs a step's output: figures printed, never asserted (issue 37).

    .venv/bin/python bench/bench_redact.py             # 2,000-character texts
    .venv/bin/python bench/bench_redact.py --root DIR  # import `runner` from DIR (A/B)
    .venv/bin/python bench/bench_redact.py --smoke     # tiny sizes, seconds

Every shell step's stderr (and a live log's lines) is redacted before it is recorded,
and an item's output up to three times (the step, the host's record, the parent's).
Printed per output shape: microseconds per call (median of `--rounds` timings of
`--calls` calls each) and per character. The shapes: silent output, a log of ordinary
lines, prose, one long line without spaces (the worst case of the key patterns),
`key=value` lines, and a log holding credentials (the patterns run and replace).
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def shapes(chars: int, seed: int = 7) -> dict[str, str]:
    rng = random.Random(seed)

    def fill(make: str) -> str:
        return (make * (chars // max(len(make), 1) + 1))[:chars]

    words = " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))
                     for _ in range(chars // 3))
    return {
        "silent": "",
        "log lines": fill("INFO 2026-12-05 12:00:01 processing item 42 of /tmp/x/y.txt ok\n"),
        "prose": words[:chars],
        "one long line": "".join(rng.choice(string.ascii_letters + "_-") for _ in range(chars)),
        "key=value lines": fill("max_items=100 retries=3 mode=fast path=/srv/app\n"),
        "with credentials": fill("login ok token=abc123def456 url=https://u:pw@h/x "
                                 "Authorization: Bearer eyJhbGc.eyJzdWI.sig\n"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    parser.add_argument("--chars", type=int, default=2_000)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--root", type=Path, default=REPO)
    args = parser.parse_args()
    if args.smoke:
        args.chars, args.calls, args.rounds = 200, 2, 1
    sys.path.insert(0, str(args.root))
    sys.path.insert(0, str(REPO / "bench"))
    from benchkit import machine

    from runner._safety import redact

    print(f"# bench_redact  {machine()}  runner from {args.root}")
    print(f"{args.chars:,}-character texts, {args.rounds} rounds of {args.calls} calls, medians")
    print(f"  {'shape':<18} {'us/call':>9} {'us/char':>8}")
    for name, text in shapes(args.chars).items():
        redact(text)  # the patterns compiled outside the timing
        times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            for _ in range(args.calls):
                redact(text)
            times.append((time.perf_counter() - t0) / args.calls * 1e6)
        each = statistics.median(times)
        per = f"{each / len(text):>8.2f}" if text else f"{'-':>8}"
        print(f"  {name:<18} {each:>9.1f} {per}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
