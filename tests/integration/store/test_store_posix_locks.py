"""POSIX lock safety: opening a second handle must never drop SQLite's locks.

Closing *any* descriptor of a file drops every POSIX lock the process holds on
it. If opening a store read the database header with plain Python I/O, a second
open in the same process would silently release the first connection's locks,
and another process could then delete the live `-wal` file under it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from storekit import launch

from runner.store import SqliteStore

OPEN_AND_CLOSE = (
    "import sys; from runner.store import SqliteStore; "
    "s = SqliteStore(sys.argv[1]); n = len(s.launches.query()); s.close(); print(n)"
)


def _other_process(path: Path) -> int:
    out = subprocess.run([sys.executable, "-c", OPEN_AND_CLOSE, str(path)],
                         capture_output=True, text=True, timeout=30, check=True)
    return int(out.stdout.strip())


def test_a_second_handle_in_one_process_keeps_the_first_ones_locks(tmp_path: Path) -> None:
    path = tmp_path / "state" / "store.sqlite3"
    first = SqliteStore(path)
    first.launches.enqueue(launch("run-1"))
    wal = path.with_name(path.name + "-wal")
    assert wal.exists()

    second = SqliteStore(path)  # must not open/close the file with plain I/O
    second.close()

    # Another process opens and closes the store. If our locks had been dropped, it
    # would believe it was the last user and checkpoint and delete our live -wal.
    assert _other_process(path) == 1
    assert wal.exists(), "the live -wal file was deleted under an open connection"

    first.launches.enqueue(launch("run-2"))
    assert {r.run_id for r in first.launches.query()} == {"run-1", "run-2"}
    first.close()
    assert _other_process(path) == 2
