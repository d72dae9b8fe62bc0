"""Reading a folder bundle without opening it for writing: its manifest (rebuilt from the
trace where a power loss or a rewrite in place left it missing or torn), its trace and
its artifacts (its first event, the question every claim asks: `_bundlefmt.first_event`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.errors import NotFoundError, OperationFailed

from ._bundlefmt import (
    ARTIFACTS,
    BUNDLE_SCHEMA,
    ENDED,
    MANIFEST,
    MANIFEST_FIELDS,
    PATHS,
    TRACE,
    TraceRead,
    dumps,
    first_event,
    parse_trace,
)
from ._state import fold


def read_manifest(root: Path, run_id: str) -> dict[str, Any]:
    """A bundle's manifest. Missing, or torn as only its writer or a power loss leaves
    it, in a started bundle: rebuilt from the trace (`rebuild_manifest`). Else
    NotFoundError / OperationFailed as `read_json`: one damaged by hand stays damaged."""
    path = root / MANIFEST
    try:
        return read_json(path)
    except (NotFoundError, OperationFailed):
        rebuilt = rebuild_manifest(root, run_id)
        if rebuilt is None:
            raise
        try:
            data: bytes | None = path.read_bytes()
        except FileNotFoundError:
            data = None
        if data is not None and not _torn(data, rebuilt):
            raise
        return rebuilt


def _torn(data: bytes, manifest: dict[str, Any]) -> bool:
    """`data` is what a writer of `manifest` leaves when cut short: empty or zeroed (a
    power loss), or one that begins as every manifest of this run does (canonical
    JSON: `{"definition_digest":"<its digest>"`), read while rewritten in place."""
    data = data.rstrip(b"\0")
    head = dumps({"definition_digest": manifest["definition_digest"]})[:-1].encode()
    return head.startswith(data) or data.startswith(head)


def rebuild_manifest(root: Path, run_id: str) -> dict[str, Any] | None:
    """The manifest of a started bundle as its trace says it: the first one from
    `run_started`, with the ending the final one records. Read where the file is
    missing or torn: a power loss emptied the unsynced first one, or a reader met the
    final one while it was rewritten in place (after the ending is in the trace).
    None: not started, or a trace written without it (rows)."""
    first = first_event(root, run_id)
    manifest = None if first is None else manifest_from_trace(run_id, first)
    if manifest is not None:
        state = fold(run_id, read_trace(root).events)
        if state.status in ENDED:
            manifest.update(status=state.status, finished_at=state.finished_at)
    return manifest


def manifest_from_trace(run_id: str, started: dict[str, Any]) -> dict[str, Any] | None:
    """The first manifest as the run's `run_started` event records it (None: an event
    written without it, by a space whose first manifest is durable)."""
    payload = started.get("payload") or {}
    kept = payload.get("manifest")
    if not isinstance(kept, dict) or any(k not in kept for k in MANIFEST_FIELDS):
        return None
    return {"schema": BUNDLE_SCHEMA, "run_id": run_id, "workflow": payload.get("workflow"),
            "workflow_ref": kept["workflow_ref"], "title": kept["title"],
            "source": kept["source"], "sources": kept["sources"],
            "definition_digest": payload.get("digest"),
            "parent_run_id": payload.get("parent_run_id"),
            "started_at": kept["started_at"], "finished_at": None, "status": "running",
            "trace_schema": started.get("schema"), "paths": dict(PATHS)}


def read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise NotFoundError(f"{path} does not exist") from None
    except ValueError:
        raise OperationFailed(f"{path} is not valid JSON") from None
    if not isinstance(value, dict):
        raise OperationFailed(f"{path} does not hold a JSON object")
    return value


def read_trace(root: Path) -> TraceRead:
    try:
        data = (root / TRACE).read_bytes()
    except FileNotFoundError:
        return TraceRead([], 0, False)
    return parse_trace(data)


def read_artifact(root: Path, ref: dict[str, Any]) -> bytes:
    rel = str(ref.get("path", ""))
    if not rel.startswith(f"{ARTIFACTS}/sha256-") or "/" in rel[len(ARTIFACTS) + 1:]:
        raise OperationFailed(f"invalid artifact reference {rel!r}")
    return (root / rel).read_bytes()
