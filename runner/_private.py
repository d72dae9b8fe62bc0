"""Private folders: 0700 whatever the umask (DESIGN §5; issue 10).

`Path.mkdir(mode=0o700, parents=True)` gives every parent it creates
`0o777 & ~umask`, which is 0777 under umask 000, so a `WFRUN_HOME` or a
`.wfrun/state` made on the way to a store or a bundle was world-writable. Every
folder wfrun creates for itself goes through `private_dirs`, which creates each
missing folder 0700 and sets the mode explicitly (the umask applies to `mkdir`'s
mode too); folders that already exist are left as their owner made them.

This module imports only the standard library, so every layer, the store
included, may use it.
"""

from __future__ import annotations

import os
from pathlib import Path

DIR_MODE = 0o700


def private_dirs(folder: Path) -> None:
    """Create `folder` and each missing parent with mode 0700, exactly."""
    missing: list[Path] = []
    candidate = folder
    while not candidate.is_dir():
        missing.append(candidate)
        if candidate.parent == candidate:
            break
        candidate = candidate.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, DIR_MODE)
        except FileExistsError:
            if path.is_dir():
                continue  # another process made it first: its mode is its own
            raise
        os.chmod(path, DIR_MODE)
