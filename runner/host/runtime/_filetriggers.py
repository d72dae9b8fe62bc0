"""`files` triggers (DESIGN §10): changes under the project, batched per trigger.

One watchdog observer watches the project folder; a change whose project-relative
path matches a trigger's `paths` globs joins that trigger's open batch. The batch
fires once no change came for `debounce` (default DEFAULT_DEBOUNCE): one run with
`event.paths`, the sorted changed paths. The firing key is the batch's digest
(its paths and when it opened), so a batch fires at most once. `.wfrun/` (run
bundles, the store) and `.git/` never count.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from runner.clock import Clock
from runner.errors import WfrunError
from runner.launch._triggers import Scheduled, TriggerLoop
from runner.store import StoreError

log = logging.getLogger("wfrun.triggers")

#: Seconds without a change before a batch fires, when `debounce` is not given.
DEFAULT_DEBOUNCE = 1.0
#: The most paths one batch lists (a checkout of thousands of files is one batch).
MAX_PATHS = 1000
_IGNORED = (".wfrun/", ".git/")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A path glob as a regex: `**/` any folders (or none), `*` and `?` within one."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


@dataclass
class _Batch:
    opened: float  # wall clock, for the key
    last: float  # monotonic: the latest change
    paths: set[str] = field(default_factory=set)


class FileTriggers(FileSystemEventHandler):
    """Batches of matching changes per files trigger; `due()` fires the quiet ones."""

    def __init__(self, root: Path, loop: TriggerLoop, clock: Clock) -> None:
        self.root = root.resolve()
        self.loop = loop
        self.clock = clock
        # Set by the host's thread (`watch`); the observer's thread only reads it: the
        # catalog and the compile cache are the host thread's alone.
        self._items: dict[tuple[str, str], Scheduled] = {}
        self._lock = threading.Lock()
        self._batches: dict[tuple[str, str], _Batch] = {}
        self._patterns: dict[tuple[str, ...], list[re.Pattern[str]]] = {}
        self._observer: Any = None

    def watch(self, triggers: list[Scheduled]) -> None:
        """The files triggers as the host's latest look at the workflows found them."""
        items = {(t.workflow, t.spec.name): t for t in triggers if t.spec.files is not None}
        with self._lock:
            self._items = items

    def start(self) -> None:
        self._observer = Observer()
        self._observer.schedule(self, str(self.root), recursive=True)
        self._observer.daemon = True
        self._observer.start()

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=10)

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type in ("opened", "closed_no_write"):
            return
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            path = raw.decode() if isinstance(raw, bytes) else raw
            if path:
                self.changed(path)

    def changed(self, path: str) -> None:
        try:
            rel = Path(path).resolve().relative_to(self.root).as_posix()
        except ValueError:
            return
        if rel.startswith(_IGNORED):
            return
        now = self.clock.monotonic()
        with self._lock:
            items = list(self._items.items())
        for key, item in items:
            files = item.spec.files
            if files is None or not any(p.match(rel) for p in self._compiled(files.paths)):
                continue
            with self._lock:
                batch = self._batches.get(key)
                if batch is None:
                    batch = self._batches[key] = _Batch(self.clock.now(), now)
                batch.last = now
                if len(batch.paths) < MAX_PATHS:
                    batch.paths.add(rel)

    def _compiled(self, globs: tuple[str, ...]) -> list[re.Pattern[str]]:
        found = self._patterns.get(globs)
        if found is None:  # a race here compiles twice, harmlessly
            found = self._patterns[globs] = [glob_regex(g) for g in globs]
        return found

    def due(self) -> float | None:
        """Fire every batch quiet for its debounce; seconds until the next is due."""
        now = self.clock.monotonic()
        ready: list[tuple[Scheduled, _Batch]] = []
        soonest: float | None = None
        with self._lock:
            specs = self._items
            for key, batch in list(self._batches.items()):
                item = specs.get(key)
                if item is None or item.spec.files is None:
                    del self._batches[key]  # the trigger is gone
                    continue
                wait = item.spec.files.debounce or DEFAULT_DEBOUNCE
                left = batch.last + wait - now
                if left <= 0:
                    ready.append((item, self._batches.pop(key)))
                else:
                    soonest = left if soonest is None else min(soonest, left)
        for item, batch in ready:
            paths = sorted(batch.paths)
            digest = hashlib.sha256(
                "\0".join([repr(batch.opened), *paths]).encode()).hexdigest()[:16]
            try:
                self.loop.fire_event(item, f"files:{digest}", {"paths": paths})
            except (WfrunError, StoreError) as exc:  # refused: the next change tries again
                log.warning("wfrun host: trigger %s/%s lost a batch of %d change(s): %s",
                            item.workflow, item.spec.name, len(paths), exc.message)
        return soonest
