"""How an agent client should start wfrun, and the check that it does.

The command: `wfrun` by name when the `wfrun` found on PATH is this installation
(a pipx or uv tool install, an activated or PATH-listed virtual environment). A
name survives what an absolute path does not: the environment moved or rebuilt
elsewhere, the config committed and used by a teammate whose wfrun lives in another
folder. When PATH does not lead here, the absolute interpreter with `-P -m runner`:
unlike the console script, whose `#!` line names the interpreter, `bin/python` of a
virtual environment keeps working when the scripts' paths go stale; and the
integrate command says to run it again after a move.

`check_starts` runs the configured command once, as the client will, and returns
what went wrong in one line (None when it answered).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from runner import _jsonin as jsonin

#: Only bounds a server that never answers; a healthy one answers in well under it.
CHECK_TIMEOUT = 60.0


def wfrun_command() -> list[str]:
    """The argv that starts this installation's wfrun (see the module doc)."""
    ours = Path(sys.executable).parent / "wfrun"
    found = shutil.which("wfrun")
    if found and ours.is_file() and os.path.realpath(found) == os.path.realpath(ours):
        return ["wfrun"]
    # -P: no cwd on sys.path, so a project's own `runner/` folder cannot stand in for
    # wfrun (Claude Code starts the server in the project).
    return [sys.executable, "-P", "-m", "runner"]


def on_path(command: list[str]) -> bool:
    return command == ["wfrun"]


def check_starts(argv: list[str], cwd: Path, request: dict[str, Any],
                 env: dict[str, str] | None = None) -> str | None:
    """Start `argv` in `cwd`, send one JSON-RPC `request` line, read one reply line.
    None when a reply without an error came back; else one line saying why not."""
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        return f"`{' '.join(argv)}` cannot run: {exc.strerror or exc}"
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    stdout = proc.stdout
    reply: list[bytes] = []

    def read() -> None:
        reply.append(stdout.readline())

    reader = threading.Thread(target=read, daemon=True)
    try:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, **request}).encode() + b"\n")
        proc.stdin.flush()
        reader.start()
        reader.join(CHECK_TIMEOUT)
    except BrokenPipeError:
        pass  # it exited before reading: its stderr says why
    finally:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        try:
            proc.wait(CHECK_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    err = proc.stderr.read().decode(errors="replace").strip().splitlines()
    proc.stdout.close()
    proc.stderr.close()
    line = reply[0] if reply else b""
    try:
        doc = jsonin.loads(line) if line.strip() else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "result" in doc:
        return None
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        return f"it answered an error: {doc['error'].get('message')}"
    why = err[-1] if err else (f"it exited with code {proc.returncode}" if proc.returncode
                               else f"no answer within {CHECK_TIMEOUT:.0f} s")
    return " ".join(why.split())
