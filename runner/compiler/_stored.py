"""Compiled definitions kept between processes (issue 34 item 11).

`wfrun run`, `start` and `list` compiled every workflow they touched in every
process. A valid definition is now kept in the project's state folder
(`.wfrun/state/compiled/`, 0700, one 0600 file per workflow file) and read back
instead of compiled when nothing it was compiled from has changed:

- the wfrun code: the version, the interpreter, and the size and mtime of every
  compiler and built-in step module (an edited checkout misses, as an upgrade does);
- the catalog: every workflow name, origin, path and shadowing, so an include by
  name that would resolve elsewhere now misses;
- every source file (the YAML, each included file, each file hook) hashes to the
  sha256 it was compiled from: bytes, not mtimes, decide;
- the `notify` channels it names are still configured in `.wfrun/config.yaml`;
- it calls no step installed by another package (whose schema could change
  without any of the above moving): such a definition is not kept.

Anything else (a missing, torn, foreign or unreadable file, a digest that does not
match its snapshot) is a miss: the caller compiles, as before, and writes the
entry again. A hit never skips a check a changed source would fail.

The entry is a pickle. Why that is acceptable, and what guards it, is in
docs/compiled-cache.md: the file must be a regular file owned by this user,
not readable or writable by anyone else, in a folder only this user can write;
its bytes must match the sha256 in its header; and the unpickler resolves only
dataclasses of runner.compiler, so even a well-formed entry cannot name a
function to call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import io
import json
import os
import pickle
import re
import stat
import sys
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from runner._canonical import fingerprint
from runner._jsonin import loads
from runner._private import private_dirs

from ._discovery import PROJECT_DIR, Catalog, Origin
from ._model import HookRef, WorkflowDefinition

#: The first line of every entry; a new layout changes it (and misses old entries).
MAGIC = b"wfrun-compiled 1\n"
#: An entry larger than this is not read (a definition is at most a few MiB).
MAX_BYTES = 64 * 1024 * 1024
_PACKAGE = "runner.compiler."
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@lru_cache(maxsize=1)
def code_stamp() -> str:
    """What the compiled form depends on in wfrun itself: its version, the
    interpreter, and each compiler and built-in step module's size and mtime."""
    here = Path(__file__).resolve().parent
    # The package is loaded (this is its submodule); importing it by name would cross
    # the layers it re-exports.
    version = getattr(sys.modules.get("runner"), "__version__", None)
    parts: list[Any] = [version, sys.version, sys.implementation.cache_tag]
    # wfrun's own steps declare the `with:` schemas `call:` is checked against.
    steps = here.parent / "steps"
    for path in sorted([*here.glob("*.py"), *steps.glob("*.py"), here.parent / "_canonical.py"]):
        info = path.stat()
        parts.append([path.name, info.st_size, info.st_mtime_ns])
    return fingerprint(parts)


def catalog_stamp(catalog: Catalog) -> str:
    """The catalog's names and where each resolves: an include by name follows them."""
    rows = [[e.name, e.origin, str(e.path), e.shadowed_by] for e in catalog.entries]
    return fingerprint([catalog.kind, rows])


class _Unpickler(pickle.Unpickler):
    """Resolves the compiler's own dataclasses and nothing else (no function, no
    builtin a crafted entry could call)."""

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith(_PACKAGE) and _NAME.fullmatch(module[len(_PACKAGE):]) \
                and _NAME.fullmatch(name):
            try:  # a kind's module (fan-out, triggers...) loads with its first node
                found = getattr(importlib.import_module(module), name, None)
            except ImportError:
                found = None
            if isinstance(found, type) and dataclasses.is_dataclass(found):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a compiled entry")


class _Pickler(pickle.Pickler):
    """Notes each registered step a definition calls while writing it."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=5)
        self.steps: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is HookRef and obj.step:
            self.steps.add(obj.step)
        return NotImplemented


class DefinitionCache:
    """The compiled definitions of one catalog's workflows, kept in `folder`."""

    def __init__(self, folder: Path, catalog: Catalog, *, create: bool = True) -> None:
        self.folder = folder
        self.catalog = catalog
        #: Whether a save may create the state folder `folder` sits in (a command that
        #: writes the store anyway) or keeps nothing until something else made it.
        self.create = create
        self._catalog_stamp: str | None = None

    # -- reading ----------------------------------------------------------------
    def load(self, path: Path, origin: Origin | None) -> WorkflowDefinition | None:
        """The definition compiled from `path` when nothing it depends on changed;
        None otherwise (the caller compiles)."""
        try:
            return self._load(os.path.realpath(path), origin)
        except Exception:  # any damage an entry can carry is a miss, never a crash
            return None

    def _load(self, real: str, origin: Origin | None) -> WorkflowDefinition | None:
        data = self._read(self._entry(real, origin))
        if data is None:
            return None
        head, rest = data[:len(MAGIC) + 65], data[len(MAGIC) + 65:]
        if head[:len(MAGIC)] != MAGIC or head[-1:] != b"\n":
            return None
        if hashlib.sha256(rest).hexdigest().encode() != head[len(MAGIC):-1]:
            return None  # torn or altered
        meta_line, payload = rest.split(b"\n", 1)
        meta = loads(meta_line)
        if (meta.get("root") != real or meta.get("origin") != origin
                or meta.get("code") != code_stamp()
                or meta.get("catalog") != self._stamp_of_catalog()):
            return None
        for file, sha256 in meta["files"]:
            if _sha256_of(file) != sha256:
                return None
        channels = frozenset(meta["channels"])
        if channels and not self._still_configured(channels):
            return None
        definition = _Unpickler(io.BytesIO(payload)).load()
        if type(definition) is not WorkflowDefinition or not _whole(definition):
            return None
        if definition.digest != meta.get("digest") or \
                fingerprint(definition.snapshot()) != definition.digest:
            return None
        return definition

    def _read(self, entry: Path) -> bytes | None:
        """The entry's bytes when it is ours and private; None when absent."""
        try:
            folder = os.lstat(self.folder)
        except FileNotFoundError:
            return None
        if not _private_to_me(folder, stat.S_ISDIR):
            return None
        try:
            fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(file.fileno())
            if not _private_to_me(info, stat.S_ISREG) or info.st_size > MAX_BYTES:
                return None
            return file.read(MAX_BYTES + 1)

    def _still_configured(self, channels: frozenset[str]) -> bool:
        ask = self.catalog.channel_names
        known = ask() if ask is not None else None
        return not isinstance(known, frozenset) or channels <= known

    # -- writing ----------------------------------------------------------------
    def save(self, path: Path, origin: Origin | None, definition: WorkflowDefinition) -> None:
        """Keep a valid definition compiled from `path` (best effort: a folder that
        cannot be written only means the next process compiles again)."""
        with contextlib.suppress(Exception):  # the run goes on; the next one compiles
            self._save(os.path.realpath(path), origin, definition)

    def _save(self, real: str, origin: Origin | None, definition: WorkflowDefinition) -> None:
        files = self._files(definition)
        if files is None:
            return
        buffer = io.BytesIO()
        pickler = _Pickler(buffer)
        pickler.dump(definition)
        if not _steps_are_wfruns(pickler.steps):
            return
        meta = {"root": real, "origin": origin, "code": code_stamp(),
                "catalog": self._stamp_of_catalog(), "files": files,
                "channels": sorted(named_channels(definition.snapshot())),
                "digest": definition.digest}
        rest = json.dumps(meta).encode() + b"\n" + buffer.getvalue()
        data = MAGIC + hashlib.sha256(rest).hexdigest().encode() + b"\n" + rest
        if not self.create and not self.folder.parent.is_dir():
            return  # a project that never ran: a read like `list` leaves nothing behind
        private_dirs(self.folder)
        if not _private_to_me(os.lstat(self.folder), stat.S_ISDIR):
            return  # a folder someone else can write: keep nothing there
        entry = self._entry(real, origin)
        temp = entry.with_name(f".{entry.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(temp, entry)  # whole or not at all: a reader never sees half
        except BaseException:
            temp.unlink(missing_ok=True)
            raise

    def _files(self, definition: WorkflowDefinition) -> list[list[str]] | None:
        """(real path, sha256) of every source, or None when one cannot be found."""
        out = []
        for source in definition.sources:
            if source.kind == "file" and source.path:
                out.append([source.path, source.sha256])
                continue
            builtin = next((e for e in self.catalog.entries
                            if e.origin == "builtin" and e.name == source.name), None)
            if source.kind != "builtin" or builtin is None:
                return None
            out.append([os.path.realpath(builtin.path), source.sha256])
        return out if out else None

    # -- shared -------------------------------------------------------------------
    def _entry(self, real: str, origin: Origin | None) -> Path:
        key = hashlib.sha256(f"{origin}\0{real}".encode()).hexdigest()[:40]
        return self.folder / f"{key}.def"

    def _stamp_of_catalog(self) -> str:
        if self._catalog_stamp is None:
            self._catalog_stamp = catalog_stamp(self.catalog)
        return self._catalog_stamp


def _whole(root: object) -> bool:
    """Every dataclass in the tree has each of its fields (a damaged entry can name a
    field that is not there, which the digest, over the snapshot only, would miss)."""
    stack = [root]
    while stack:
        item = stack.pop()
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            values = []
            for f in dataclasses.fields(item):
                try:
                    values.append(getattr(item, f.name))
                except AttributeError:
                    return False
            stack.extend(values)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
    return True


def _private_to_me(info: os.stat_result, kind: Any) -> bool:
    """Of the expected kind, owned by this user, and no one else may read or write it."""
    return bool(kind(info.st_mode)) and info.st_uid == os.geteuid() \
        and not info.st_mode & 0o077


def _sha256_of(path: str) -> str | None:
    try:
        with open(path, "rb") as file:
            return hashlib.sha256(file.read()).hexdigest()
    except OSError:
        return None


def _steps_are_wfruns(steps: set[str]) -> bool:
    """Every registered step named is wfrun's own (its version is in the code stamp)."""
    if not steps:
        return True
    from ._registry import registered_steps

    found = registered_steps()
    for name in steps:
        ep = found.get(name)
        dist = getattr(ep, "dist", None) if ep is not None else None
        if dist is None or (dist.name or "").lower() != "wfrun":
            return False
    return True


def named_channels(snapshot: Any) -> frozenset[str]:
    """Every channel a definition's `notify` nodes name, bodies of fan-out included."""
    found: set[str] = set()
    stack = [snapshot]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            channels = item.get("channels")
            if "message" in item and isinstance(channels, list):
                found.update(c for c in channels if isinstance(c, str))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return frozenset(found)


#: The folder beside the store (`.wfrun/state/`) that keeps them.
FOLDER = "compiled"


def project_cache(catalog: Catalog) -> DefinitionCache | None:
    """The kept definitions of a project's catalog for a command that only reads (None
    outside a project): it keeps nothing in a project that has no state folder yet."""
    if catalog.project_root is None:
        return None
    return DefinitionCache(catalog.project_root / PROJECT_DIR / "state" / FOLDER, catalog,
                           create=False)
