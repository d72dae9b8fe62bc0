"""Writing integration files into a project: atomically, and only when they change."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from runner.errors import InputError


def write_if_changed(path: Path, data: bytes, mode: int = 0o644) -> bool:
    """Write `data` to `path` through a temporary file and a rename, so a reader (or a
    crash) never sees half a file; return False when the file already held `data`."""
    try:
        if path.is_file() and path.read_bytes() == data:
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}; check that the folder "
                         "is writable") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
    return True
