"""Where run bundles live: one seam, two spaces, chosen once (DESIGN §4).

    FolderSpace(runs_dir)          a folder per run on this host's disk (FolderBundle)
    DatabaseSpace(rows, runs_dir)  rows in the store's database (DatabaseBundle), so
                                   any host sharing the database can resume a run

`space_for` picks one where a workspace is opened; from then on nobody asks which.
The engine creates, opens, discards, continues and removes runs only through its
space, and `RunReader` (engine/_reader.py) reads through the same one: every
question about a run (`view`, `exists`, `started`, `manifest`, `trace`, `state`,
...) has one answer per space, as kopf's progress storages have one per backend.
An open run (`RunBundle`) writes in the same order on both, behind the same fence,
and ends with `seal(ending)`: the launch's transition recording how the run ended
commits with the seal where the space can share the transaction (rows), and right
after it where it cannot (a folder); likewise `begin`, the launch's `running`,
with the first node's start. See engine/_bundle.py and engine/_dbbundle.py.

A run id that could name a path outside `runs_dir` ('/', a leading '.', empty) is
refused by the reader before a space sees it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from runner.clock import Clock
from runner.errors import ClaimLost, InputError, NotFoundError, OperationFailed, os_fault

from . import _dbbundle as dbbundle
from ._bundle import FolderBundle, private_dir
from ._bundlefmt import (
    CONTINUED,
    ENDED,
    LEFTOVER,
    MANIFEST,
    MAX_RUN_ID_BYTES,
    TRACE,
    WORKFLOW,
    Fence,
    TraceRead,
    always,
    first_event,
    parse_trace,
)
from ._bundleread import read_json, read_manifest
from ._dbbundle import PATIENCE, DatabaseBundle
from ._rows import BundleRead, BundleRows, LaunchStep
from ._state import RunState, fold

Begin = Callable[[], LaunchStep | None]


class RunBundle(Protocol):
    """One open run, as the driver writes and reads it (FolderBundle, DatabaseBundle)."""

    run_id: str

    @property
    def fence(self) -> Fence: ...
    @fence.setter
    def fence(self, fence: Fence) -> None: ...
    def append(self, events: Iterable[dict[str, Any]], *, sync: bool) -> None: ...
    def replace_state(self, state: dict[str, Any]) -> None: ...
    def write_manifest(self, manifest: dict[str, Any]) -> None: ...
    def write_workflow(self, snapshot: str) -> None: ...
    def write_artifact(self, data: bytes, media_type: str) -> dict[str, Any]: ...
    def read_artifact(self, ref: dict[str, Any]) -> bytes: ...
    def live_logs(self) -> Path: ...
    def start_launch(self) -> bool: ...
    def write_whole(self, crash: Callable[[str], None] | None = None) -> None: ...
    def write_held(self) -> None: ...
    def repair(self) -> int: ...
    def truncate_to(self, seq: int) -> None: ...
    def read_trace(self) -> list[dict[str, Any]]: ...
    def read_manifest(self) -> dict[str, Any]: ...
    def seal(self, ending: LaunchStep | None = None) -> None: ...
    def close(self) -> None: ...


class BundleSpace(Protocol):
    """Every run of a workspace lives in one space. Reads take valid run ids
    (`valid_run_id`); a missing run is a `NotFoundError` with the message the CLI
    shows, an unreadable one an `OperationFailed`."""

    runs_dir: Path
    #: Whether bundle writes commit in the store's own transactions (rows): then a
    #: store that lost a claim (a power cut) lost that claim's bundle writes too, and
    #: a launch's first claim finds no bundle. A folder outlives a lost claim.
    commits_with_store: bool

    # -- writing: `begin` is the claimed launch's `running` step for a new run
    def create(self, run_id: str, fence: Fence = always, durability: str = "full",
               claim: str | None = None, begin: Begin | None = None) -> RunBundle: ...
    def open(self, run_id: str, fence: Fence = always, durability: str = "full",
             claim: str | None = None) -> RunBundle: ...
    def unstarted(self, run_id: str, parent_run_id: str | None = None) -> bool:
        """Whether `run_id` has no started bundle (no durable `run_started`), removing
        a half-made one on the way (`discard_unstarted`): the one question a launch
        asks before it activates a run afresh. A started bundle is never touched."""
        ...
    def discard_unstarted(self, run_id: str, parent_run_id: str | None = None) -> bool:
        """Remove a half-made bundle (its creator died before `run_started` was
        durable), and free its parent's continuation slot (`parent_run_id`): no node
        ran, so nothing is lost. True if one was removed."""
        ...
    def remove_ended(self, run_id: str) -> None: ...
    def mark_continued(self, parent_run_id: str) -> bool: ...
    def set_continued(self, parent_run_id: str, child_run_id: str) -> None: ...
    def unmark_continued(self, parent_run_id: str, child_run_id: str) -> None: ...

    # -- reading: no lock taken, nothing written
    def view(self, run_id: str) -> RunBundle: ...
    def exists(self, run_id: str) -> bool: ...
    def started(self, run_id: str) -> bool: ...
    def manifest(self, run_id: str) -> dict[str, Any]: ...
    def workflow(self, run_id: str) -> dict[str, Any]: ...
    def trace(self, run_id: str) -> TraceRead: ...
    def trace_tail(self, run_id: str, offset: int, next_seq: int) -> TraceRead: ...
    def state(self, run_id: str) -> RunState: ...
    def read_artifact(self, run_id: str, ref: dict[str, Any]) -> bytes: ...
    def continued_by(self, run_id: str) -> str | None: ...
    def answered(self, run_id: str) -> bool: ...
    def list_ids(self) -> list[str]: ...
    def preloaded(self, run_ids: Iterable[str]) -> BundleSpace:
        """This space, with the manifests and traces of `run_ids` read up front in one go
        where that saves round trips (rows); a snapshot for one listing, not kept."""
        ...


def check_run_id(run_id: str) -> None:
    """The one refusal of a run id that names no bundle (a path out of `runs_dir`): a
    run id names one folder directly under `runs_dir`, never a dot-entry."""
    try:
        if run_id and "/" not in run_id and "\0" not in run_id \
                and not run_id.startswith(".") and len(run_id.encode()) <= MAX_RUN_ID_BYTES:
            return
    except UnicodeEncodeError:  # a lone surrogate from a hostile URL
        pass
    raise InputError(f"'{run_id}' is not a run id")


def valid_run_id(run_id: str) -> bool:
    """Whether `run_id` names a bundle's folder (`check_run_id` lets it pass)."""
    try:
        check_run_id(run_id)
    except InputError:
        return False
    return True


def _no_run(run_id: str) -> NotFoundError:
    return NotFoundError(f"no run '{run_id}'; `wfrun runs` lists runs")


class FolderSpace:
    """Bundles as folders under `runs_dir` (the SQLite store's, and the default)."""

    commits_with_store = False

    def __init__(self, runs_dir: Path) -> None:
        self.runs_dir = runs_dir
        # As a string: the question every claim asks of a folder (`unstarted`) joins
        # it to a run id, cheaper than a pathlib join.
        self._runs = os.fspath(runs_dir)
        # Whether this space made `runs_dir` private (0700) already: a run's folder
        # then pays no stat and chmod of its parent.
        self._private = False

    def __repr__(self) -> str:
        return f"FolderSpace({str(self.runs_dir)!r})"

    # -- writing ----------------------------------------------------------------------
    def create(self, run_id: str, fence: Fence = always, durability: str = "full",
               claim: str | None = None, begin: Begin | None = None) -> FolderBundle:
        """The run's folder, made here and locked by its writer; the fence is asked
        before it, so a stale claimant makes nothing."""
        check_run_id(run_id)
        if not fence():
            raise ClaimLost(f"no claim on run '{run_id}'; not creating it")
        root = self.runs_dir / run_id
        if not self._private:
            private_dir(self.runs_dir)
        try:
            try:
                os.mkdir(root, 0o700)
            except FileNotFoundError:
                if not self._private:
                    raise
                private_dir(self.runs_dir)  # removed since (a test, a hand): made again
                os.mkdir(root, 0o700)
        except FileExistsError:
            raise OperationFailed(f"run '{run_id}' already exists") from None
        self._private = True
        bundle = FolderBundle(root, run_id, fence, durability, created=True)
        bundle.begin = begin
        return bundle

    def open(self, run_id: str, fence: Fence = always, durability: str = "full",
             claim: str | None = None) -> FolderBundle:
        check_run_id(run_id)
        return FolderBundle.open(self.runs_dir, run_id, fence, durability)

    def unstarted(self, run_id: str, parent_run_id: str | None = None) -> bool:
        try:
            os.stat(os.path.join(self._runs, run_id))
        except (FileNotFoundError, NotADirectoryError):
            return True  # no bundle: one look, a launch's first claim's usual answer
        except OSError:
            pass  # unreadable: `started` below says so, as a machine's fault
        return self.discard_unstarted(run_id, parent_run_id) or not self.started(run_id)

    def discard_unstarted(self, run_id: str, parent_run_id: str | None = None) -> bool:
        root = os.path.join(self._runs, run_id)
        if not os.path.isdir(root) or first_event(root, run_id) is not None:
            return False
        # Under its lock: a live creator holds it, so its bundle is never removed from
        # under it (InputError), and one that started meanwhile is left as it is.
        bundle = FolderBundle(Path(root), run_id, locked=True)
        try:
            if first_event(root, run_id) is not None:
                raise OperationFailed(f"run '{run_id}' has started; not removing it")
            for entry in sorted(bundle.root.rglob("*"), reverse=True):
                if entry.is_dir() and not entry.is_symlink():
                    entry.rmdir()
                else:
                    entry.unlink()
        finally:
            bundle.close()
        bundle.root.rmdir()
        if parent_run_id is not None:
            self.unmark_continued(parent_run_id, run_id)
        return True

    def remove_ended(self, run_id: str) -> None:
        """Rename to a dot-name (which `list_ids` skips), then delete: a crash in between
        leaves an invisible leftover the next prune finishes, never a half-deleted run."""
        check_run_id(run_id)
        bundle = FolderBundle.open(self.runs_dir, run_id)  # NotFoundError; InputError: held
        try:
            status = self.state(run_id).status
            if status not in ENDED:
                raise OperationFailed(f"run '{run_id}' is {status}; only ended runs are removed")
            hidden = self.runs_dir / f"{LEFTOVER}{run_id}"
            os.rename(bundle.root, hidden)
        finally:
            bundle.close()
        shutil.rmtree(hidden)  # a sealed bundle's files are 0400: only folders need +w
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.runs_dir / CONTINUED / run_id)

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

    # -- reading ----------------------------------------------------------------------
    def view(self, run_id: str) -> FolderBundle:
        return FolderBundle(self.runs_dir / run_id, run_id)

    def exists(self, run_id: str) -> bool:
        """The bundle folder exists, even half-made (no manifest or no trace yet)."""
        return (self.runs_dir / run_id).is_dir()

    def started(self, run_id: str) -> bool:
        return first_event(os.path.join(self._runs, run_id), run_id) is not None

    def manifest(self, run_id: str) -> dict[str, Any]:
        root = self.runs_dir / run_id
        try:
            # Missing or torn in a started bundle: rebuilt from the trace (bundle.py).
            return read_manifest(root, run_id)
        except NotFoundError:
            raise _no_run(run_id) from None
        except OperationFailed:
            if not self.started(run_id):
                # Being created: the first manifest is written in place (bundle.py).
                raise _no_run(run_id) from None
            raise OperationFailed(f"run '{run_id}' has a damaged manifest") from None
        except (IsADirectoryError, NotADirectoryError):
            raise _no_run(run_id) from None
        except OSError as exc:
            _refused(exc)
            raise OperationFailed(f"cannot read the manifest of run '{run_id}': "
                                  f"{exc.strerror}") from None

    def workflow(self, run_id: str) -> dict[str, Any]:
        path = self.runs_dir / run_id / WORKFLOW
        try:
            return read_json(path)
        except NotFoundError:
            raise NotFoundError(f"run '{run_id}' has no workflow snapshot") from None
        except OperationFailed:
            if not (path.parent / MANIFEST).is_file():
                # Being written: the snapshot is written in place just before the
                # manifest, so a bundle without a manifest has none to show yet.
                raise NotFoundError(f"run '{run_id}' has no workflow snapshot") from None
            raise OperationFailed(f"run '{run_id}' has a damaged workflow snapshot") from None
        except OSError as exc:
            _refused(exc)
            raise OperationFailed(f"cannot read the workflow snapshot of run '{run_id}': "
                                  f"{exc.strerror}") from None

    def trace(self, run_id: str) -> TraceRead:
        return self.trace_tail(run_id, 0, 1)

    def trace_tail(self, run_id: str, offset: int, next_seq: int) -> TraceRead:
        try:
            with open(self.runs_dir / run_id / TRACE, "rb") as fh:
                if offset:
                    fh.seek(offset)
                data = fh.read()
        except FileNotFoundError:
            return TraceRead([], offset, False)
        except OSError as exc:
            _refused(exc)
            raise OperationFailed(f"cannot read the trace of run '{run_id}': "
                                  f"{exc.strerror}") from None
        read = parse_trace(data, next_seq)
        return TraceRead(read.events, offset + read.valid_bytes, read.torn)

    def state(self, run_id: str) -> RunState:
        return fold(run_id, self.trace(run_id).events)

    def read_artifact(self, run_id: str, ref: dict[str, Any]) -> bytes:
        return self.view(run_id).read_artifact(ref)

    def continued_by(self, run_id: str) -> str | None:
        try:
            return (self.runs_dir / CONTINUED / run_id).read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            _refused(exc)
            raise OperationFailed(f"cannot read the continuation marker of run '{run_id}': "
                                  f"{exc.strerror}") from None

    def answered(self, run_id: str) -> bool:
        return (self.runs_dir / CONTINUED / run_id).exists()

    def list_ids(self) -> list[str]:
        try:
            entries = list(os.scandir(self.runs_dir))
        except FileNotFoundError:
            return []
        except OSError as exc:
            _refused(exc)
            raise OperationFailed(f"cannot list runs in {self.runs_dir}: "
                                  f"{exc.strerror}") from None
        return sorted(e.name for e in entries if valid_run_id(e.name) and e.is_dir())

    def preloaded(self, run_ids: Iterable[str]) -> FolderSpace:
        return self  # a file read is no round trip


class DatabaseSpace:
    """Bundles as rows (`BundleRows`); `runs_dir` holds only this host's live logs
    (a live log of another host's run is not visible here)."""

    commits_with_store = True

    def __init__(self, rows: BundleRows, runs_dir: Path, clock: Clock | None = None,
                 patience: float = PATIENCE,
                 loaded: tuple[frozenset[str], dict[str, BundleRead]] | None = None) -> None:
        self.rows = rows
        self.runs_dir = runs_dir
        self.clock = clock  # times retries while the database is unreachable
        self.patience = patience  # how long one write waits for it
        # (the ids asked for, what exists of them) read up front: `preloaded`
        self._asked, self._loaded = loaded or (frozenset(), {})

    def preloaded(self, run_ids: Iterable[str]) -> DatabaseSpace:
        ids = [r for r in dict.fromkeys(run_ids) if valid_run_id(r)]
        return DatabaseSpace(self.rows, self.runs_dir, self.clock, self.patience,
                             (frozenset(ids), self.rows.read_bundles(ids)))

    def __repr__(self) -> str:
        return f"DatabaseSpace({self.rows!r}, {str(self.runs_dir)!r})"

    # -- writing ----------------------------------------------------------------------
    def create(self, run_id: str, fence: Fence = always, durability: str = "full",
               claim: str | None = None, begin: Begin | None = None) -> DatabaseBundle:
        check_run_id(run_id)
        bundle = DatabaseBundle.create(self.rows, run_id, self.runs_dir, fence, claim,
                                       self.clock, durability)
        bundle.begin, bundle.patience = begin, self.patience
        return bundle

    def open(self, run_id: str, fence: Fence = always, durability: str = "full",
             claim: str | None = None) -> DatabaseBundle:
        check_run_id(run_id)
        bundle = DatabaseBundle.open(self.rows, run_id, self.runs_dir, fence, claim,
                                     self.clock, durability)
        bundle.patience = self.patience
        return bundle

    def unstarted(self, run_id: str, parent_run_id: str | None = None) -> bool:
        if self.started(run_id):
            return False
        self.discard_unstarted(run_id, parent_run_id)
        return True

    def discard_unstarted(self, run_id: str, parent_run_id: str | None = None) -> bool:
        if not self.rows.remove_bundle(run_id, unstarted_only=True):
            return False
        if parent_run_id is not None:
            self.rows.unmark_continued(parent_run_id, run_id)
        return True

    def remove_ended(self, run_id: str) -> None:
        """One transaction: trace, documents, artifacts and continuation marker; a sealed
        bundle has no writer, and the database fence keeps out any stale one."""
        check_run_id(run_id)
        if not self.rows.bundle_exists(run_id):
            raise _no_run(run_id)
        status = self.state(run_id).status
        if status not in ENDED:
            raise OperationFailed(f"run '{run_id}' is {status}; only ended runs are removed")
        self.rows.remove_bundle(run_id, unstarted_only=False)
        local = self.runs_dir / run_id  # this host's live-log folder, if it ran here
        if local.is_dir():
            shutil.rmtree(local, ignore_errors=True)

    def mark_continued(self, parent_run_id: str) -> bool:
        return self.rows.mark_continued(parent_run_id)

    def set_continued(self, parent_run_id: str, child_run_id: str) -> None:
        self.rows.set_continued(parent_run_id, child_run_id)

    def unmark_continued(self, parent_run_id: str, child_run_id: str) -> None:
        self.rows.unmark_continued(parent_run_id, child_run_id)

    # -- reading ----------------------------------------------------------------------
    def view(self, run_id: str) -> DatabaseBundle:
        return DatabaseBundle(self.rows, run_id, self.runs_dir, clock=self.clock)

    def exists(self, run_id: str) -> bool:
        if run_id in self._asked:
            return run_id in self._loaded
        return self.rows.bundle_exists(run_id)

    def started(self, run_id: str) -> bool:
        """The first row is `run_started` (seq 1): the run's input is durable."""
        text = self.rows.first_event(run_id)
        if text is None:
            return False
        events = dbbundle.parse_events([text]).events
        return bool(events) and events[0].get("type") == "run_started"

    def manifest(self, run_id: str) -> dict[str, Any]:
        return self._document(run_id, "manifest", f"no run '{run_id}'; `wfrun runs` lists runs")

    def workflow(self, run_id: str) -> dict[str, Any]:
        return self._document(run_id, "workflow", f"run '{run_id}' has no workflow snapshot")

    def _document(self, run_id: str, kind: str, missing: str) -> dict[str, Any]:
        if kind == "manifest" and run_id in self._asked:
            text = self._loaded[run_id][0] if run_id in self._loaded else None
            if text is None:
                raise NotFoundError(missing)
            return dbbundle.parse_document(run_id, kind, text)
        try:
            return dbbundle.read_document(self.rows, run_id, kind)
        except NotFoundError:
            raise NotFoundError(missing) from None

    def trace(self, run_id: str) -> TraceRead:
        if run_id in self._loaded:
            return dbbundle.parse_events(self._loaded[run_id][1])
        return dbbundle.read_trace(self.rows, run_id)

    def trace_tail(self, run_id: str, offset: int, next_seq: int) -> TraceRead:
        # Rows, not bytes: the offset grows by each event's text, as a file's would.
        read = dbbundle.parse_events(self.rows.read_events(run_id, next_seq - 1), next_seq)
        return TraceRead(read.events, offset + read.valid_bytes, read.torn)

    def state(self, run_id: str) -> RunState:
        return fold(run_id, self.trace(run_id).events)

    def read_artifact(self, run_id: str, ref: dict[str, Any]) -> bytes:
        return dbbundle.read_artifact(self.rows, run_id, ref)

    def continued_by(self, run_id: str) -> str | None:
        return self.rows.continued_by(run_id)

    def answered(self, run_id: str) -> bool:
        return self.rows.continued_by(run_id) is not None

    def list_ids(self) -> list[str]:
        return [r for r in self.rows.bundle_ids() if valid_run_id(r)]


def space_for(runs_dir: Path, rows: BundleRows | None, clock: Clock | None = None,
              patience: float = PATIENCE) -> FolderSpace | DatabaseSpace:
    """The one place the backend is chosen: rows when the store holds bundles."""
    if rows is None:
        return FolderSpace(runs_dir)
    return DatabaseSpace(rows, runs_dir, clock, patience)


def _refused(exc: OSError) -> None:
    """A read the machine refused (permissions, a read-only or full disk) is said as
    such, in one line with what to do (errors.os_fault), not as a damaged run."""
    fault = os_fault(exc)
    if fault is not None:
        raise fault from None
