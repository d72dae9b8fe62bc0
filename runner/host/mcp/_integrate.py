"""`wfrun integrate claude-code`: `.mcp.json`, and the hooks and the tool's permission
in `.claude/settings.json`.

Both files are the user's: wfrun merges its own entries in and never touches
anything else — other MCP servers, other hooks, other settings stay as they were.
Running it again changes nothing (idempotent); an entry wfrun wrote earlier with
another command (a moved venv) is replaced, recognized by its `wfrun` marker
rather than by position. A file that is not a JSON object is refused with a
one-line error instead of being overwritten. Writes are atomic (temp file, fsync,
rename) and keep the file's mode.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner import _jsonin as jsonin
from runner.errors import InputError
from runner.integrations._command import wfrun_command

SERVER_KEY = "wfrun"  # the model sees the tool as mcp__wfrun__workflow
TOOL = f"mcp__{SERVER_KEY}__workflow"
SERVER_ARGS = ["mcp", "--client", "claude-code"]  # cli/__init__.py's fast path: exactly this
HOOK_EVENTS = ("SessionStart", "UserPromptSubmit", "Stop")
HOOK_TIMEOUT = {"SessionStart": 60, "UserPromptSubmit": 30, "Stop": 120}  # seconds
MARK = "hook claude-code"  # in the command of every hook wfrun wrote


@dataclass(frozen=True)
class Integrated:
    mcp_json: Path
    settings: Path
    changed: list[Path]
    command: list[str]  # how both files start wfrun (runner/integrations/_command.py)

    @property
    def server(self) -> list[str]:
        return [*self.command, *SERVER_ARGS]


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        doc = jsonin.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path} is not valid JSON ({exc}); fix or move it, then run "
                         "`wfrun integrate claude-code` again") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path} must hold a JSON object; fix or move it, then run "
                         "`wfrun integrate claude-code` again")
    return doc


def _section(doc: dict[str, Any], key: str, kind: type, path: Path) -> Any:
    value = doc.setdefault(key, kind())
    if not isinstance(value, kind):
        raise InputError(f"{path}: '{key}' must be a JSON {'object' if kind is dict else 'array'}"
                         "; fix it, then run `wfrun integrate claude-code` again")
    return value


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(doc, indent=2) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def merge_mcp(doc: dict[str, Any], command: list[str], path: Path) -> None:
    servers = _section(doc, "mcpServers", dict, path)
    servers[SERVER_KEY] = {"type": "stdio", "command": command[0],
                           "args": [*command[1:], *SERVER_ARGS]}


def _is_ours(hook: Any) -> bool:
    return isinstance(hook, dict) and MARK in str(hook.get("command", ""))


def merge_hooks(doc: dict[str, Any], command: list[str], path: Path) -> None:
    hooks = _section(doc, "hooks", dict, path)
    line = " ".join(shlex.quote(part) for part in command) + " hook claude-code"
    for event in HOOK_EVENTS:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise InputError(f"{path}: hooks.{event} must be a JSON array; fix it, then run "
                             "`wfrun integrate claude-code` again")
        ours = {"type": "command", "command": line, "timeout": HOOK_TIMEOUT[event]}
        placed = False
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list):
                continue
            for i, hook in enumerate(inner):
                if _is_ours(hook):
                    if placed:
                        inner[i] = None  # a duplicate of ours from an older run
                    else:
                        inner[i], placed = ours, True
            group["hooks"] = [h for h in inner if h is not None]
        if not placed:
            groups.append({"hooks": [ours]})
        hooks[event] = [g for g in groups if not (isinstance(g, dict) and g.get("hooks") == [])]
    # Project MCP servers need the user's approval; running integrate is that approval.
    enabled = _section(doc, "enabledMcpjsonServers", list, path)
    if SERVER_KEY not in enabled:
        enabled.append(SERVER_KEY)
    # And the tool's: without it `claude -p` denies every call and an interactive
    # Claude asks on each one.
    allow = _section(_section(doc, "permissions", dict, path), "allow", list, path)
    if TOOL not in allow:
        allow.append(TOOL)


def integrate(root: Path, command: list[str] | None = None) -> Integrated:
    command = command or wfrun_command()
    mcp_path = root / ".mcp.json"
    settings_path = root / ".claude" / "settings.json"
    changed = []
    for path, merge in ((mcp_path, merge_mcp), (settings_path, merge_hooks)):
        doc = _load(path)
        before = json.dumps(doc, sort_keys=True)
        merge(doc, command, path)
        if json.dumps(doc, sort_keys=True) != before or not path.exists():
            _write(path, doc)
            changed.append(path)
    return Integrated(mcp_path, settings_path, changed, command)
