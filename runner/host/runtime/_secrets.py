"""`--secret NAME=VALUE` and `--secret NAME=@FILE`: secrets given to this process.

The values live in this process's memory only (runner/engine/_secrets.py); they are
never queued, so they reach only runs this process executes (`wfrun run`,
`resume`, `answer`). A detached run's secrets come from `wfrun host`'s environment.
"""

from __future__ import annotations

import re
from pathlib import Path

from runner.errors import InputError

MAX_SECRET_FILE = 1_048_576  # a key file, not a data set
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_secrets(pairs: tuple[str, ...]) -> dict[str, str]:
    """NAME=VALUE / NAME=@FILE pairs as a mapping; InputError names the bad one.

    Error messages never echo a value, only the name and (for @FILE) the path.
    """
    found: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not _NAME.match(name):
            shown = name if _NAME.match(name) else "NAME"
            raise InputError(f"--secret needs NAME=VALUE or NAME=@FILE (e.g. --secret "
                             f"{shown}=@key.txt); NAME is an environment variable name")
        if value.startswith("@"):
            value = _read(name, value[1:])
        if not value:
            raise InputError(f"--secret {name} is empty; give its value or @FILE")
        found[name] = value
    return found


def _read(name: str, path_text: str) -> str:
    path = Path(path_text).expanduser()
    try:
        size = path.stat().st_size
        if size > MAX_SECRET_FILE:
            raise InputError(f"--secret {name}=@{path_text}: the file is over 1 MiB; a secret "
                             "file holds one value")
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"--secret {name}=@{path_text}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"--secret {name}=@{path_text}: that is a folder, not a file") \
            from None
    except OSError as exc:
        raise InputError(f"--secret {name}=@{path_text}: cannot read it "
                         f"({exc.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"--secret {name}=@{path_text}: the file is not UTF-8 text") from None
    # One trailing line break is the file's, not the secret's (`echo KEY > file`).
    return text[:-2] if text.endswith("\r\n") else text.removesuffix("\n")
