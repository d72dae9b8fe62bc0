"""The Pi extension (`index.ts`, loaded by Pi ≥ 1.6) and its installer.

The extension is a thin adapter: it spawns `wfrun bridge` in the session's
project and maps Pi's events and APIs onto the bridge protocol (docs/hosts.md).
`install` copies it into a project's `.pi/extensions/wfrun/` with a
`wfrun.json` naming the wfrun that installed it, so Pi starts the same wfrun
whatever its PATH holds.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from runner.integrations._files import write_if_changed

EXTENSION = Path(__file__).with_name("index.ts")
INSTALL_DIR = Path(".pi") / "extensions" / "wfrun"
MIN_PI = "1.6.0"  # the first Pi with `agent_settled` (index.ts refuses older ones)


@dataclass(frozen=True)
class Installed:
    folder: Path
    changed: tuple[Path, ...]  # the files written (empty: already up to date)


def wfrun_command() -> list[str]:
    """The argv that runs this wfrun: its console script beside the interpreter, else
    the one on PATH, else the interpreter importing the CLI."""
    script = Path(sys.executable).with_name("wfrun")
    if script.is_file():
        return [str(script)]
    found = shutil.which("wfrun")
    if found:
        return [str(Path(found).resolve())]
    return [sys.executable, "-c", "from runner.cli import main; main()"]


def install(project_root: Path) -> Installed:
    folder = project_root / INSTALL_DIR
    config = {"command": wfrun_command(),
              "note": "written by `wfrun integrate pi`; re-run it after moving wfrun"}
    files = {folder / "index.ts": EXTENSION.read_bytes(),
             folder / "wfrun.json": (json.dumps(config, indent=2) + "\n").encode()}
    changed = tuple(path for path, data in files.items() if write_if_changed(path, data))
    return Installed(folder, changed)
