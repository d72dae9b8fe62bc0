"""`wfrun dev`: re-validate definitions as they are saved (DESIGN §8).

A watchdog observer watches every definition source (project, user and
built-in folders, plus the folders of hook files and included files). Events
are debounced briefly (editors save in bursts: write temp, rename, chmod), then
the changed files and every workflow that depends on them are recompiled and
reported: diagnostics, or `ok NAME DIGEST`. Deleted files leave the catalog;
new files and folders join it. With `run`, a valid save re-runs that workflow
through `launch` (a launch row run here, like `wfrun run`: `runs`, `status` and the
web view see it) and reports the result.

Queued launches (given by `queued`) are checked at start and after every batch:
a launch whose recorded source file was edited or removed is noted once per
file and content, and a launch pinned to an older digest of a workflow that now
compiles to another one is listed once per digest (activation will refuse it
with source_changed; the digest check there stays the authority).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from runner.clock import Clock, SystemClock
from runner.compiler import Catalog, Compiler, CompileResult, render_text
from runner.compiler._discovery import PROJECT_DIR, SUFFIXES, is_path_ref
from runner.engine import RunOutcome
from runner.errors import WfrunError
from runner.store import LaunchRecord

from ._watch import recorded_files, source_drift

log = logging.getLogger(__name__)
DEBOUNCE = 0.03
MAX_DEBOUNCE = 1.0  # seconds from a burst's first change to its batch, at most
WATCHED_SUFFIXES = (*SUFFIXES, ".py", ".json")

Emit = Callable[[str, str], None]  # (kind: ok|error|removed|run|note, text)


@dataclass
class DevState:
    results: dict[str, CompileResult] = field(default_factory=dict)  # by catalog name
    batches: int = 0  # completed processing rounds (tests wait on this)
    last_latency: float | None = None  # event -> output, seconds
    latencies: list[float] = field(default_factory=list)
    # The diagnostics last printed per name, with the texts they were about: one save
    # seen in two batches (or an invalid file re-checked) is not printed twice.
    shown_errors: dict[str, str] = field(default_factory=dict)


class _Handler(FileSystemEventHandler):
    def __init__(self, dev: DevMode) -> None:
        self.dev = dev

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        paths = [event.src_path, getattr(event, "dest_path", "") or ""]
        for p in paths:
            if p:
                self.dev.touch(Path(str(p)))


class DevMode:
    def __init__(self, build_catalog: Callable[[], Catalog], emit: Emit, *,
                 names: tuple[str, ...] = (), run: str | None = None,
                 launch: Callable[[str, Any], RunOutcome] | None = None,
                 project_root: Path | None = None,
                 queued: Callable[[], Sequence[LaunchRecord]] | None = None,
                 run_input: Any = None, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self.launch = launch  # runs a workflow by name as a launch row, here (`--run`)
        self.run_input = run_input
        self.build_catalog = build_catalog
        self.emit = emit
        self.names = names
        self.run_name = run
        self.project_root = project_root
        self.queued = queued
        self.state = DevState()
        self._pending: set[Path] = set()
        self._first_event: float | None = None
        self._last_event = 0.0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._observer: Any = None
        self._watched: set[Path] = set()
        self._thread: threading.Thread | None = None
        self._flagged: set[tuple[str, str, str | None]] = set()  # (run, file, sha now)
        self._pinned: set[tuple[str, str]] = set()  # (run, the digest it is behind)
        self._queued_files: set[Path] = set()
        self.catalog = build_catalog()

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        self._check_all()
        self._flag_queued()
        self._observer = Observer()
        self._handler = _Handler(self)
        self._rewatch()
        self._observer.start()  # the inotify watches exist when this returns
        self._thread = threading.Thread(target=self._loop, daemon=True, name="wfrun-dev")
        self._thread.start()
        # Only now: a save made right after this line is seen (watching has begun).
        self.emit("note", f"watching {len(self.state.results)} workflow(s); save a file to "
                  "re-validate it")

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def wait_batches(self, count: int, timeout: float = 10.0) -> bool:
        end = self.clock.monotonic() + timeout
        while self.state.batches < count:
            if self.clock.monotonic() > end:
                return False
            self.clock.sleep(0.005)
        return True

    # -- watching ----------------------------------------------------------------------
    def _folders(self) -> set[Path]:
        """Every folder whose changes can change a result, nearest existing ancestor."""
        wanted: set[Path] = set()
        for folder in self.catalog.folders.values():
            if folder is not None:
                wanted.add(folder)
        if self.project_root is not None:
            wanted.add(self.project_root / PROJECT_DIR)
        for result in self.state.results.values():
            if result.definition is None:
                continue
            for source in result.definition.sources:
                if source.path:
                    wanted.add(Path(source.path).parent)
        wanted.update(path.parent for path in self._queued_files)  # a path ref elsewhere
        out = set()
        for folder in wanted:
            f = folder
            while not f.exists() and f != f.parent:
                f = f.parent  # watch the ancestor so the folder's creation is seen
            out.add(f)
        return out

    def _rewatch(self) -> set[Path]:
        added = set()
        for folder in self._folders() - self._watched:
            try:
                self._observer.schedule(self._handler, str(folder), recursive=False)
                self._watched.add(folder)
                added.add(folder)
            except OSError as exc:
                self.emit("note", f"cannot watch {folder}: {exc.strerror}")
        return added

    def touch(self, path: Path) -> None:
        if path.suffix not in WATCHED_SUFFIXES and path.suffix:
            return
        with self._lock:
            self._pending.add(path)
            now = self.clock.monotonic()
            if self._first_event is None:
                self._first_event = now
            self._last_event = now
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            if self._stop.is_set():
                return
            self._quiet()  # let the save burst finish
            with self._lock:
                changed, self._pending = self._pending, set()
                first, self._first_event = self._first_event, None
                self._wake.clear()
            if not changed:
                continue
            try:
                self._process(changed, first)
            except Exception:  # dev mode survives anything a save can do
                log.exception("dev mode failed to process a change")
                self.emit("error", "internal error while re-validating; see the log")
            self.state.batches += 1

    def _quiet(self) -> None:
        """Wait until no change came for DEBOUNCE (a burst whose events the watcher's
        thread hands over late, on a loaded machine, is still one batch), but no
        longer than MAX_DEBOUNCE after the first: a file saved without pause is
        still checked."""
        while not self._stop.is_set():
            now = self.clock.monotonic()
            with self._lock:
                last, first = self._last_event, self._first_event
            wait = last + DEBOUNCE - now
            if first is not None:
                wait = min(wait, first + MAX_DEBOUNCE - now)
            if wait <= 0:
                return
            self.clock.sleep(wait)

    # -- checking ----------------------------------------------------------------------
    def _selected(self, name: str) -> bool:
        return not self.names or name in self.names

    def _check_all(self) -> None:
        compiler = Compiler(self.catalog)
        for entry in self.catalog.active:
            if self._selected(entry.name):
                self._report(entry.name, compiler.compile_path(
                    entry.path, display=entry.display, origin=entry.origin))

    def _process(self, changed: set[Path], first: float | None) -> None:
        old = self.catalog
        self.catalog = self.build_catalog()
        before, after = {e.name for e in old.active}, {e.name for e in self.catalog.active}
        for name in sorted(before - after):
            self.state.results.pop(name, None)
            self.emit("removed", f"{name} removed from the catalog")
        real = {p.resolve() if p.exists() else p.absolute() for p in changed}
        affected = set(after - before)
        for name, result in self.state.results.items():
            srcs = {Path(s.path) for s in (result.definition.sources if result.definition
                                           else ()) if s.path}
            if real & srcs:
                affected.add(name)
        for entry in self.catalog.active:
            path = entry.path.resolve() if entry.path.exists() else entry.path
            if path in real or entry.path in changed:
                affected.add(entry.name)
            prev = self.state.results.get(entry.name)
            if prev is not None and not prev.valid:
                affected.add(entry.name)  # an include it was missing may have appeared
        compiler = Compiler(self.catalog)
        for entry in self.catalog.active:
            if entry.name in affected and self._selected(entry.name):
                result = compiler.compile_path(entry.path, display=entry.display,
                                               origin=entry.origin)
                self._report(entry.name, result)
        if first is not None:
            self.state.last_latency = self.clock.monotonic() - first
            self.state.latencies.append(self.state.last_latency)
        for folder in self._rewatch():
            self.touch(folder)  # a file saved there before the watch began: the next batch
        self._flag_queued()
        if self.run_name and self.run_name in affected:
            self._rerun()

    def _report(self, name: str, result: CompileResult) -> None:
        self.state.results[name] = result
        if result.valid and result.definition is not None:
            self.state.shown_errors.pop(name, None)
            self.emit("ok", f"ok {name} {result.definition.digest}")
            return
        text = render_text(result.diagnostics, result.texts)
        key = text + "\0" + "\0".join(f"{k}\0{v}" for k, v in sorted(result.texts.items()))
        if self.state.shown_errors.get(name) == key:
            return  # the same files with the same problems: already on screen
        self.state.shown_errors[name] = key
        self.emit("error", text)

    def _flag_queued(self) -> None:
        if self.queued is None:
            return
        try:
            records = list(self.queued())
        except Exception:  # the store is someone else's; dev mode goes on without it
            log.exception("dev mode could not list queued launches")
            return
        self._queued_files = {Path(p) for r in records for p, _ in recorded_files(r)}
        for record in records:
            run_id = record.run_id
            drift = source_drift(record)
            if drift is not None and (run_id, drift.path, drift.actual) not in self._flagged:
                self._flagged.add((run_id, drift.path, drift.actual))  # once per file, content
                what = "changed" if drift.kind == "edited" else f"was {drift.detail}"
                self.emit("note", f"queued run {run_id}: its source {drift.path} {what}; "
                          "activation will refuse it (source_changed)")
            name = self._catalog_name(record.workflow_ref)
            result = self.state.results.get(name) if name is not None else None
            if result is None or not result.valid or result.definition is None:
                continue
            digest = result.definition.digest
            if digest != record.definition_digest and (run_id, digest) not in self._pinned:
                self._pinned.add((run_id, digest))
                self.emit("note", f"queued launch {run_id} is pinned to an older version of "
                          f"{name}; it will fail with source_changed")

    def _catalog_name(self, ref: str) -> str | None:
        """The catalog name a launch's stored workflow ref resolves to now."""
        if not is_path_ref(ref):
            return ref
        for entry in self.catalog.active:
            if entry.path.exists() and str(entry.path.resolve()) == ref:
                return entry.name
        return None

    def _rerun(self) -> None:
        name = self.run_name
        assert name is not None
        result = self.state.results.get(name)
        if result is None or not result.valid or result.definition is None:
            return
        if self.launch is None:
            return
        try:
            # A launch row like every other run (`runs`, `status`, `cancel` see it), run
            # here to its end; secrets come from this process's environment.
            outcome = self.launch(name, self.run_input or {})
        except Exception as exc:
            message = exc.message if isinstance(exc, WfrunError) else str(exc)
            self.emit("run", f"run {name}: could not start: {message}")
            return
        error = f": {outcome.error.get('message')}" if outcome.error else ""
        self.emit("run", f"run {name} {outcome.status} ({outcome.run_id}){error}")
