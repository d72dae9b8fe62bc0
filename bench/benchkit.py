"""Shared bits of the benchmark scripts (run them as `python bench/NAME.py`)."""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def use_root() -> Path:
    """Where `runner` is imported from: this checkout, or `--root DIR` (the first
    argument, removed from sys.argv): a copy of an older commit (`git archive COMMIT
    runner | tar -x -C DIR`), to compare two versions in one run."""
    root = REPO
    if len(sys.argv) > 2 and sys.argv[1] == "--root":
        root = Path(sys.argv[2]).resolve()
        del sys.argv[1:3]
    sys.path.insert(0, str(root))
    return root


def machine() -> str:
    """One line naming the machine the figures were taken on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{os.cpu_count()} CPU ({cpu}), {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def sqlite_commit_cost(folder: Path, n: int = 100) -> float:
    """Median milliseconds of one WAL, synchronous=FULL commit of one row on this disk."""
    conn = sqlite3.connect(folder / "commit-probe.sqlite3", isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        times = []
        for i in range(n):
            started = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (?)", (i,))
            conn.execute("COMMIT")
            times.append((time.perf_counter() - started) * 1000)
    finally:
        conn.close()
    return statistics.median(times)
