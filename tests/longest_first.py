"""Rebuild tests/longest_first.txt from measured durations (issue 34 item 11).

    python tests/longest_first.py LOG [LOG ...]

Each LOG is the output of a pytest run with `--durations=N` (scripts/test prints the
slowest 60; a tier run by hand works too), or an older order file. A test's figure in
one log is its setup, call and teardown added up; across logs, the median of the logs
it appears in (a test that was slow once, because something heavy ran beside it, does
not jump the queue). Tests of `MIN_SECONDS` and more are written, longest first;
tests/conftest.py starts them before all others. A node id that no longer exists is
skipped by the sort, so an old log does no harm, but a test that got faster keeps its
old place until the logs are refreshed.
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).with_name("longest_first.txt")
#: Shorter tests gain nothing from going first: the run's tail is one such test.
MIN_SECONDS = 5.0
#: `12.34s call     tests/x.py::test_y` (pytest), or `12.3 tests/x.py::test_y` (this file's
#: own lines: an older order file can be given as one more log).
LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)(?:s (?:setup|call|teardown))? +(\S+::\S+)$")
HEADER = """\
# The tests that took longest under load, seconds first (the median over the runs that
# measured them). tests/conftest.py runs these before all others, longest first, so
# that pytest-xdist's workers end together: a 40 s test started last would add its 40 s
# to the suite's wall time. Rebuild with `python tests/longest_first.py LOG...` from
# scripts/test's "slowest 60 durations" (or a tier's `--durations`); an id that no
# longer exists changes nothing.
"""


def durations(text: str) -> dict[str, float]:
    """node id -> seconds (setup + call + teardown) in one pytest output."""
    found: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        match = LINE.match(line)
        if match:
            found[match[2]] += float(match[1])
    return dict(found)


def ranked(logs: list[str]) -> list[tuple[float, str]]:
    seen: dict[str, list[float]] = defaultdict(list)
    for text in logs:
        for node, seconds in durations(text).items():
            seen[node].append(seconds)
    figures = [(statistics.median(values), node) for node, values in seen.items()]
    return sorted(((s, n) for s, n in figures if s >= MIN_SECONDS), key=lambda f: (-f[0], f[1]))


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    rows = ranked([Path(name).read_text(encoding="utf-8", errors="replace") for name in argv])
    OUT.write_text(HEADER + "".join(f"{s:.1f} {n}\n" for s, n in rows), encoding="utf-8")
    print(f"{OUT}: {len(rows)} tests of {MIN_SECONDS:g} s or more")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
