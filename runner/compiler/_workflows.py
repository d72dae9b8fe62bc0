"""Workflows by name or path, compiled once per process: every runner's resolver,
and the catalog it resolves names through, scanned and kept current.

A start and an activation both ask for a workflow's definition (`compile(ref)`).
A valid one is kept here per ref and handed out again only while the ref resolves
to the same file through the same catalog and every source file (YAML, includes,
hooks) still hashes to the sha256 it was compiled from: a warm start re-hashes
bytes instead of re-parsing them (the digest comparison at activation stays
authoritative). Behind it, the definitions earlier processes kept (_stored.py).

A catalog (`build_catalog`: the three source folders listed, precedence applied)
is re-scanned only when a folder's mtime moves (`current`), so a compile asks one
stat per folder and per source file, and re-reads nothing else.

It lives in the compiler so that the launch layer's runners call down into it,
never back up into the host's workspace that builds them.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runner.errors import DefinitionInvalid, NotFoundError

from ._diagnostics import Diagnostic, did_you_mean
from ._discovery import (
    NAME_RE,
    ORIGINS,
    PROJECT_DIR,
    SUFFIXES,
    Catalog,
    CatalogEntry,
    Kind,
    Origin,
    Stamp,
    builtin_folder,
    is_path_ref,
)

if TYPE_CHECKING:
    from ._model import Source, WorkflowDefinition
    from ._stored import DefinitionCache


# -- the catalog: scanned, and kept current ---------------------------------------------

def build_catalog(kind: Kind, project_root: Path | None, user_dir: Path | None) -> Catalog:
    """A scan of the three sources: every definition file of `kind`, precedence applied."""
    sub = kind
    folders: dict[Origin, Path | None] = {
        "project": (project_root / PROJECT_DIR / sub) if project_root else None,
        "user": (user_dir / sub) if user_dir else None,
        "builtin": builtin_folder(kind),
    }
    catalog = Catalog(kind, project_root, folders, user_dir=user_dir)
    # Stamped before listing: a change made while listing shows as a newer mtime.
    catalog.scanned_ns = time.time_ns()
    catalog.stamp = _stamp(catalog)
    if project_root is not None:
        _misnamed_folders(project_root / PROJECT_DIR, kind, catalog.problems)
    winners: dict[str, Origin] = {}
    for origin in ORIGINS:
        folder = folders[origin]
        if folder is None:
            continue
        for path in _list(folder, catalog.problems):
            name = path.stem
            if not NAME_RE.match(name):
                catalog.problems.append(Diagnostic(
                    path.as_posix(), "invalid-name",
                    f"'{name}' cannot name a workflow; use letters, digits, '_', '-' and '.'"))
                continue
            shadowed_by = winners.get(name)
            if shadowed_by is None:
                winners[name] = origin
            catalog.entries.append(CatalogEntry(name, origin, path, shadowed_by))
    return catalog


def _stamp(catalog: Catalog) -> Stamp:
    """(mtime, inode, device) of `.wfrun/` and of each source folder (None: absent). A
    file added, removed or renamed changes its folder's mtime; a folder created or
    removed changes its own entry."""
    paths = list(catalog.folders.values())
    if catalog.project_root is not None:
        paths.append(catalog.project_root / PROJECT_DIR)
    out: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path) if path is not None else None
        except OSError:
            st = None
        out.append((st.st_mtime_ns, st.st_ino, st.st_dev) if st is not None else None)
    return tuple(out)


def _racy(stamp: Stamp, scanned_ns: int) -> bool:
    """True when a folder changed so close to the scan that a later change within the
    same file-system clock tick would leave its mtime as it is."""
    return any(s is not None and s[0] >= scanned_ns - RACY_NS for s in stamp)


# What `.wfrun/` may hold besides definitions: run bundles, the store, anything else.
KNOWN_PROJECT_ENTRIES = frozenset({"workflows", "controllers", "runs", "state"})


def _misnamed_folders(project_dir: Path, kind: Kind, problems: list[Diagnostic]) -> None:
    """A warning for `.wfrun/workflow/` and the like: a folder wfrun does not read
    whose name is close to the one it does (files there would be silently ignored)."""
    try:
        names = sorted(e.name for e in os.scandir(project_dir) if e.is_dir())
    except OSError:
        return
    for name in names:
        if name in KNOWN_PROJECT_ENTRIES or name.startswith("."):
            continue
        if did_you_mean(name, (kind,)) or name.lower() == kind:
            problems.append(Diagnostic(
                (project_dir / name).as_posix(), "unknown-folder",
                f"wfrun does not read {PROJECT_DIR}/{name}/; its files are ignored",
                severity="warning", hint=f"did you mean {PROJECT_DIR}/{kind}/? (rename it)"))


def _list(folder: Path, problems: list[Diagnostic]) -> Iterator[Path]:
    try:
        if not folder.is_dir():
            return
        names = sorted(os.listdir(folder))
    except OSError as exc:
        problems.append(Diagnostic(folder.as_posix(), "unreadable-folder",
                                   f"cannot list definitions folder: {exc.strerror}"))
        return
    seen: set[str] = set()
    for name in names:
        path = folder / name
        if not name.endswith(SUFFIXES) or name.startswith("."):
            continue
        stem = path.stem
        if stem in seen:
            problems.append(Diagnostic(path.as_posix(), "duplicate-name",
                                       f"'{stem}' is defined twice in this folder (.yaml and "
                                       ".yml); remove one"))
            continue
        seen.add(stem)
        yield path


def current(catalog: Catalog) -> Catalog:
    """`catalog`, or a fresh scan when a source folder changed since that one.

    It follows the files: a source folder's mtime moves when a file is added, removed
    or renamed (a long-lived host or session sees a workflow written after it
    started), and the same object comes back when nothing changed, so what is cached
    against it (a compiled definition, `_Compiled.fresh`) stays valid."""
    stamp = _stamp(catalog)
    if stamp == catalog.stamp:
        if catalog.settled:
            return catalog
        if not _racy(stamp, catalog.scanned_ns):
            catalog.settled = True
            return catalog
    fresh = build_catalog(catalog.kind, catalog.project_root, catalog.user_dir)
    fresh.channel_names = catalog.channel_names
    if fresh.entries == catalog.entries and fresh.problems == catalog.problems:
        catalog.settled = False  # first: a reader that sees the new stamp checks it
        catalog.stamp, catalog.scanned_ns = fresh.stamp, fresh.scanned_ns
        return catalog
    return fresh


#: A folder changed this close to a scan may change again within the same tick of
#: the file system's clock without its mtime moving; such a scan is not trusted.
RACY_NS = 1_000_000_000


# -- compiled definitions, kept while fresh ---------------------------------------------

def _file_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)  # through symlinks: a link pointed elsewhere is another file
    except OSError:
        return None
    return st.st_dev, st.st_ino


@dataclass(frozen=True)
class _Compiled:
    """A compiled definition and what it was compiled from."""

    definition: WorkflowDefinition
    stored: str
    catalog: Catalog
    # The file the ref resolved to through `catalog` (the same while the catalog is the
    # same object) and that file's (device, inode) when it was compiled.
    resolved: str
    root: tuple[int, int] | None
    files: tuple[tuple[str, str], ...]  # (real path, sha256 of the bytes compiled)
    channels: frozenset[str] = frozenset()  # `notify` channels it names (config.yaml's)

    def fresh(self, catalog: Catalog) -> bool:
        if catalog is not self.catalog:
            return False
        try:
            # Through symlinks: a link pointed elsewhere is another file. One stat,
            # where the real path took an lstat per folder of it.
            st = os.stat(self.resolved)
        except OSError:
            return False
        if (st.st_dev, st.st_ino) != self.root:
            return False
        if self.channels and not self._channels_still_configured(catalog):
            return False
        for path, sha256 in self.files:
            # Hashed through the raw descriptor: `open()` builds a buffered reader and
            # makes five more system calls, twice per run for a one-file workflow.
            digest = hashlib.sha256()
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    while chunk := os.read(fd, 1 << 16):
                        digest.update(chunk)
                finally:
                    os.close(fd)
            except OSError:
                return False
            if digest.hexdigest() != sha256:
                return False
        return True

    def _channels_still_configured(self, catalog: Catalog) -> bool:
        """config.yaml is no source of the definition, yet its channel check depends on
        it: a channel removed there must refuse the next start, as a fresh compile does."""
        known = catalog.channel_names() if catalog.channel_names is not None else None
        return not isinstance(known, frozenset) or self.channels <= known


class Workflows:
    """The workflows of one catalog as a runner compiles them (the launch layer's
    `Resolver`). `kept`: the folder of definitions kept between processes; a session
    may name files under `project_root` or the user folder, relative to `base`."""

    def __init__(self, catalog: Catalog, kept: Path, *, project_root: Path | None,
                 base: Path) -> None:
        self.catalog = catalog
        self._kept_folder = kept
        self._project_root = project_root
        self._base = base
        self._compiled: dict[str, _Compiled] = {}
        self._kept_cache: DefinitionCache | None = None

    def current(self) -> Catalog:
        """The catalog as the folders hold it now (re-scanned only when a source folder
        changed; the same object otherwise, so what is cached against it stays valid)."""
        self.catalog = current(self.catalog)
        return self.catalog

    def compile(self, ref: str) -> tuple[WorkflowDefinition, str]:
        """Compile a workflow by name or path; returns it with the ref to store."""
        # As `current()`: a workflow written since the last look is found by name.
        self.catalog = current(self.catalog)
        # Kept under its key: a name is its own, a path its absolute form. A ref spelled
        # as its key (a name, most refs) finds it without working that out.
        cached = self._compiled.get(ref)
        if cached is not None and cached.fresh(self.catalog):
            return cached.definition, cached.stored
        return self._compile(ref)

    def _compile(self, ref: str) -> tuple[WorkflowDefinition, str]:
        """`compile` past a name's fresh entry: a path's entry, a kept one, or a compile."""
        path_ref = is_path_ref(ref)
        key = os.path.abspath(os.path.expanduser(ref)) if path_ref else ref
        cached = self._compiled.get(key) if key != ref else None  # else `compile` looked
        if cached is not None and cached.fresh(self.catalog):
            return cached.definition, cached.stored
        stored = str(Path(ref).expanduser().resolve()) if path_ref else ref
        kept = self._kept_file(ref)
        # What a cached entry stats to see that `ref` still names the same file.
        resolved = key if path_ref else str(kept[0]) if kept is not None else None
        definition = self._kept().load(*kept) if kept is not None else None
        if definition is not None:  # compiled by an earlier process from the same bytes
            entry = self._cache_entry(definition, stored, resolved)
            if entry is not None:
                self._compiled[key] = entry
            return definition, stored
        from ._compile import Compiler
        from ._diagnostics import Diagnostic, render_text

        out = Compiler(self.catalog).compile_name(ref)
        if isinstance(out, Diagnostic):
            hint = f" ({out.hint})" if out.hint else ""
            raise NotFoundError(f"{out.message}{hint}; `wfrun list` shows what exists")
        if not out.valid or out.definition is None:
            first = out.errors[0] if out.errors else None
            where = f": {render_text([first]).splitlines()[0]}" if first else ""
            raise DefinitionInvalid(f"workflow '{out.name}' has {len(out.errors)} error(s)"
                                    f"{where}; run `wfrun validate {ref}`")
        if kept is not None:
            self._kept().save(*kept, out.definition)
        entry = self._cache_entry(out.definition, stored, resolved)
        if entry is not None:
            self._compiled[key] = entry
        return out.definition, stored

    def session_ref(self, ref: str) -> str:
        """`ref` as an agent session may use it: a name as it is; a path taken relative
        to the project (not this process's cwd) and only inside the project or the user
        folder. Anything else is refused before the file is touched, so the refusal
        says nothing about it."""
        if not is_path_ref(ref):
            return ref
        roots = [r for r in (self._project_root, self.catalog.user_dir) if r is not None]
        expanded = os.path.expanduser(ref) if ref.startswith("~") else ref
        path = os.path.realpath(os.path.join(self._base, expanded))
        for root in roots:
            real_root = os.path.realpath(root)
            if path == real_root or path.startswith(real_root.rstrip(os.sep) + os.sep):
                return path
        shown = ref if len(ref) <= 120 else ref[:120] + "…"
        raise NotFoundError(f"workflow path {json.dumps(shown)} is outside the project and the "
                            "user folder; use a workflow name (the list action shows them) or a "
                            "path inside the project")

    def _kept(self) -> DefinitionCache:
        """The compiled definitions earlier processes kept (_stored.py)."""
        from ._stored import DefinitionCache

        if self._kept_cache is None or self._kept_cache.catalog is not self.catalog:
            self._kept_cache = DefinitionCache(self._kept_folder, self.catalog)
        return self._kept_cache

    def _kept_file(self, ref: str) -> tuple[Path, Origin | None] | None:
        """The file `ref` compiles from and its origin, as the compiler resolves it."""
        if is_path_ref(ref):
            return Path(os.path.realpath(os.path.expanduser(ref))), None
        entry = self.catalog.get(ref)
        return (entry.path, entry.origin) if entry is not None else None

    def _cache_entry(self, definition: WorkflowDefinition, stored: str,
                     resolved: str | None) -> _Compiled | None:
        from ._stored import named_channels

        def real_path(source: Source) -> str | None:
            if source.kind == "file":
                return source.path
            entry = self.catalog.get(source.name or "")
            if entry is None or entry.origin != "builtin":
                return None  # a builtin we cannot find again: compile every time
            return os.path.realpath(entry.path)

        root = real_path(definition.source) if definition.source is not None else None
        files = []
        for source in definition.sources:
            path = real_path(source)
            if path is None:
                return None
            files.append((path, source.sha256))
        if root is None or resolved is None:
            return None
        return _Compiled(definition, stored, self.catalog, resolved, _file_id(root),
                         tuple(files), named_channels(definition.snapshot()))
