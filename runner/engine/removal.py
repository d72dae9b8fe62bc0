"""Removing an ended run's bundle (`wfrun prune`): the one place bundles are deleted.

Only a bundle whose trace says it ended (completed, failed, timed_out, cancelled,
or waiting) is removed, under the bundle's own lock, so a run some process holds
open is never deleted from under it. The folder is first renamed to a dot-name
(which `RunReader.list_ids` skips) and then deleted: a crash in between leaves
an invisible leftover that the next prune finishes, never a half-deleted run.
A bundle in the database (`rows`) is deleted in one transaction (its trace,
documents, artifacts and continuation marker together); a sealed bundle has no
writer, and the database fence keeps out any stale one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from runner.errors import InputError, NotFoundError, OperationFailed

from . import dbbundle
from .bundle import ENDED, SNAPSHOTS, FolderBundle, read_trace
from .reader import CONTINUED, valid_run_id
from .rows import BundleRows
from .state import fold

LEFTOVER = ".removing-"


def remove_ended_run(runs_dir: Path, run_id: str, rows: BundleRows | None = None) -> None:
    """Delete the bundle of an ended run, and its continuation marker."""
    if not valid_run_id(run_id):
        raise InputError(f"'{run_id}' is not a run id")
    if rows is not None:
        _remove_rows(rows, runs_dir, run_id)
        return
    bundle = FolderBundle.open(runs_dir, run_id)  # NotFoundError; InputError when held
    try:
        status = fold(run_id, read_trace(bundle.root).events).status
        if status not in ENDED:
            raise OperationFailed(f"run '{run_id}' is {status}; only ended runs are removed")
        hidden = runs_dir / f"{LEFTOVER}{run_id}"
        os.rename(bundle.root, hidden)
    finally:
        bundle.close()
    _rmtree(hidden)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(runs_dir / CONTINUED / run_id)


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
    """Delete the shared workflow snapshots (`bundle.link_snapshot`) that no bundle
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


def _remove_rows(rows: BundleRows, runs_dir: Path, run_id: str) -> None:
    if not rows.bundle_exists(run_id):
        raise NotFoundError(f"no run '{run_id}'; `wfrun runs` lists runs")
    status = fold(run_id, dbbundle.read_trace(rows, run_id).events).status
    if status not in ENDED:
        raise OperationFailed(f"run '{run_id}' is {status}; only ended runs are removed")
    rows.remove_bundle(run_id, unstarted_only=False)
    local = runs_dir / run_id  # this host's live-log folder, if it ran here
    if local.is_dir():
        shutil.rmtree(local, ignore_errors=True)
