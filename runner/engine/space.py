"""Where run bundles live: one narrow seam, two spaces (DESIGN §4).

    FolderSpace(runs_dir)          a folder per run on this host's disk (FolderBundle)
    DatabaseSpace(rows, runs_dir)  rows in the store's database (DatabaseBundle), so
                                   any host sharing the database can resume a run

The engine creates, opens, discards and continues runs only through a space;
`RunReader` reads through the same two (engine/reader.py). Both keep the same
write order, fence and sealing; see engine/bundle.py and engine/dbbundle.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from runner.clock import Clock
from runner.errors import InputError, NotFoundError, OperationFailed

from . import dbbundle
from .bundle import MANIFEST, Fence, FolderBundle, always, read_json
from .dbbundle import DatabaseBundle
from .rows import BundleRows

CONTINUED = ".continued"


class RunBundle(Protocol):
    """One open run, as the driver writes and reads it (FolderBundle, DatabaseBundle)."""

    run_id: str

    @property
    def fence(self) -> Fence: ...
    @fence.setter
    def fence(self, fence: Fence) -> None: ...
    def append(self, events: Any, *, sync: bool) -> None: ...
    def replace_state(self, state: dict[str, Any]) -> None: ...
    def write_manifest(self, manifest: dict[str, Any]) -> None: ...
    def write_workflow(self, snapshot: str) -> None: ...
    def write_artifact(self, data: bytes, media_type: str) -> dict[str, Any]: ...
    def read_artifact(self, ref: dict[str, Any]) -> bytes: ...
    def live_logs(self) -> Path: ...
    def repair(self) -> int: ...
    def truncate_to(self, seq: int) -> None: ...
    def read_trace(self) -> list[dict[str, Any]]: ...
    def read_manifest(self) -> dict[str, Any]: ...
    def seal(self) -> None: ...
    def close(self) -> None: ...


class BundleSpace(Protocol):
    def create(self, run_id: str, fence: Fence, durability: str,
               claim: str | None) -> RunBundle: ...
    def open(self, run_id: str, fence: Fence, durability: str,
             claim: str | None) -> RunBundle: ...
    def view(self, run_id: str) -> RunBundle: ...
    def manifest(self, run_id: str) -> dict[str, Any]: ...
    def started(self, run_id: str) -> bool: ...
    def discard_unstarted(self, run_id: str) -> bool: ...
    def mark_continued(self, parent_run_id: str) -> bool: ...
    def set_continued(self, parent_run_id: str, child_run_id: str) -> None: ...
    def unmark_continued(self, parent_run_id: str, child_run_id: str) -> None: ...


def _check_id(run_id: str) -> None:
    if not run_id or "/" in run_id or run_id.startswith("."):
        raise InputError(f"'{run_id}' is not a run id")


class FolderSpace:
    """Bundles as folders under `runs_dir` (the SQLite store's, and the default)."""

    def __init__(self, runs_dir: Path) -> None:
        self.runs_dir = runs_dir

    def create(self, run_id: str, fence: Fence = always, durability: str = "full",
               claim: str | None = None) -> FolderBundle:
        return FolderBundle.create(self.runs_dir, run_id, fence, durability)

    def open(self, run_id: str, fence: Fence = always, durability: str = "full",
             claim: str | None = None) -> FolderBundle:
        return FolderBundle.open(self.runs_dir, run_id, fence, durability)

    def view(self, run_id: str) -> FolderBundle:
        return FolderBundle(self.runs_dir / run_id, run_id)

    def manifest(self, run_id: str) -> dict[str, Any]:
        _check_id(run_id)
        path = self.runs_dir / run_id / MANIFEST
        if not path.is_file():
            raise NotFoundError(f"no run '{run_id}'; `wfrun runs` lists runs")
        try:
            return read_json(path)
        except OperationFailed:
            raise OperationFailed(f"run '{run_id}' has a damaged manifest") from None

    def started(self, run_id: str) -> bool:
        return FolderBundle.started(self.runs_dir / run_id)

    def discard_unstarted(self, run_id: str) -> bool:
        root = self.runs_dir / run_id
        if not root.is_dir() or FolderBundle.started(root):
            return False
        FolderBundle(root, run_id).remove_unstarted()
        return True

    def mark_continued(self, parent_run_id: str) -> bool:
        marker_dir = self.runs_dir / CONTINUED
        marker_dir.mkdir(mode=0o700, exist_ok=True)
        try:
            fd = os.open(marker_dir / parent_run_id, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return False
        os.close(fd)
        return True

    def set_continued(self, parent_run_id: str, child_run_id: str) -> None:
        fd = os.open(self.runs_dir / CONTINUED / parent_run_id, os.O_WRONLY, 0o600)
        try:
            os.write(fd, child_run_id.encode())
        finally:
            os.close(fd)

    def unmark_continued(self, parent_run_id: str, child_run_id: str) -> None:
        marker = self.runs_dir / CONTINUED / parent_run_id
        try:
            owner = marker.read_text()
        except OSError:
            return
        if owner in ("", child_run_id):
            marker.unlink(missing_ok=True)  # the continuation slot is free again


class DatabaseSpace:
    """Bundles as rows (`BundleRows`); `runs_dir` holds only this host's live logs."""

    def __init__(self, rows: BundleRows, runs_dir: Path, clock: Clock | None = None) -> None:
        self.rows = rows
        self.runs_dir = runs_dir
        self.clock = clock  # times retries while the database is unreachable

    def create(self, run_id: str, fence: Fence = always, durability: str = "full",
               claim: str | None = None) -> DatabaseBundle:
        _check_id(run_id)
        return DatabaseBundle.create(self.rows, run_id, self.runs_dir, fence, claim, self.clock,
                                     durability)

    def open(self, run_id: str, fence: Fence = always, durability: str = "full",
             claim: str | None = None) -> DatabaseBundle:
        _check_id(run_id)
        return DatabaseBundle.open(self.rows, run_id, self.runs_dir, fence, claim, self.clock,
                                   durability)

    def view(self, run_id: str) -> DatabaseBundle:
        return DatabaseBundle(self.rows, run_id, self.runs_dir, clock=self.clock)

    def manifest(self, run_id: str) -> dict[str, Any]:
        _check_id(run_id)
        try:
            return dbbundle.read_document(self.rows, run_id, "manifest")
        except NotFoundError:
            raise NotFoundError(f"no run '{run_id}'; `wfrun runs` lists runs") from None

    def started(self, run_id: str) -> bool:
        return started_row(self.rows.first_event(run_id))

    def discard_unstarted(self, run_id: str) -> bool:
        return self.rows.remove_bundle(run_id, unstarted_only=True)

    def mark_continued(self, parent_run_id: str) -> bool:
        return self.rows.mark_continued(parent_run_id)

    def set_continued(self, parent_run_id: str, child_run_id: str) -> None:
        self.rows.set_continued(parent_run_id, child_run_id)

    def unmark_continued(self, parent_run_id: str, child_run_id: str) -> None:
        self.rows.unmark_continued(parent_run_id, child_run_id)


def started_row(text: str | None) -> bool:
    """The first trace row is `run_started` (seq 1): the run's input is durable."""
    if text is None:
        return False
    parsed = dbbundle.parse_events([text])
    return bool(parsed.events) and parsed.events[0].get("type") == "run_started"


def space_for(runs_dir: Path, rows: BundleRows | None,
              clock: Clock | None = None) -> FolderSpace | DatabaseSpace:
    return FolderSpace(runs_dir) if rows is None else DatabaseSpace(rows, runs_dir, clock)
