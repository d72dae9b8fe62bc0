"""A run bundle's writer lock is a flock on the bundle folder itself (no `.lock` file).

Real processes: while one holds a bundle open, another process can neither open it
for writing nor remove it (`wfrun prune`'s path); a SIGKILLed holder's lock goes
with it, and the bundle is then opened and removed normally.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import LineReader

from runner.engine._bundle import FolderBundle
from runner.engine._removal import remove_ended_run
from runner.engine._space import FolderSpace
from runner.errors import InputError

HOLD = (
    "import sys; from pathlib import Path; from runner.engine._bundle import FolderBundle\n"
    "bundle = FolderBundle.open(Path(sys.argv[1]), sys.argv[2])\n"
    "print('held', flush=True); sys.stdin.readline()\n"
)


def _ended_bundle(runs: Path, run_id: str) -> None:
    bundle = FolderSpace(runs).create(run_id)
    try:
        bundle.append([{"type": "run_started", "run_id": run_id, "seq": 1},
                       {"type": "run_completed", "run_id": run_id, "seq": 2}], sync=True)
        bundle.write_manifest({"run_id": run_id, "status": "completed"})
    finally:
        bundle.close()


def test_a_held_bundle_is_refused_to_other_processes_until_its_holder_dies(
        tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _ended_bundle(runs, "run-1")
    assert not (runs / "run-1" / ".lock").exists()  # the folder is the lock
    with subprocess.Popen([sys.executable, "-c", HOLD, str(runs), "run-1"], text=True,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as child:
        try:
            assert child.stdout is not None
            assert LineReader(child.stdout).next_line() == "held"
            with pytest.raises(InputError, match=r"^run 'run-1' is being executed by another "
                                                 r"process; wait for it to end"):
                FolderBundle.open(runs, "run-1")
            with pytest.raises(InputError, match="being executed by another process"):
                remove_ended_run(runs, "run-1")
            assert (runs / "run-1" / "manifest.json").is_file()  # not removed
            os.kill(child.pid, signal.SIGKILL)
            assert child.wait(30) == -signal.SIGKILL
        finally:
            child.kill()
            child.wait(30)
    reopened = FolderBundle.open(runs, "run-1")  # the kernel released the dead one's lock
    reopened.close()
    remove_ended_run(runs, "run-1")
    assert not (runs / "run-1").exists()
