"""Source watching for queued launches (DESIGN §6): flag a change early.

A launch records, when it is queued, the sha256 of every file its definition was
compiled from (the workflow's YAML, included workflows, hook files). `source_drift`
(drift.py) re-hashes those files and says which one was edited or removed since; `wfrun
status` and `wfrun why` call it directly (they are separate processes, no watcher
needed). `SourceWatch` is the live form for long-running hosts (`wfrun host`, a
session adapter): a watchdog observer on the parent folders of those files,
debounced, that keeps the set of drifted run ids and calls back once per change.

Neither decides anything. The digest comparison at activation stays the
authority: an edit that leaves the definition unchanged (a comment) still
activates, a drift that is restored before activation is forgotten. Not
detected here (as in the compile cache): a file reached through a symlink that is
retargeted, since the recorded path is the real one.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.clock import Clock, SystemClock

if TYPE_CHECKING:
    from watchdog.events import FileSystemEvent

# The drift check itself lives in drift.py, which `status` and `why` import without
# watchdog (issue 15, cold start); its names stay importable from here.
from ._drift import Drift as Drift
from ._drift import Sourced as Sourced
from ._drift import display_path as display_path
from ._drift import recorded_files as recorded_files
from ._drift import source_drift as source_drift

log = logging.getLogger(__name__)
DEBOUNCE = 0.05  # seconds of quiet after the last event of a burst (editors save in bursts)
MAX_DELAY = 1.0  # a burst that never goes quiet is still checked after this long



@functools.cache
def _events() -> list[type[FileSystemEvent]]:
    """The changes that can make a launch drift. Not opens and closes without a write:
    the host itself reads a workflow's file at every activation (the compile cache
    re-hashes it), and each read woke two watcher threads for an event the handler
    drops (inotify is asked for these events only)."""
    from watchdog.events import (
        DirCreatedEvent,
        DirDeletedEvent,
        DirMovedEvent,
        FileClosedEvent,
        FileCreatedEvent,
        FileDeletedEvent,
        FileModifiedEvent,
        FileMovedEvent,
    )

    return [FileCreatedEvent, DirCreatedEvent, FileDeletedEvent, DirDeletedEvent,
            FileModifiedEvent, FileMovedEvent, DirMovedEvent, FileClosedEvent]


OnDrift = Callable[[Sourced, Drift], None]
OnClear = Callable[[Sourced], None]


class _Handler:
    """The observer's handler (watchdog calls `dispatch` with each event): a plain
    class, so that watchdog loads only once there is a folder to watch."""

    def __init__(self, watch: SourceWatch) -> None:
        self.watch = watch

    def dispatch(self, event: FileSystemEvent) -> None:
        self.on_any_event(event)

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write") or (
                event.is_directory and event.event_type == "modified"):
            return  # a folder's "modified" repeats the event of the file inside it
        for raw in (event.src_path, getattr(event, "dest_path", "") or ""):
            if raw:
                self.watch._touch(os.fsdecode(raw), folder=event.is_directory)


class SourceWatch:
    """Watch the source files of a set of queued launches; report drift, decide nothing.

    `update(records)` replaces the watched set (call it whenever the queued launches
    may have changed: it is cheap when nothing did). A launch that joins the set is
    checked once at once, so a change made before it was watched is reported too.
    `on_drift(record, drift)` is called on the watcher's thread when a launch drifts
    (again only when the file, kind or content changes); `on_clear(record)` when a
    drifted launch hashes as queued again. `drifted` is the current set of run ids.
    """

    def __init__(self, on_drift: OnDrift | None = None, *, on_clear: OnClear | None = None,
                 clock: Clock | None = None, debounce: float = DEBOUNCE,
                 max_delay: float = MAX_DELAY) -> None:
        self.on_drift = on_drift
        self.on_clear = on_clear
        self.clock: Clock = clock or SystemClock()
        self.debounce = debounce
        self.max_delay = max(max_delay, debounce)
        self.batches = 0  # completed check rounds (tests wait on this)
        self._records: dict[str, Sourced] = {}
        self._drift: dict[str, Drift] = {}
        self._interest: frozenset[str] = frozenset()  # files and their watched ancestors
        # Each watched launch's files and their folders, computed once per launch: a
        # draining host updates the set on every claim (it was O(queued) path parsing).
        self._launch_paths: dict[str, frozenset[str]] = {}
        self._launch_parents: dict[str, frozenset[str]] = {}  # the folders of its files
        self._watches: dict[str, Any] = {}  # folder -> ObservedWatch
        self._state = threading.RLock()  # never held while waiting for _pending
        self._pending = threading.Lock()  # the observer's thread takes only this one
        self._paths: set[str] = set()
        self._folders_moved = False  # a folder on a watched path appeared or vanished
        self._runs: set[str] = set()
        self._first: float | None = None
        self._last = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._done = threading.Condition()
        self._observer: Any = None  # made by `_rewatch` for the first folder to watch
        self._started = False
        self._thread: threading.Thread | None = None
        self._handler = _Handler(self)

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Start watching (a no-op when already started)."""
        with self._state:
            if self._thread is not None:
                return
            self._stop.clear()
            self._watches = {}
            self._started = True
            self._rewatch()  # the observer, once there is a folder to watch
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name="wfrun-source-watch")
            self._thread.start()
            self._queue_runs(set(self._records))

    def stop(self) -> None:
        """Stop watching (a no-op when not started); the watched set is kept."""
        with self._state:
            thread, observer = self._thread, self._observer
            self._thread, self._observer, self._watches = None, None, {}
            self._started = False
        if thread is None:
            return
        self._stop.set()
        self._wake.set()
        if observer is not None:
            try:
                observer.stop()
                observer.join(timeout=5)
            except Exception:  # a stopping observer must not take the host down
                log.debug("source watch: observer did not stop cleanly", exc_info=True)
        thread.join(timeout=5)

    def __enter__(self) -> SourceWatch:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- the watched set ----------------------------------------------------------------
    def update(self, records: Iterable[Sourced]) -> None:
        """Watch exactly these launches from now on."""
        wanted = {r.run_id: r for r in records}
        with self._state:
            if wanted.keys() == self._records.keys():
                self._records = wanted  # a run's recorded sources never change
                return
            fresh = {run for run, r in wanted.items()
                     if run not in self._records or self._records[run].source != r.source}
            for run in set(self._records) - set(wanted):
                self._drift.pop(run, None)
                self._launch_paths.pop(run, None)
                self._launch_parents.pop(run, None)
            self._records = wanted
            for run, record in wanted.items():
                if run in fresh or run not in self._launch_paths:
                    self._launch_paths[run] = _interest_of(record)
                    self._launch_parents[run] = frozenset(
                        os.path.dirname(p) for p, _ in recorded_files(record))
            self._interest = frozenset().union(*self._launch_paths.values())
            added = self._rewatch() if self._thread is not None else set()
            if self._thread is None:
                return
            # A folder watched only now: a change made there before the watch began.
            for run, record in wanted.items() if added else ():
                if any(_under(p, added) for p, _ in recorded_files(record)):
                    fresh.add(run)
        if fresh:
            self._queue_runs(fresh)

    @property
    def drifted(self) -> frozenset[str]:
        with self._state:
            return frozenset(self._drift)

    def drift(self, run_id: str) -> Drift | None:
        with self._state:
            return self._drift.get(run_id)

    @property
    def folders(self) -> frozenset[str]:
        with self._state:
            return frozenset(self._watches)

    def wait_batches(self, count: int, timeout: float) -> bool:
        """Block (real time) until `count` check rounds completed; False on timeout."""
        with self._done:
            return self._done.wait_for(lambda: self.batches >= count, timeout)

    # -- watching -------------------------------------------------------------------------
    def _wanted_folders(self) -> set[str]:
        """The parent folder of every file, or its nearest existing ancestor (so that the
        folder's re-creation is seen)."""
        # Each distinct folder is looked at once: the queued launches of a draining
        # host mostly share one (a stat and a Path per file per update was 8 ms per
        # update at 200-400 queued, on every claim's poll).
        out: set[str] = set()
        for parent in frozenset().union(*self._launch_parents.values()):
            folder = Path(parent)
            while not folder.is_dir() and folder != folder.parent:
                folder = folder.parent
            out.add(str(folder))
        return out

    def _rewatch(self) -> set[str]:
        """Schedule the wanted folders, drop the others (and any whose folder vanished:
        its inotify watch died with it). Returns the folders newly scheduled."""
        if not self._started:
            return set()
        wanted = self._wanted_folders()
        observer = self._observer
        if observer is None:
            if not wanted:
                return set()  # nothing to watch yet: no observer (nor watchdog) needed
            observer = self._observer = _observer()
        for folder in list(self._watches):
            if folder not in wanted or not os.path.isdir(folder):
                watch = self._watches.pop(folder)
                try:
                    observer.unschedule(watch)
                except Exception:  # already gone with its folder
                    log.debug("source watch: unschedule %s", folder, exc_info=True)
        added: set[str] = set()
        for folder in wanted - set(self._watches):
            try:
                self._watches[folder] = observer.schedule(self._handler, folder,
                                                          recursive=False,
                                                          event_filter=_events())
                added.add(folder)
            except OSError as exc:  # removed in between, or not ours to watch
                log.debug("source watch: cannot watch %s: %s", folder, exc.strerror)
        return added

    def _touch(self, path: str, *, folder: bool = False) -> None:
        """An event for `path` (the observer's thread): note it if it can matter."""
        if path not in self._interest:
            return
        with self._pending:
            self._paths.add(path)
            self._folders_moved |= folder or path in self._watches  # (a watched folder's own)
            self._mark()
        self._wake.set()

    def _queue_runs(self, runs: set[str]) -> None:
        with self._pending:
            self._runs |= runs
            self._mark()
        self._wake.set()

    def _mark(self) -> None:
        now = self.clock.monotonic()
        self._last = now
        if self._first is None:
            self._first = now

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            if self._stop.is_set():
                return
            # Debounce: wait for `debounce` seconds without events (at most `max_delay`).
            while True:
                with self._pending:
                    first, last = self._first or 0.0, self._last
                left = min(last + self.debounce, first + self.max_delay) - self.clock.monotonic()
                if left <= 0:
                    break
                if self.clock.sleep(left, self._stop):
                    return
            with self._pending:
                paths, self._paths = self._paths, set()
                runs, self._runs = self._runs, set()
                folders, self._folders_moved = self._folders_moved, False
                self._first = None
                self._wake.clear()
            try:
                self._check(paths, runs, rewatch=folders)
            except Exception:  # the watch survives anything a file system can do
                log.exception("source watch: checking queued launches failed")
            with self._done:
                self.batches += 1
                self._done.notify_all()

    def _check(self, paths: set[str], runs: set[str], *, rewatch: bool) -> None:
        with self._state:
            if rewatch:
                # Before re-hashing: a file written once the new watch exists is an event.
                self._rewatch()
            targets = []
            for run, record in self._records.items():
                if run in runs or any(p in paths or _under(p, paths)
                                      for p, _ in recorded_files(record)):
                    targets.append(record)
        for record in targets:
            drift = source_drift(record)
            with self._state:
                if record.run_id not in self._records:
                    continue  # left the watched set meanwhile (claimed, cancelled)
                before = self._drift.get(record.run_id)
                if drift is None:
                    self._drift.pop(record.run_id, None)
                elif drift != before:
                    self._drift[record.run_id] = drift
            if drift is not None and drift != before:
                self._call(self.on_drift, record, drift)
            elif drift is None and before is not None and self.on_clear is not None:
                self._call(self.on_clear, record)

    @staticmethod
    def _call(callback: Callable[..., None] | None, *args: Any) -> None:
        if callback is None:
            return
        try:
            callback(*args)
        except Exception:
            log.exception("source watch: a drift callback failed")


def _interest_of(record: Sourced) -> frozenset[str]:
    """The launch's recorded files and every folder above them."""
    interest: set[str] = set()
    for path, _ in recorded_files(record):
        interest.add(path)
        interest |= _ancestors(path)
    return frozenset(interest)


def _under(path: str, folders: Collection[str]) -> bool:
    """True when one of `folders` is an ancestor of `path` (a folder event)."""
    if not folders:
        return False
    parents = _ancestors(path)
    return any(f in parents for f in folders)


@functools.lru_cache(maxsize=4096)
def _ancestors(path: str) -> frozenset[str]:
    """Every folder above `path`, as the strings `Path(path).parents` gives. Cached:
    the launches a host watches mostly share a few files, and a backlog of hundreds
    re-asked for the same ones on every update (pathlib was ~8 % of a draining host's CPU)."""
    return frozenset(str(p) for p in Path(path).parents)


def _observer() -> Any:
    """A started watchdog observer (a daemon thread): watchdog is imported here, when a
    started watch first has a folder to watch (a `host --once` whose queue is drained
    at its first claim never loads it)."""
    from watchdog.observers import Observer

    observer = Observer()
    observer.daemon = True
    observer.start()
    return observer
