"""Run bundles: the durable record of one run (DESIGN §4).

The engine writes only through `RunBundle` (engine/_space.py); `FolderBundle` is
the folder space's (`.wfrun/runs/<run-id>/`, folders 0700, files 0600). The trace
(`trace.jsonl`) is the truth; `state.json` and `manifest.json` are projections
rebuilt from it. state.json is never fsync'd. Neither is the first manifest: the
run's `run_started` (fsync'd) carries what the trace does not already say of it. The
final manifest is rewritten in place and fsync'd after the ending is in the trace. A
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

Joined to its launch (`begin`, `seal(ending)`), a folder bundle makes the launch's
`running` transition when the launch layer is about to release the executor
(`start_launch`), and the ending's right after the seal: a folder shares no
transaction with the store, so each is its own commit (a database bundle carries
them in its first write and its seal, dbbundle.py).

A pure run (`nodes.pure_run`: nothing it does is seen outside it until it ends) is
written whole (`write_whole`, ADR 0009 lever 3): its trace lines, state and final
manifest are held in memory; at its seal the fence is asked once, the files are
written and synced, and then its ending's transition commits, taking the row through
`running`. While the claim's lease is live only its holder changes a `starting` row
(a cancel is a request, as for `running`), so nothing wins between the files and the
commit; a fence that refuses leaves nothing of the run written (the bundle stays
half-made, and is discarded); a kill before the commit leaves the row `starting`
with a bundle that recovery settles from its trace, as for any `starting` row. The
run's writes go out the ordinary way (`running` first) once it holds more than
`WHOLE_EVENTS` events, or when it parks or writes anything else.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner._canonical import canonical_json
from runner._private import private_dirs
from runner.errors import ClaimLost, InputError, NotFoundError, OperationFailed, read_fault

from ._rows import LaunchStep
from ._state import fold

MANIFEST = "manifest.json"
WORKFLOW = "workflow.json"
STATE = "state.json"
TRACE = "trace.jsonl"
ARTIFACTS = "artifacts"
LOGS = "logs"  # live logs of running attempts (engine/_livelog.py), not a record
SNAPSHOTS = ".snapshots"  # runs/.snapshots/: one copy of each workflow snapshot (link_snapshot)
LOCK = ".lock"  # the lock file of bundles written before the folder itself was locked
ARTIFACT_THRESHOLD = 4096  # UTF-8 bytes; longer strings move to artifacts/
# Statuses whose bundle is sealed: the terminal ones, and `waiting` (an answer continues
# a waiting run in a new bundle).
ENDED = frozenset({"completed", "failed", "timed_out", "cancelled", "waiting"})

# The folder of continuation markers (`<runs_dir>/.continued/<parent run id>` holds the
# id of the run that continued it); written by `Engine.prepare_answer`.
CONTINUED = ".continued"
# A folder name holds at most 255 bytes on every file system wfrun runs on; a longer
# id names no run (and would make the OS raise ENAMETOOLONG instead of "not found").
MAX_RUN_ID_BYTES = 255
BUNDLE_SCHEMA = "wfrun.run-bundle.v1"
#: Where a folder bundle's files are, as every manifest names them.
PATHS = {"workflow": WORKFLOW, "state": STATE, "trace": TRACE, "artifacts": f"{ARTIFACTS}/"}
#: The first manifest's fields that the trace does not hold: `run_started` carries
#: them under "manifest" where the first manifest is not fsync'd (a folder's).
MANIFEST_FIELDS = ("workflow_ref", "title", "source", "sources", "started_at")
LEFTOVER = ".removing-"  # the dot-name prefix of a folder bundle being removed

Fence = Callable[[], bool]


def always(_: None = None) -> bool:
    return True


def dumps(value: Any) -> str:
    """One trace line or state file: canonical JSON (`runner._canonical`)."""
    return canonical_json(value)


def valid_run_id(run_id: str) -> bool:
    """A run id names one folder directly under `runs_dir`, never a dot-entry."""
    if not run_id or "/" in run_id or "\0" in run_id or run_id.startswith("."):
        return False
    try:
        return len(run_id.encode()) <= MAX_RUN_ID_BYTES
    except UnicodeEncodeError:  # a lone surrogate from a hostile URL
        return False


def joined(run_id: str, step: LaunchStep) -> None:
    """Make a launch transition whose bundle write is done already (a folder's: no
    write rides it, so the store commits it as it would without a bundle); refused,
    the run is let go as a fenced database write is (`ClaimLost`)."""
    word = step.run(None)
    if word == "unavailable":
        raise ClaimLost(f"cannot reach the store holding run '{run_id}'; letting go of it "
                        "(a host that reaches it resumes the run)")
    if word != "ok":
        raise ClaimLost(f"lost the claim on run '{run_id}'; another runner owns it")


@dataclass(frozen=True)
class TraceRead:
    events: list[dict[str, Any]]
    valid_bytes: int  # length of the longest contiguous valid prefix
    torn: bool


def parse_trace(data: bytes, first_seq: int = 1) -> TraceRead:
    """Events of the longest valid prefix: whole lines, parseable, seq 1, 2, 3...
    (`first_seq` for a tail read from the middle of the file)."""
    events: list[dict[str, Any]] = []
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            break  # a line without its newline is a torn write
        try:
            event = json.loads(data[pos:end])
        except ValueError:
            break
        if not isinstance(event, dict) or event.get("seq") != len(events) + first_seq:
            break
        events.append(event)
        pos = end + 1
    return TraceRead(events, pos, pos != len(data))


def _private_dir(path: Path) -> None:
    private_dirs(path)  # parents too: a WFRUN_HOME made here is 0700 under any umask
    os.chmod(path, 0o700)


# Runs folders this process has made private: a run's bundle pays no stat and chmod of
# its parent (a removed folder is made again: its bundle's mkdir says so).
_PRIVATE_RUNS: set[Path] = set()
_PRIVATE_LOCK = threading.Lock()


def _make_bundle_dir(runs_dir: Path, root: Path) -> None:
    with _PRIVATE_LOCK:
        known = runs_dir in _PRIVATE_RUNS
    if not known:
        _private_dir(runs_dir)
    try:
        os.mkdir(root, 0o700)
    except FileNotFoundError:
        if not known:
            raise
        _private_dir(runs_dir)  # removed since (a test, a hand): once more, made private
        os.mkdir(root, 0o700)
    with _PRIVATE_LOCK:
        _PRIVATE_RUNS.add(runs_dir)


def _write_all(fd: int, data: bytes) -> None:
    """Every byte or an OSError: a nearly full disk first writes short, then refuses
    (ENOSPC); a short write taken for a whole one would leave a truncated file."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def _create_private(path: str | Path, data: bytes, *, sync: bool = False) -> None:
    """Write a new 0600 file in place: for a file no reader looks at yet (a refused
    write removes what it began)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            _write_all(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        Path(path).unlink(missing_ok=True)
        raise


def _write_private(path: str | Path, data: bytes, *, sync: bool = False) -> None:
    """Atomically replace `path` with a 0600 file (a refused write leaves no temp file)."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            _write_all(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _update_private(path: str, data: bytes, *, sync: bool = False) -> None:
    """Overwrite an existing file in place (no temp file to create and rename): for a
    projection whose reader rebuilds it from the trace when it finds it torn."""
    fd = os.open(path, os.O_WRONLY)
    try:
        view = memoryview(data)
        at = 0
        while at < len(data):
            written = os.pwrite(fd, view[at:], at)
            if written <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            at += written
        os.ftruncate(fd, len(data))
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def link_snapshot(runs_dir: Path, path: str | Path, data: bytes) -> bool:
    """Make `path` a hard link to the one copy of `data` in `runs/.snapshots/`, named
    by its SHA-256: the runs of one definition share the snapshot's inode. A file
    creation costs 20 µs to 1 ms of kernel CPU on this VM, depending on the folder (a
    link ~0.02 ms; bench/RESULTS.md, "The file system"), and the snapshot is the one
    bundle file that never differs between runs. The copy is written whole,
    fsync'd and made read-only (0400) before it gets its name, so every link to it is
    whole, and nothing writes it again (a rewrite of a snapshot replaces the link).
    False where links do not work here (another file system's rules, the link limit):
    the caller writes the file itself, as before."""
    shared = runs_dir / SNAPSHOTS / f"sha256-{hashlib.sha256(data).hexdigest()}.json"
    for attempt in range(3):
        try:
            os.link(shared, path)
            return True
        except FileNotFoundError:  # the first run of this definition, or pruned just now
            if not _store_snapshot(shared, data):
                return False
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                raise
            if exc.errno != errno.EMLINK or attempt:
                return False
            with contextlib.suppress(OSError):  # ext4 allows 65,000 links: a fresh copy
                os.unlink(shared)
    return False


def _store_snapshot(shared: Path, data: bytes) -> bool:
    folder = shared.parent
    tmp = folder / f".{shared.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        if not folder.is_dir():
            _private_dir(folder)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _write_all(fd, data)
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


#: A pure run holds at most this many trace events for its ending; past it, its
#: launch goes `running` and the trace is written as it grows (live views follow it).
WHOLE_EVENTS = 64


class FolderBundle:
    """A run bundle in a folder, held with an exclusive lock while open for writing."""

    def __init__(self, root: Path, run_id: str, fence: Fence = always,
                 durability: str = "full") -> None:
        self.root = root
        # The files' paths as strings, joined once: a run writes them ~10 times, and
        # a pathlib join and its conversion back cost more than the string work.
        folder = str(root)
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
        self._fresh = False  # created by this writer, no manifest yet
        self._state_new = False  # created by this writer, no state.json yet
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
        self._crash: Callable[[str], None] | None = None

    # -- opening --------------------------------------------------------------
    @classmethod
    def create(cls, runs_dir: Path, run_id: str, fence: Fence = always,
               durability: str = "full") -> FolderBundle:
        if not fence():
            raise ClaimLost(f"no claim on run '{run_id}'; not creating it")
        root = runs_dir / run_id
        try:
            _make_bundle_dir(runs_dir, root)
        except FileExistsError:
            raise OperationFailed(f"run '{run_id}' already exists") from None
        bundle = cls(root, run_id, fence, durability)
        bundle._acquire()
        bundle._fresh = bundle._state_new = True
        return bundle

    @classmethod
    def open(cls, runs_dir: Path, run_id: str, fence: Fence = always,
             durability: str = "full") -> FolderBundle:
        root = runs_dir / run_id
        if not (root / MANIFEST).is_file() and first_event(root, run_id) is None:
            raise NotFoundError(f"no run '{run_id}' in {runs_dir}; `wfrun runs` lists runs")
        bundle = cls(root, run_id, fence, durability)
        bundle._acquire()
        with contextlib.suppress(OperationFailed, NotFoundError, OSError):
            if bundle.read_manifest().get("status") in ENDED:
                bundle._sealed = True  # ended runs are immutable, whoever opens them
        return bundle

    def _acquire(self) -> None:
        # The lock is a flock on the bundle folder itself: no `.lock` file to create
        # per run (a file creation is ~0.25 ms of kernel time here). Every writer and
        # remover takes it here; readers take none. The kernel drops it with the holder.
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise InputError(f"run '{self.run_id}' is being executed by another "
                                 "process; wait for it to end, or `wfrun cancel` it") from None
            raise
        self._lock_fd = fd

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
        self._whole = self._whole_state = self._whole_manifest = None

    # -- writes ---------------------------------------------------------------
    def _check(self, *, fenced: bool = True) -> None:
        if self._sealed:
            raise OperationFailed(f"run '{self.run_id}' has ended; its bundle is immutable")
        if self._whole is not None:
            self._write_held()  # a write a pure run does not hold: written the usual way
        if fenced and not self.fence():
            raise ClaimLost(f"lost the claim on run '{self.run_id}'; another runner owns it")
        if self._snapshot is not None:
            self._write_snapshot()

    def _write_snapshot(self) -> None:
        data, self._snapshot = self._snapshot, None
        assert data is not None
        path = self._workflow_path
        if link_snapshot(self.root.parent, path, data):
            self._linked = True
            return
        try:
            # In place, no temp file and rename: it is written before the manifest, and
            # readers find a bundle by its manifest (a bundle without one is half-made).
            _create_private(path, data)
        except FileExistsError:
            _write_private(path, data)

    def append(self, events: Iterable[dict[str, Any]], *, sync: bool) -> None:
        batch = events if isinstance(events, list) else list(events)
        if self._whole is not None and not self._sealed:
            if batch:  # asks no fence: the ending's guard is the whole run's
                self._whole.append(("\n".join(map(canonical_json, batch)) + "\n").encode())
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
        self._write_trace(("\n".join(map(canonical_json, batch)) + "\n").encode(), sync=sync)

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
        the module's docstring). Called before `run_started`. `crash`: the engine's
        crash seam (tests), passed `after_whole_written` between the files and the
        commit."""
        if self.begin is not None and self._whole is None:
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
        # As `append` would have: `run_started` under the fence, then `running`, then
        # the nodes' events (a refused `running` records nothing of them).
        first, rest = held[:1], held[1:]
        if first:
            self._check()
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
        _write_all(self._trace_fd, data)  # refused midway: a torn tail, repaired on resume
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
        data = (canonical_json(state) + "\n").encode()
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
                _create_private(self._state_path, data)
                return
        _write_private(self._state_path, data)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        # Compact canonical JSON: the C encoder (indenting takes Python's slow one, twice
        # per run); `wfrun show` is the readable view.
        text = canonical_json(manifest) + "\n"
        if self._whole is not None and not self._sealed and not self._fresh:
            self._whole_manifest = text  # the final one: written with the run
            return
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
                _create_private(self._manifest_path, text.encode())
            except FileExistsError:  # a creator writing its first manifest again
                _write_private(self._manifest_path, text.encode())
        else:
            # In place and fsync'd: the trace holds the ending already (fsync'd first),
            # so a reader that finds this torn rebuilds the same from the trace.
            try:
                _update_private(self._manifest_path, text.encode(), sync=self.sync)
            except FileNotFoundError:
                _write_private(self._manifest_path, text.encode(), sync=self.sync)
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
        _write_private(self._workflow_path, data)
        self._linked = False

    def write_artifact(self, data: bytes, media_type: str) -> dict[str, Any]:
        self._check()
        digest = hashlib.sha256(data).hexdigest()
        rel = f"{ARTIFACTS}/sha256-{digest}.txt"
        path = self.root / rel
        if not path.exists():
            _private_dir(path.parent)  # created on first use: most runs have no artifacts
            _write_private(path, data, sync=self.sync)
        return {"path": rel, "media_type": media_type, "bytes": len(data), "sha256": digest}

    def read_artifact(self, ref: dict[str, Any]) -> bytes:
        return read_artifact(self.root, ref)

    def live_logs(self) -> Path:
        """The folder for running attempts' live logs (created 0700 on first use)."""
        self._check()
        path = self.root / LOGS
        if not self._logs_ready:  # once per open bundle: a shell step pays no mkdir/chmod
            _private_dir(path)
            self._logs_ready = True
        return path

    def repair(self) -> int:
        """Truncate a torn or corrupt trace tail; returns the bytes dropped."""
        self._check()
        path = self.root / TRACE
        if not path.exists():
            return 0
        data = path.read_bytes()
        parsed = parse_trace(data)
        if not parsed.torn:
            return 0
        with open(path, "r+b") as fh:
            fh.truncate(parsed.valid_bytes)
            fh.flush()
            os.fsync(fh.fileno())
        return len(data) - parsed.valid_bytes

    def truncate_to(self, seq: int) -> None:
        """Drop events after `seq` (a resume refuses events its state never saw)."""
        self._check()
        path = self.root / TRACE
        data = path.read_bytes()
        pos = 0
        for _ in range(seq):
            pos = data.index(b"\n", pos) + 1
        if pos < len(data):
            with open(path, "r+b") as fh:
                fh.truncate(pos)
                os.fsync(fh.fileno())

    def seal(self, ending: LaunchStep | None = None) -> None:
        """Make a terminal bundle immutable: read-only files, no more writes; then
        make `ending` (the launch's transition recording how the run ended), after
        the lock is let go, so whoever the launch's ending wakes finds the bundle free.
        A pure run's (`write_whole`) is written by `ending` itself, under its guard."""
        if self._whole is not None and ending is not None and not self._sealed:
            self._seal_whole(ending)
            return
        self._check()
        if self.begin is not None:
            self._begin()  # ended before any node started: the launch ran all the same
        self._seal_files()
        if ending is not None:
            # Refused or unanswered, the step has recorded nothing, and the launch
            # layer records the ending apart, as it does for a bundle without one.
            ending.run(None)

    def _seal_whole(self, ending: LaunchStep) -> None:
        """Write the whole run, sync it, then make its ending's transition, which takes
        the row `starting -> running -> ending`. The fence first: while our claim's
        lease is live nothing but us can change the row (the store asks a `starting`
        row's holder to cancel it, as a `running` one's), so no cancel wins between the
        files and the commit, and the files' fsyncs hold no store lock. A kill between
        them leaves a `starting` row whose bundle says how the run ended, which
        recovery records. Refused by the fence, nothing of the run is written."""
        held = self._whole
        assert held is not None
        self._whole = None
        if not self.fence():
            self.close()  # the bundle stays half-made: whoever settles the launch discards it
            raise ClaimLost(f"lost the claim on run '{self.run_id}'; another runner owns it")
        self._write_trace(b"".join(held), sync=True)
        state, manifest = self._whole_state, self._whole_manifest
        self._whole_state = self._whole_manifest = None
        if state is not None:
            self._write_state(state)
        if manifest is not None:
            self._write_manifest(manifest)
        self._seal_files()
        if self._crash is not None:
            self._crash("after_whole_written")  # the run is on disk, not committed
        # Refused or unanswered, the step has recorded nothing, and the launch layer
        # records the ending apart, as for any sealed bundle.
        ending.run(None)

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

    def remove_unstarted(self) -> None:
        """Delete a bundle whose run never started, under its lock (a live creator
        holds the lock, so its bundle is never removed from under it)."""
        self._acquire()
        try:
            if started(self.root, self.run_id):
                raise OperationFailed(f"run '{self.run_id}' has started; not removing it")
            for entry in sorted(self.root.rglob("*"), reverse=True):
                if entry.is_dir() and not entry.is_symlink():
                    entry.rmdir()
                else:
                    entry.unlink()
        finally:
            self.close()
        self.root.rmdir()

    # -- reads ----------------------------------------------------------------
    def read_trace(self) -> list[dict[str, Any]]:
        return read_trace(self.root).events

    def read_manifest(self) -> dict[str, Any]:
        if self._manifest is not None:  # held under the lock: nobody else writes it
            value: dict[str, Any] = json.loads(self._manifest)
            return value
        return read_manifest(self.root, self.run_id)


def read_manifest(root: Path, run_id: str) -> dict[str, Any]:
    """A bundle's manifest. Missing, or torn as only its writer or a power loss leaves
    it, in a started bundle: rebuilt from the trace (`rebuild_manifest`). Else
    NotFoundError / OperationFailed as `read_json`: one damaged by hand stays damaged."""
    path = root / MANIFEST
    try:
        return read_json(path)
    except (NotFoundError, OperationFailed):
        rebuilt = rebuild_manifest(root, run_id)
        if rebuilt is None:
            raise
        try:
            data: bytes | None = path.read_bytes()
        except FileNotFoundError:
            data = None
        if data is not None and not _torn(data, rebuilt):
            raise
        return rebuilt


def _torn(data: bytes, manifest: dict[str, Any]) -> bool:
    """`data` is what a writer of `manifest` leaves when cut short: empty or zeroed (a
    power loss), or one that begins as every manifest of this run does (canonical
    JSON: `{"definition_digest":"<its digest>"`), read while rewritten in place."""
    data = data.rstrip(b"\0")
    head = dumps({"definition_digest": manifest["definition_digest"]})[:-1].encode()
    return head.startswith(data) or data.startswith(head)


def rebuild_manifest(root: Path, run_id: str) -> dict[str, Any] | None:
    """The manifest of a started bundle as its trace says it: the first one from
    `run_started`, with the ending the final one records. Read where the file is
    missing or torn: a power loss emptied the unsynced first one, or a reader met the
    final one while it was rewritten in place (after the ending is in the trace).
    None: not started, or a trace written without it (rows)."""
    first = first_event(root, run_id)
    manifest = None if first is None else manifest_from_trace(run_id, first)
    if manifest is not None:
        state = fold(run_id, read_trace(root).events)
        if state.status in ENDED:
            manifest.update(status=state.status, finished_at=state.finished_at)
    return manifest


def manifest_from_trace(run_id: str, started: dict[str, Any]) -> dict[str, Any] | None:
    """The first manifest as the run's `run_started` event records it (None: an event
    written without it, by a space whose first manifest is durable)."""
    payload = started.get("payload") or {}
    kept = payload.get("manifest")
    if not isinstance(kept, dict) or any(k not in kept for k in MANIFEST_FIELDS):
        return None
    return {"schema": BUNDLE_SCHEMA, "run_id": run_id, "workflow": payload.get("workflow"),
            "workflow_ref": kept["workflow_ref"], "title": kept["title"],
            "source": kept["source"], "sources": kept["sources"],
            "definition_digest": payload.get("digest"),
            "parent_run_id": payload.get("parent_run_id"),
            "started_at": kept["started_at"], "finished_at": None, "status": "running",
            "trace_schema": started.get("schema"), "paths": dict(PATHS)}


def read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise NotFoundError(f"{path} does not exist") from None
    except ValueError:
        raise OperationFailed(f"{path} is not valid JSON") from None
    if not isinstance(value, dict):
        raise OperationFailed(f"{path} does not hold a JSON object")
    return value


def started(root: Path, run_id: str) -> bool:
    """The trace's first line is `run_started` (seq 1, always fsync'd): the run's input
    is durable. Reads one line, not the trace."""
    return first_event(root, run_id) is not None


def first_event(root: Path, run_id: str) -> dict[str, Any] | None:
    """The trace's first line when it is a whole `run_started` (seq 1), else None."""
    try:
        with open(os.path.join(root, TRACE), "rb") as fh:
            line = fh.readline()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        # An unreadable runs folder is the machine's (a launch waits it out), not
        # the run's: a MachineFault, as a refused write is.
        raise read_fault(exc, f"the trace of run '{run_id}'") or OperationFailed(
            f"cannot read the trace of run '{run_id}': {exc.strerror}") from None
    if not line.endswith(b"\n"):
        return None  # empty, or the first write was torn
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if isinstance(event, dict) and event.get("seq") == 1 and event.get("type") == "run_started":
        return event
    return None


def read_trace(root: Path) -> TraceRead:
    try:
        data = (root / TRACE).read_bytes()
    except FileNotFoundError:
        return TraceRead([], 0, False)
    return parse_trace(data)


def read_artifact(root: Path, ref: dict[str, Any]) -> bytes:
    rel = str(ref.get("path", ""))
    if not rel.startswith(f"{ARTIFACTS}/sha256-") or "/" in rel[len(ARTIFACTS) + 1:]:
        raise OperationFailed(f"invalid artifact reference {rel!r}")
    return (root / rel).read_bytes()
