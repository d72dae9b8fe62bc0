"""What `wfrun prune` finishes after removing ended runs (`BundleSpace.remove_ended`,
engine/_space.py: only a bundle whose trace says it ended, under its own lock).

A folder bundle is renamed to a dot-name (`LEFTOVER`, which `RunReader.list_ids`
skips) before it is deleted: a crash in between leaves an invisible leftover that
`finish_leftovers` deletes, never a half-deleted run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from ._bundlefmt import LEFTOVER, SNAPSHOTS
from ._rows import BundleRows
from ._space import space_for


def remove_ended_run(runs_dir: Path, run_id: str, rows: BundleRows | None = None) -> None:
    """Delete the bundle of an ended run and its continuation marker (`wfrun prune`)."""
    space_for(runs_dir, rows).remove_ended(run_id)


def finish_leftovers(runs_dir: Path) -> int:
    """Delete folders an interrupted removal left behind; how many there were."""
    try:
        names = [e.name for e in os.scandir(runs_dir) if e.name.startswith(LEFTOVER)]
    except FileNotFoundError:
        return 0
    for name in names:
        _rmtree(runs_dir / name)
    return len(names)


def forget_snapshots(runs_dir: Path) -> int:
    """Delete the shared workflow snapshots (`_bundle.write_snapshot`) that no bundle
    links any more; how many. A creator linking one just now finds it gone and stores
    it again, so nothing a run needs is lost."""
    try:
        entries = list(os.scandir(runs_dir / SNAPSHOTS))
    except FileNotFoundError:
        return 0
    removed = 0
    for entry in entries:
        with contextlib.suppress(FileNotFoundError):
            if entry.stat(follow_symlinks=False).st_nlink == 1:
                os.unlink(entry.path)
                removed += 1
    return removed


def _rmtree(path: Path) -> None:
    # A sealed bundle's files are 0400, but deleting needs only the folders' write bit.
    shutil.rmtree(path)
