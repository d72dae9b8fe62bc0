"""Reading definition files safely: size limit, UTF-8, links, permissions.

Every failure becomes a `Diagnostic`; nothing here raises for a bad file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ._diagnostics import Diagnostic

# Generous for hand-written YAML (a generated 2,000-node workflow is ~150 KiB; the
# biggest bench file ~0.5 MiB), small enough that any file at the cap validates in
# about a second: a workflow this big is a mistake (a data file, generated junk).
MAX_DEFINITION_BYTES = 1024 * 1024


@dataclass(frozen=True)
class SourceText:
    path: Path
    text: str
    sha256: str


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_source(path: Path, display: str | None = None) -> SourceText | Diagnostic:
    """Read one definition file as UTF-8, or explain in one line why not."""
    shown = display or str(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return Diagnostic(shown, "file-not-found", "file does not exist")
    except RuntimeError:  # pragma: no cover - older Pythons report loops this way
        return Diagnostic(shown, "symlink-loop", "symbolic link loop")
    except OSError as exc:
        return _os_error(shown, exc)
    if not path.is_file():
        return Diagnostic(shown, "not-a-file", "not a regular file")
    try:
        with path.open("rb") as f:  # never more than the cap and one byte, whatever stat said
            data = f.read(MAX_DEFINITION_BYTES + 1)
            if len(data) > MAX_DEFINITION_BYTES:
                size = max(size, len(data), f.seek(0, 2))
    except OSError as exc:
        return _os_error(shown, exc)
    if len(data) > MAX_DEFINITION_BYTES:
        return too_large(shown, data, size)
    return decode_source(path, data, shown)


def too_large(shown: str, data: bytes, size: int) -> Diagnostic:
    """One diagnostic, placed where the cap is passed; nothing of the file is parsed."""
    before = data[:MAX_DEFINITION_BYTES]
    line = before.count(b"\n") + 1
    column = len(before[before.rfind(b"\n") + 1:].decode("utf-8", "replace")) + 1
    return Diagnostic(
        shown, "file-too-large",
        f"file is {size:,} bytes; definitions are limited to {MAX_DEFINITION_BYTES:,} bytes "
        "(1 MiB), passed here", line=line, column=column,
        hint="split the workflow with includes, or is this not a workflow?")


def decode_source(path: Path, data: bytes, shown: str) -> SourceText | Diagnostic:
    if len(data) > MAX_DEFINITION_BYTES:
        return too_large(shown, data, len(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        # Columns count characters, like every other diagnostic; the bytes
        # before the first bad one are valid UTF-8.
        column = len(before[before.rfind(b"\n") + 1:].decode("utf-8")) + 1
        return Diagnostic(
            shown,
            "invalid-utf8",
            f"invalid UTF-8 byte 0x{data[exc.start]:02x}; save the file as UTF-8",
            line=line,
            column=column,
        )
    if text.startswith("\ufeff"):
        text = text[1:]
    return SourceText(path, text, sha256_hex(data))


def _os_error(shown: str, exc: OSError) -> Diagnostic:
    import errno

    if exc.errno == errno.ELOOP:
        return Diagnostic(shown, "symlink-loop", "symbolic link loop; fix or remove the link")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return Diagnostic(
            shown, "unreadable-file", "permission denied; make the file readable"
        )
    if exc.errno == errno.ENOENT:
        return Diagnostic(shown, "file-not-found", "file does not exist")
    return Diagnostic(shown, "unreadable-file", f"cannot read file: {exc.strerror}")
