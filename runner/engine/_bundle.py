"""Run bundles: the durable record of one run (DESIGN §4).

The engine writes only through `RunBundle` (engine/_space.py); `FolderBundle` is
the folder space's (`.wfrun/runs/<run-id>/`, folders 0700, files 0600). The trace
(`trace.jsonl`) is the truth; `state.json` and `manifest.json` are projections
rebuilt from it. state.json is never fsync'd. Neither is the first manifest: the
run's `run_started` (fsync'd) carries what the trace does not already say of it. The
final manifest is rewritten in place and fsync'd after the ending is in the trace (a
pure run's is created once and not fsync'd: no older text can survive it). A
reader that finds the manifest missing or torn in a started bundle rebuilds it from
the trace (`rebuild_manifest`). Write order per step: append trace (fsync) ->
replace state -> manifest. At creation the workflow snapshot is held and written
with the first manifest. Every write first passes the caller's fence; a stale
writer writes nothing: a bundle being created asks before its folder and again at
`run_started`, the write that makes it a run. The first manifest (and the held
snapshot), written microseconds after the folder's check, asks nothing: until
`run_started` the bundle is half-made (no reader takes it for a run, the next
claimant discards it), so a cancel that won between the two loses nothing. A
terminal bundle is immutable (its files become read-only).

Joined to its launch (`begin`), a folder bundle makes the launch's `running`
transition when the launch layer is about to release the executor (`start_launch`);
the launch makes the ending's itself right after the seal: a folder shares no
transaction with the store, so each is its own commit (a database bundle carries
them in its first write and its seal, dbbundle.py).

A pure run (`WorkflowDefinition.pure_run`: nothing it does is seen outside it until it ends) is
written whole (`write_whole`, ADR 0009 lever 3): its snapshot, first manifest, trace
lines, state and final manifest are held in memory (its folder stays empty, ADR
0013); at its seal the fence is asked once, each file is created once, read-only,
the trace synced, and then its ending's transition commits, taking the row through
`running`. While the claim's lease is live only its holder changes a `starting` row
(a cancel is a request, as for `running`), so nothing wins between the files and the
commit; a fence that refuses leaves nothing of the run written (the bundle stays
half-made, and is discarded); a kill before the commit leaves the row `starting`
with a bundle that recovery settles from its trace, as for any `starting` row. The
run's writes go out the ordinary way (`running` first) once it holds more than
`WHOLE_EVENTS` events, or when it parks or writes anything else.

Its files are private (0600 files in 0700 folders) and written whole or not at all (a
short write on a nearly full disk is an error, never a truncated file): made new,
replaced atomically or updated in place; the runs of one definition share its workflow
snapshot by hard link (`runs/.snapshots/`, `write_snapshot`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from runner._canonical import Spliced, canonical_json
from runner._private import private_dirs
from runner.errors import ClaimLost, InputError, NotFoundError, OperationFailed

from ._bundlefmt import (
    ARTIFACTS,
    ENDED,
    LOGS,
    MANIFEST,
    SNAPSHOTS,
    STATE,
    TRACE,
    WORKFLOW,
    Fence,
    always,
    first_event,
    joined,
    repair_trace,
    truncate_trace,
)
from ._bundleread import read_artifact, read_manifest, read_trace
from ._rows import LaunchStep

#: A pure run holds at most this many trace events for its ending; past it, its
#: launch goes `running` and the trace is written as it grows (live views follow it).
WHOLE_EVENTS = 64
# Root may use the blocks and inodes a file system keeps back; others may not.
_PRIVILEGED = os.geteuid() == 0


class FolderBundle:
    """A run bundle in a folder, held with an exclusive lock while open for writing."""

    def __init__(self, root: Path, run_id: str, fence: Fence = always,
                 durability: str = "full", *, created: bool = False,
                 locked: bool = False) -> None:
        """`locked`: take the folder's lock (a writer, or a remover); `created`: the
        folder `root` was just made for this writer (`FolderSpace.create`), which holds
        its lock from here on and writes its first files in place."""
        self.root = root
        # The files' paths as strings, joined once: a run writes them ~10 times, and
        # a pathlib join and its conversion back cost more than the string work.
        folder = str(root)
        self._runs_dir = os.path.dirname(folder)
        self._trace_path = os.path.join(folder, TRACE)
        self._state_path = os.path.join(folder, STATE)
        self._manifest_path = os.path.join(folder, MANIFEST)
        self._workflow_path = os.path.join(folder, WORKFLOW)
        self.run_id = run_id
        self.fence = fence
        self.sync = durability == "full"
        self._lock_fd: int | None = None
        self._trace_fd: int | None = None
        self._sealed = False
        self._logs_ready = False
        self._manifest: str | None = None  # the text this writer last wrote (no re-read)
        self._snapshot: bytes | None = None  # workflow.json, held for the next write
        self._fresh = created  # created by this writer, no manifest yet
        self._state_new = created  # created by this writer, no state.json yet
        self._linked = False  # workflow.json links the shared snapshot (already 0400)
        # The launch's `running` step (a claimed launch's new run, set by the space):
        # made by `start_launch`, or at the latest before the first node's start.
        self.begin: Callable[[], LaunchStep | None] | None = None
        # A pure run written whole with its ending (`write_whole`): the trace's lines
        # per append (and whether one asked for a sync), the latest state.json.
        self._whole: list[bytes] | None = None
        self._whole_events = 0
        self._whole_sync = False
        self._whole_state: bytes | None = None
        self._whole_manifest: str | None = None
        # Its first manifest, held as given (never encoded unless written the usual way).
        self._first: dict[str, Any] | None = None
        self._crash: Callable[[str], None] | None = None
        self._json = Spliced()  # a long output is encoded once (trace, ending, state)
        if created or locked:
            # A flock on the folder itself (no `.lock` file to create per run: ~0.25 ms of
            # kernel time), by every writer and remover, no reader; gone with its holder.
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    raise InputError(f"run '{run_id}' is being executed by another process;"
                                     " wait for it to end, or `wfrun cancel` it") from None
                raise
            self._lock_fd = fd

    # -- opening (a new run's folder: `FolderSpace.create`) --------------------
    @classmethod
    def open(cls, runs_dir: Path, run_id: str, fence: Fence = always,
             durability: str = "full") -> FolderBundle:
        root = runs_dir / run_id
        if not (root / MANIFEST).is_file() and first_event(root, run_id) is None:
            raise NotFoundError(f"no run '{run_id}' in {runs_dir}; `wfrun runs` lists runs")
        bundle = cls(root, run_id, fence, durability, locked=True)
        with contextlib.suppress(OperationFailed, NotFoundError, OSError):
            if bundle.read_manifest().get("status") in ENDED:
                bundle._sealed = True  # ended runs are immutable, whoever opens them
        return bundle

    def close(self) -> None:
        if self._trace_fd is not None:
            os.close(self._trace_fd)
            self._trace_fd = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None
        self._manifest = None  # unlocked: another writer may change it from now on
        self._snapshot = None  # never written: a bundle without its manifest is half-made
        # Never written: the run did not start.
        self._whole = self._whole_state = self._whole_manifest = self._first = None

    # -- writes ---------------------------------------------------------------
    def _check(self, *, fenced: bool = True) -> None:
        if self._sealed:
            raise OperationFailed(f"run '{self.run_id}' has ended; its bundle is immutable")
        if self._whole is not None:
            self._write_held()  # a write a pure run does not hold: written the usual way
        if fenced and not self.fence():
            raise ClaimLost(f"lost the claim on run '{self.run_id}'; another runner owns it")
        if self._snapshot is not None:
            data, self._snapshot = self._snapshot, None
            self._linked = write_snapshot(self._runs_dir, self._workflow_path, data)

    def append(self, events: Iterable[dict[str, Any]], *, sync: bool) -> None:
        batch = events if isinstance(events, list) else list(events)
        if self._whole is not None and not self._sealed:
            if batch:  # asks no fence: the ending's guard is the whole run's
                self._whole.append(("\n".join(map(self._json.line, batch)) + "\n").encode())
                self._whole_events += len(batch)
                self._whole_sync = self._whole_sync or sync
            if self._whole_events > WHOLE_EVENTS:
                self._write_held()
            return
        self._check()
        if not batch:
            return
        if self.begin is not None and (
                len(batch) > 1 or batch[0].get("type") != "run_started"):
            self._begin()
        self._write_trace(("\n".join(map(self._json.line, batch)) + "\n").encode(), sync=sync)

    def start_launch(self) -> bool:
        """Take the joined launch to `running` now, before the executor is released:
        no write of a folder shares the store's transaction, so none carries it.
        False: a pure run, whose ending's transition takes it there (`write_whole`)."""
        if self._whole is not None:
            return False
        if self.begin is not None:
            self._begin()
        return True

    def write_whole(self, crash: Callable[[str], None] | None = None) -> None:
        """Hold this run's writes for its ending (a pure run joined to its launch; see
        the module's docstring). Called before the workflow snapshot and the first
        manifest, which are held too (ADR 0013). `crash`: the engine's crash seam
        (tests), passed `after_whole_written` between the files and the commit."""
        if self.begin is not None and self._whole is None:
            # A full disk refuses the run before its nodes, as its first manifest's
            # write did when it was made here; the seal meets any later shortage. No
            # block or no inode left for this process: ENOSPC, as a small file's
            # creation there would fail.
            st = os.statvfs(self._runs_dir)
            blocks = st.f_bfree if _PRIVILEGED else st.f_bavail
            inodes = st.f_ffree if _PRIVILEGED else st.f_favail
            if blocks == 0 or (inodes == 0 and st.f_files):  # f_files 0: no inode count
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self._whole = []
            self._crash = crash

    def write_held(self) -> None:
        """Write what a pure run holds and take its launch to `running` now, as a run
        that is not written whole is: it parks, or writes what it does not hold."""
        if self._whole is not None:
            self._write_held()

    def _write_held(self) -> None:
        held, self._whole = self._whole, None
        state, self._whole_state = self._whole_state, None
        assert held is not None
        # As `append` would have: the snapshot and first manifest, `run_started` under
        # the fence, then `running`, then the nodes' events (a refused `running`
        # records nothing of them).
        first, rest = held[:1], held[1:]
        manifest0, self._first = self._first, None
        if first or manifest0 is not None:
            self._check()
        if manifest0 is not None:
            self._write_manifest(canonical_json(manifest0) + "\n")
        if first:
            self._write_trace(first[0], sync=self._whole_sync)
        if self.begin is not None:
            self._begin()
        if rest:
            self._check()
            self._write_trace(b"".join(rest), sync=self._whole_sync)
        if state is not None:
            self._write_state(state)
        manifest, self._whole_manifest = self._whole_manifest, None
        if manifest is not None:
            self._write_manifest(manifest)

    def _write_trace(self, data: bytes, *, sync: bool) -> None:
        if self._trace_fd is None:
            self._trace_fd = os.open(self._trace_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                                     0o600)
        write_all(self._trace_fd, data)  # refused midway: a torn tail, repaired on resume
        if sync and self.sync:
            os.fsync(self._trace_fd)

    def _begin(self) -> None:
        """The launch goes `running` before the first node's start is written: a
        refused transition (a cancel won) records nothing of the node."""
        begin, self.begin = self.begin, None
        assert begin is not None
        step = begin()
        if step is not None:
            joined(self.run_id, step)

    def replace_state(self, state: dict[str, Any]) -> None:
        data = (self._json.dumps(state) + "\n").encode()
        if self._whole is not None and not self._sealed:
            self._whole_state = data  # the latest, written with the run
            return
        self._check()
        self._write_state(data)

    def _write_state(self, data: bytes) -> None:
        if self._state_new:
            # The first one in place, as the first manifest: a short run writes it once,
            # and a projection nobody decides on needs no temp file and rename.
            self._state_new = False
            with contextlib.suppress(FileExistsError):
                create_private(self._state_path, data)
                return
        write_private(self._state_path, data)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        # Compact canonical JSON: the C encoder (indenting takes Python's slow one, twice
        # per run); `wfrun show` is the readable view.
        if self._whole is not None and not self._sealed:
            if self._fresh and self._first is None:
                self._first = manifest  # held until the seal (ADR 0013): no file of its own
            else:
                self._whole_manifest = canonical_json(manifest) + "\n"  # the final one
            return
        text = canonical_json(manifest) + "\n"
        # The first one makes no run yet (`run_started` does, and asks the fence).
        self._check(fenced=not self._fresh)
        self._write_manifest(text)

    def _write_manifest(self, text: str) -> None:
        if self._fresh:
            # The first one in place and not fsync'd: no temp file to create and rename
            # (a file creation is the dearest call a run makes here) and no flush of its
            # own. Until `run_started` is durable the bundle is half-made, and a reader
            # takes a torn manifest for no run yet; after that `run_started` holds it
            # (a power loss may still empty the file: `manifest_from_trace`).
            try:
                create_private(self._manifest_path, text.encode())
            except FileExistsError:  # a creator writing its first manifest again
                write_private(self._manifest_path, text.encode())
        else:
            # In place and fsync'd: the trace holds the ending already (fsync'd first),
            # so a reader that finds this torn rebuilds the same from the trace.
            try:
                update_private(self._manifest_path, text.encode(), sync=self.sync)
            except FileNotFoundError:
                write_private(self._manifest_path, text.encode(), sync=self.sync)
        self._manifest = text
        self._fresh = False

    def write_workflow(self, snapshot: str) -> None:
        # Compact canonical JSON (`WorkflowDefinition.snapshot_json`, encoded once per
        # definition): it grows with the workflow (`wfrun show` is the readable view).
        data = (snapshot + "\n").encode()
        if self._fresh and not self._sealed:
            # Creating the bundle: held for the first manifest and written with it (as a
            # database bundle writes them in one transaction); nothing else happens
            # between the two.
            self._snapshot = data
            return
        self._check()
        write_private(self._workflow_path, data)
        self._linked = False

    def write_artifact(self, data: bytes, media_type: str) -> dict[str, Any]:
        self._check()
        digest = hashlib.sha256(data).hexdigest()
        rel = f"{ARTIFACTS}/sha256-{digest}.txt"
        path = self.root / rel
        if not path.exists():
            private_dir(path.parent)  # created on first use: most runs have no artifacts
            write_private(path, data, sync=self.sync)
        return {"path": rel, "media_type": media_type, "bytes": len(data), "sha256": digest}

    def read_artifact(self, ref: dict[str, Any]) -> bytes:
        return read_artifact(self.root, ref)

    def live_logs(self) -> Path:
        """The folder for running attempts' live logs (created 0700 on first use)."""
        self._check()
        path = self.root / LOGS
        if not self._logs_ready:  # once per open bundle: a shell step pays no mkdir/chmod
            private_dir(path)
            self._logs_ready = True
        return path

    def repair(self) -> int:
        """Truncate a torn or corrupt trace tail; returns the bytes dropped."""
        self._check()
        return repair_trace(self._trace_path)

    def truncate_to(self, seq: int) -> None:
        """Drop events after `seq` (a resume refuses events its state never saw)."""
        self._check()
        truncate_trace(self._trace_path, seq)

    def seal(self, ending: LaunchStep | None = None) -> None:
        """Make a terminal bundle immutable: read-only files, no more writes; a pure
        run's (`write_whole`) is written whole here. A folder shares no transaction with
        the store, so no launch transition rides the seal: the launch makes its ending
        as a commit of its own once the engine hands the outcome back (RunLink, apart),
        after the lock is let go, so whoever it wakes finds the bundle free. `ending`,
        when given all the same, is made right after the seal."""
        if self._whole is not None and not self._sealed:
            self._seal_whole()
        else:
            self._check()
            if self.begin is not None:
                self._begin()  # ended before any node started: the launch ran all the same
            self._seal_files()
        if ending is not None:
            # Refused or unanswered, the step has recorded nothing, and the launch
            # layer records the ending apart, as it does for a bundle without one.
            ending.run(None)

    def _seal_whole(self) -> None:
        """Write the whole run and sync it; the launch's ending then takes the row
        `starting -> running -> ending`. The fence first: while our claim's lease is
        live nothing but us can change the row (the store asks a `starting` row's
        holder to cancel it, as a `running` one's), so no cancel wins between the files
        and the commit, and the files' fsyncs hold no store lock. A kill between them
        leaves a `starting` row whose bundle says how the run ended, which recovery
        records. Refused by the fence, nothing of the run is written."""
        held = self._whole
        assert held is not None
        self._whole = None
        if not self.fence():
            self.close()  # the bundle stays half-made: whoever settles the launch discards it
            raise ClaimLost(f"lost the claim on run '{self.run_id}'; another runner owns it")
        # Every file is new (a pure run wrote none before its seal, ADR 0013) and born
        # read-only: no chmod follows. The snapshot, then the trace (synced: the run),
        # then its projections.
        if self._snapshot is not None:
            data, self._snapshot = self._snapshot, None
            self._linked = write_snapshot(self._runs_dir, self._workflow_path, data)
        create_private(self._trace_path, b"".join(held), sync=self.sync, mode=0o400)
        state, self._whole_state = self._whole_state, None
        if state is not None:
            create_private(self._state_path, state, mode=0o400)
        manifest, self._whole_manifest = self._whole_manifest, None
        first, self._first = self._first, None
        if manifest is None and first is not None:
            manifest = canonical_json(first) + "\n"
        if manifest is not None:
            # Not fsync'd: the file never held another text, so after a power loss it
            # is whole, missing, empty, zeroed or cut short, and a reader rebuilds the
            # last four from the trace's `run_started` and ending (`read_manifest`).
            create_private(self._manifest_path, manifest.encode(), mode=0o400)
        if not self._linked:  # written here (no shared snapshot): made read-only
            with contextlib.suppress(FileNotFoundError):
                os.chmod(self._workflow_path, 0o400)
        self._sealed = True
        self.close()
        if self._crash is not None:
            self._crash("after_whole_written")  # the run is on disk, not committed

    def _seal_files(self) -> None:
        paths = [self._state_path, self._manifest_path]
        if not self._linked:  # a link to the shared snapshot is read-only already
            paths.append(self._workflow_path)
        if self._trace_fd is not None:
            os.fchmod(self._trace_fd, 0o400)  # on the open file: no path lookup
            os.close(self._trace_fd)
            self._trace_fd = None
        else:
            paths.append(self._trace_path)
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.chmod(path, 0o400)
        self._sealed = True
        self.close()

    # -- reads ----------------------------------------------------------------
    def read_trace(self) -> list[dict[str, Any]]:
        return read_trace(self.root).events

    def read_manifest(self) -> dict[str, Any]:
        if self._first is not None:  # a pure run's, held (a copy: the caller may update it)
            return dict(self._first)
        if self._manifest is not None:  # held under the lock: nobody else writes it
            value: dict[str, Any] = json.loads(self._manifest)
            return value
        return read_manifest(self.root, self.run_id)


# -- the files: private (0600 files in 0700 folders), written whole or not at all
def private_dir(path: Path) -> None:
    private_dirs(path)  # parents too: a WFRUN_HOME made here is 0700 under any umask
    os.chmod(path, 0o700)


def write_all(fd: int, data: bytes) -> None:
    """Every byte or an OSError: a nearly full disk first writes short, then refuses
    (ENOSPC); a short write taken for a whole one would leave a truncated file."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def create_private(path: str | Path, data: bytes, *, sync: bool = False,
                   mode: int = 0o600, truncate: bool = False) -> None:
    """Write a 0600 file whole, fsync'd when asked: a new one in place, for a file no
    reader looks at yet, or (`truncate`) over what is there (a temp file's leftover). A
    refused write removes what it began. `mode` 0o400: born read-only (a sealed bundle's
    file: the new file's descriptor may still write it, and no chmod follows)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if truncate else os.O_EXCL),
                     mode)
        try:
            written = os.write(fd, data)
            if written < len(data):  # short, as on a nearly full disk: the rest, or ENOSPC
                write_all(fd, data[written:])
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        Path(path).unlink(missing_ok=True)
        raise


def write_private(path: str | Path, data: bytes, *, sync: bool = False) -> None:
    """Atomically replace `path` with a 0600 file (a refused write leaves no temp file)."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.tmp")
    try:
        create_private(tmp, data, sync=sync, truncate=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def update_private(path: str, data: bytes, *, sync: bool = False) -> None:
    """Overwrite an existing file in place (no temp file to create and rename): for a
    projection whose reader rebuilds it from the trace when it finds it torn."""
    fd = os.open(path, os.O_WRONLY)  # at offset 0: written from the start, then cut
    try:
        write_all(fd, data)
        os.ftruncate(fd, len(data))
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


# A snapshot's shared file name by its bytes: a host links one definition's snapshot
# per run, and hashing a dict key is cheaper than its SHA-256 and two pathlib joins.
# Bounded: a host that meets more definitions than this starts over.
_SHARED_NAMES: dict[bytes, str] = {}
_SHARED_KEPT = 64


def write_snapshot(runs_dir: str, path: str, data: bytes) -> bool:
    """Write a bundle's workflow snapshot `data` at `path` as a hard link to the one copy
    of it in `runs/.snapshots/`, named by its SHA-256: the runs of one definition share
    its inode. A file creation costs 20 µs to 1 ms of kernel CPU on this VM, by folder
    (a link ~0.02 ms; bench/RESULTS.md, "The file system"), and the snapshot is the one
    bundle file that never differs between runs. The copy is written whole, fsync'd and
    made read-only (0400) before it gets its name, so every link to it is whole, and
    nothing writes it again (a rewrite of a snapshot replaces the link). True: linked
    (read-only already). False: links do not work here (another file system's rules,
    the link limit), so the file is written in place."""
    name = _SHARED_NAMES.get(data)
    if name is None:
        if len(_SHARED_NAMES) >= _SHARED_KEPT:
            _SHARED_NAMES.clear()
        name = _SHARED_NAMES[data] = f"sha256-{hashlib.sha256(data).hexdigest()}.json"
    shared = os.path.join(runs_dir, SNAPSHOTS, name)
    for attempt in range(3):
        try:
            os.link(shared, path)
            return True
        except FileNotFoundError:  # the first run of this definition, or pruned just now
            if not _store_snapshot(Path(shared), data):
                break
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                raise
            if exc.errno != errno.EMLINK or attempt:
                break
            with contextlib.suppress(OSError):  # ext4 allows 65,000 links: a fresh copy
                os.unlink(shared)
    try:
        # In place, no temp file and rename: it is written before the manifest, and
        # readers find a bundle by its manifest (a bundle without one is half-made).
        create_private(path, data)
    except FileExistsError:
        write_private(path, data)
    return False


def _store_snapshot(shared: Path, data: bytes) -> bool:
    folder = shared.parent
    tmp = folder / f".{shared.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        if not folder.is_dir():
            private_dir(folder)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            write_all(fd, data)
            os.fsync(fd)
            os.fchmod(fd, 0o400)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):  # another writer stored it first
            os.link(tmp, shared)
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
