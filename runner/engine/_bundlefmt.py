"""The run bundle's format (DESIGN §4): its file names and schema, a run id's length,
trace lines (canonical JSON, one event per line, `seq` 1, 2, 3...), how a torn trace is
read and cut back, and what makes a folder's bundle a started run (`first_event`);
shared by the folder space (`_space`, `_bundle`), its readers (`_bundleread`) and the
database space (`_dbbundle`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner._canonical import canonical_json
from runner.errors import ClaimLost, OperationFailed, read_fault

from ._rows import LaunchStep

MANIFEST = "manifest.json"
WORKFLOW = "workflow.json"
STATE = "state.json"
TRACE = "trace.jsonl"
ARTIFACTS = "artifacts"
LOGS = "logs"  # live logs of running attempts (engine/_livelog.py), not a record
SNAPSHOTS = ".snapshots"  # runs/.snapshots/: one copy of each workflow snapshot (write_snapshot)
LOCK = ".lock"  # the lock file of bundles written before the folder itself was locked
# Statuses whose bundle is sealed: the terminal ones, and `waiting` (an answer continues
# a waiting run in a new bundle).
ENDED = frozenset({"completed", "failed", "timed_out", "cancelled", "waiting"})

# The folder of continuation markers (`<runs_dir>/.continued/<parent run id>` holds the
# id of the run that continued it); written by `Engine.prepare_answer`.
CONTINUED = ".continued"
# A folder name holds at most 255 bytes on every file system wfrun runs on; a longer
# id names no run (and would make the OS raise ENAMETOOLONG instead of "not found").
MAX_RUN_ID_BYTES = 255
BUNDLE_SCHEMA = "wfrun.run-bundle.v1"
#: Where a folder bundle's files are, as every manifest names them.
PATHS = {"workflow": WORKFLOW, "state": STATE, "trace": TRACE, "artifacts": f"{ARTIFACTS}/"}
#: The first manifest's fields that the trace does not hold: `run_started` carries
#: them under "manifest" where the first manifest is not fsync'd (a folder's).
MANIFEST_FIELDS = ("workflow_ref", "title", "source", "sources", "started_at")
LEFTOVER = ".removing-"  # the dot-name prefix of a folder bundle being removed

Fence = Callable[[], bool]


def always(_: None = None) -> bool:
    return True


def dumps(value: Any) -> str:
    """One trace line or state file: canonical JSON (`runner._canonical`)."""
    return canonical_json(value)


def joined(run_id: str, step: LaunchStep) -> None:
    """Make a launch transition whose bundle write is done already (a folder's: no
    write rides it, so the store commits it as it would without a bundle); refused,
    the run is let go as a fenced database write is (`ClaimLost`)."""
    word = step.run(None)
    if word == "unavailable":
        raise ClaimLost(f"cannot reach the store holding run '{run_id}'; letting go of it "
                        "(a host that reaches it resumes the run)")
    if word != "ok":
        raise ClaimLost(f"lost the claim on run '{run_id}'; another runner owns it")


@dataclass(frozen=True)
class TraceRead:
    events: list[dict[str, Any]]
    valid_bytes: int  # length of the longest contiguous valid prefix
    torn: bool


def parse_trace(data: bytes, first_seq: int = 1) -> TraceRead:
    """Events of the longest valid prefix: whole lines, parseable, seq 1, 2, 3...
    (`first_seq` for a tail read from the middle of the file)."""
    events: list[dict[str, Any]] = []
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            break  # a line without its newline is a torn write
        try:
            event = json.loads(data[pos:end])
        except ValueError:
            break
        if not isinstance(event, dict) or event.get("seq") != len(events) + first_seq:
            break
        events.append(event)
        pos = end + 1
    return TraceRead(events, pos, pos != len(data))


def repair_trace(path: str) -> int:
    """Truncate a torn or corrupt tail of the trace at `path`; returns the bytes dropped."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return 0
    parsed = parse_trace(data)
    if not parsed.torn:
        return 0
    with open(path, "r+b") as fh:
        fh.truncate(parsed.valid_bytes)
        fh.flush()
        os.fsync(fh.fileno())
    return len(data) - parsed.valid_bytes


def truncate_trace(path: str, seq: int) -> None:
    """Drop the events after `seq` from the trace at `path`."""
    with open(path, "rb") as fh:
        data = fh.read()
    pos = 0
    for _ in range(seq):
        pos = data.index(b"\n", pos) + 1
    if pos < len(data):
        with open(path, "r+b") as fh:
            fh.truncate(pos)
            os.fsync(fh.fileno())


def first_event(root: str | Path, run_id: str) -> dict[str, Any] | None:
    """The trace's first line when it is a whole `run_started` (seq 1, always fsync'd),
    else None: a folder bundle has started (its run's input is durable) exactly when
    this is an event. Reads one line, not the trace."""
    try:
        with open(os.path.join(root, TRACE), "rb") as fh:
            line = fh.readline()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        # An unreadable runs folder is the machine's (a launch waits it out), not
        # the run's: a MachineFault, as a refused write is.
        raise read_fault(exc, f"the trace of run '{run_id}'") or OperationFailed(
            f"cannot read the trace of run '{run_id}': {exc.strerror}") from None
    if not line.endswith(b"\n"):
        return None  # empty, or the first write was torn
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if isinstance(event, dict) and event.get("seq") == 1 and event.get("type") == "run_started":
        return event
    return None
