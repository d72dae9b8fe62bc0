"""Shared bits of the benchmark scripts (run them as `python bench/NAME.py`)."""

from __future__ import annotations

import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
#: The trivial 3-node compute chain the hot-path figures count (the tests use it too).
CHAIN3 = (REPO / "fixtures" / "workflows" / "chain3.yaml").read_text()


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


def file_create_cost(folder: Path, n: int = 200) -> float:
    """Microseconds of CPU (kernel) to create one empty file in a new folder under
    `folder`: a run bundle creates four and a folder. On this VM it is ~20 µs in most
    folders and 150-450 µs under /tmp, whose inode groups years of test churn have
    crowded; set TMPDIR (e.g. /var/tmp) to measure wfrun rather than that."""
    probe = Path(tempfile.mkdtemp(prefix="create-probe-", dir=folder))
    try:
        started = time.thread_time()
        for i in range(n):
            os.close(os.open(probe / f"f{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        return (time.thread_time() - started) / n * 1e6
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def sqlite_commit_cost(folder: Path, n: int = 100) -> float:
    """Median milliseconds of one WAL, synchronous=FULL commit of one row on this disk."""
    return statistics.median(sqlite_commit_times(folder, n))


def sqlite_commit_times(folder: Path, n: int = 100) -> list[float]:
    """Milliseconds of each of `n` WAL, synchronous=FULL commits of one row on this disk:
    the floor under any durable answer."""
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
    return times


def plain_coordinator(ws: Any, store: Any, runner: str, **overrides: Any) -> Any:
    """A `plain` runner built as tests build one (`runner.testing.build_coordinator`);
    a `--root` tree from before `build_coordinator` gets its hand-built equivalent."""
    try:
        from runner.testing import build_coordinator
    except ImportError:
        from runner.launch import LaunchCoordinator

        return LaunchCoordinator(store, ws, ws.runs_dir, runner_id=runner, **overrides)
    return build_coordinator(ws, store, "plain", runner=runner, **overrides)


def settled_project(root: Path, workflows: dict[str, str]) -> None:
    """A project whose `.wfrun/` has existed a while, as a host's has: its workflows
    written, `state/` and `runs/` made, and every folder's mtime put 10 s back.
    A folder that changed within the last second of a catalog's scan makes every
    compile re-scan the folders (`_racy` in compiler/_workflows.py: a change in the
    same clock tick would not move the mtime), and a fresh project's first run makes
    `runs/`: without this, a bench's first second paid a re-scan per compile (in
    `bench_run_cost -n 200`, most of its 0.8 ms "compile cache" per run)."""
    dot = root / ".wfrun"
    for sub in ("workflows", "state", "runs"):
        (dot / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(dot / sub, 0o700)
    for name, text in workflows.items():
        (dot / "workflows" / name).write_text(text)
    then = time.time() - 10
    for path in (dot / "workflows", dot / "state", dot / "runs", dot, root):
        os.utime(path, (then, then))
