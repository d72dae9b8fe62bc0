"""Source drift of a queued launch: which recorded file no longer hashes as it did.

A launch records, when it is queued, the sha256 of every file its definition was
compiled from. `source_drift` re-hashes those files; `wfrun status` and `wfrun why`
call it directly. Apart from watch.py (the live watcher, `SourceWatch`) so those
views do not import watchdog (issue 15, cold start). The digest comparison at
activation stays the authority.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

DriftKind = Literal["edited", "removed", "unreadable"]
_DETAIL: dict[str, str] = {"edited": "edited since it was queued", "removed": "removed",
                           "unreadable": "unreadable"}


class Sourced(Protocol):
    """What drift is computed from: a launch row (`LaunchRecord`), or one entry per
    distinct source identity of many queued launches (`wfrun host`'s watch)."""

    @property
    def run_id(self) -> str: ...

    @property
    def source(self) -> Mapping[str, object]: ...


@dataclass(frozen=True, slots=True)
class Drift:
    """One recorded source file of a launch that no longer hashes as it did."""

    run_id: str
    path: str  # the real path recorded when the launch was queued
    kind: DriftKind
    expected: str  # the sha256 recorded then
    actual: str | None  # the sha256 now (None: removed or unreadable)

    @property
    def detail(self) -> str:
        return _DETAIL[self.kind]

    def display(self, root: Path | None) -> str:
        """The path relative to the project root when it lies inside it."""
        return display_path(self.path, root)

    def to_json(self, root: Path | None) -> dict[str, Any]:
        return {"changed": True, "file": self.display(root), "detail": self.detail}


def display_path(path: str, root: Path | None) -> str:
    if root is None:
        return path
    for base in {str(root), os.path.realpath(root)}:
        try:
            rel = os.path.relpath(path, base)
        except ValueError:
            continue
        if rel != ".." and not rel.startswith(".." + os.sep):
            return rel
    return path


def recorded_files(record: Sourced) -> list[tuple[str, str]]:
    """(path, sha256) of every file source a launch was queued with, the workflow's
    own file first. Built-in sources have no file and are skipped."""
    identity = record.source or {}
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    more = identity.get("sources")
    candidates = [identity.get("source"), *(more if isinstance(more, list) else [])]
    for src in candidates:
        if not isinstance(src, dict) or src.get("kind") != "file":
            continue
        path, sha = src.get("path"), src.get("sha256")
        if isinstance(path, str) and path and isinstance(sha, str) and path not in seen:
            seen.add(path)
            out.append((path, sha))
    return out


def file_sha256(path: str) -> str:
    """The sha256 of the file's bytes (raises OSError), as the compile cache hashes."""
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def source_drift(record: Sourced) -> Drift | None:
    """The first recorded source file of `record` that was edited, removed or became
    unreadable since it was queued; None when every file still hashes the same."""
    for path, expected in recorded_files(record):
        try:
            actual = file_sha256(path)
        except (FileNotFoundError, NotADirectoryError):
            return Drift(record.run_id, path, "removed", expected, None)
        except OSError:
            return Drift(record.run_id, path, "unreadable", expected, None)
        if actual != expected:
            return Drift(record.run_id, path, "edited", expected, actual)
    return None


__all__ = ["Drift", "DriftKind", "Sourced", "display_path", "file_sha256", "recorded_files",
           "source_drift"]
