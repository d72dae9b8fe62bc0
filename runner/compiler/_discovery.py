"""Finding definitions: project root, the three source folders and precedence.

Sources, highest first (DESIGN §3): the project's `.wfrun/`, the user folder,
then the built-ins shipped with the package. A name found in several sources
resolves to the highest; the others stay listed as shadowed.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ._diagnostics import Diagnostic, did_you_mean

#: A definition's name (its file name without the suffix). Here, not in parse.py: finding
#: the project must not load the format checks and Jinja2 (cold start).
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")

Origin = Literal["project", "user", "builtin"]
Kind = Literal["workflows", "controllers"]
ORIGINS: tuple[Origin, ...] = ("project", "user", "builtin")
SUFFIXES = (".yaml", ".yml")
PROJECT_DIR = ".wfrun"


def find_project_root(start: Path) -> Path | None:
    """The nearest ancestor of `start` (inclusive) that holds a `.wfrun/` folder."""
    here = start.resolve()
    for folder in (here, *here.parents):
        if (folder / PROJECT_DIR).is_dir():
            return folder
    return None


def builtin_root() -> Path:
    """Where the built-in `definitions/` and `controllers/` live.

    A wheel carries them inside the package (`runner/_builtin/`); a source
    checkout or editable install has them at the repository root.
    """
    package = Path(__file__).resolve().parent.parent
    shipped = package / "_builtin"
    if shipped.is_dir():
        return shipped
    return package.parent


def builtin_folder(kind: Kind) -> Path:
    return builtin_root() / ("definitions" if kind == "workflows" else "controllers")


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    origin: Origin
    path: Path
    shadowed_by: Origin | None = None

    @property
    def display(self) -> str:
        return self.path.as_posix()


#: A folder changed this close to a scan may change again within the same tick of
#: the file system's clock without its mtime moving; such a scan is not trusted.
RACY_NS = 1_000_000_000

Stamp = tuple[tuple[int, int, int] | None, ...]


@dataclass
class Catalog:
    """Every definition file of one kind that the three sources hold.

    `current()` follows the files: it re-scans when a source folder's mtime says a
    file was added, removed or renamed since the scan (a long-lived host or session
    sees a workflow written after it started), and returns this same object when
    nothing changed, so what is cached against it stays valid.
    """

    kind: Kind
    project_root: Path | None
    folders: dict[Origin, Path | None]
    entries: list[CatalogEntry] = field(default_factory=list)
    problems: list[Diagnostic] = field(default_factory=list)
    user_dir: Path | None = None
    stamp: Stamp = ()
    scanned_ns: int = 0  # the real wall clock: it is compared with file mtimes
    #: The notification channels the project configures (`.wfrun/config.yaml`), read
    #: by whoever owns that file (the host's runtime) and asked for only when a
    #: workflow names a channel; None (or a None answer): not known, names unchecked.
    channel_names: Callable[[], frozenset[str] | None] | None = field(
        default=None, compare=False, repr=False)
    # `stamp` and `scanned_ns` were found not racy: a pure function of the two, asked
    # at every compile of a long-lived host otherwise.
    _settled: bool = field(default=False, compare=False, repr=False)

    def current(self) -> Catalog:
        """This catalog, or a fresh scan when a source folder changed since this one."""
        stamp = _stamp(self)
        if stamp == self.stamp:
            if self._settled:
                return self
            if not _racy(stamp, self.scanned_ns):
                self._settled = True
                return self
        fresh = build_catalog(self.kind, self.project_root, self.user_dir)
        fresh.channel_names = self.channel_names
        if fresh.entries == self.entries and fresh.problems == self.problems:
            self._settled = False  # first: a reader that sees the new stamp checks it
            self.stamp, self.scanned_ns = fresh.stamp, fresh.scanned_ns
            return self
        return fresh

    @property
    def active(self) -> list[CatalogEntry]:
        return [e for e in self.entries if e.shadowed_by is None]

    def get(self, name: str) -> CatalogEntry | None:
        for entry in self.entries:
            if entry.name == name and entry.shadowed_by is None:
                return entry
        return None

    def names(self) -> list[str]:
        return [e.name for e in self.active]

    def suggest(self, name: str) -> str | None:
        return did_you_mean(name, self.names())


def is_path_ref(ref: str) -> bool:
    return ref.startswith(("./", "../", "/", "~")) or ref.endswith(SUFFIXES) or os.sep in ref


def user_folder_default(env_home: str | None, platform_dir: Path | None) -> Path | None:
    """`$WFRUN_HOME` wins over the platform's user config folder."""
    if env_home:
        return Path(env_home).expanduser()
    return platform_dir


def build_catalog(kind: Kind, project_root: Path | None, user_dir: Path | None) -> Catalog:
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
