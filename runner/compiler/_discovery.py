"""Where definitions are: project root, the three source folders and precedence.

Sources, highest first (DESIGN §3): the project's `.wfrun/`, the user folder,
then the built-ins shipped with the package. A name found in several sources
resolves to the highest; the others stay listed as shadowed (`Catalog`: what a
scan found; the scan and its freshness are compiler/_workflows.py's).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
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


Stamp = tuple[tuple[int, int, int] | None, ...]


@dataclass
class Catalog:
    """Every definition file of one kind that the three sources held at a scan
    (`build_catalog`, compiler/_workflows.py, which also keeps it current: `current`)."""

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
    # at every compile of a long-lived host otherwise (set by `current`).
    settled: bool = field(default=False, compare=False, repr=False)

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
