"""Reading run bundles from outside the engine (DESIGN §4).

Other layers (views, launch, hosts, controllers) read bundles only through
`RunReader`; they never open bundle files themselves and never write, delete or
re-fence them. The reader takes no lock and writes nothing, so it can look at a
run that another process is executing: the state is re-folded from the valid
prefix of the trace (the truth), never taken from `state.json`, which may lag.

A run id that could name a path outside `runs_dir` ('/', a leading '.', empty)
is an `InputError` where the caller asked for a run's contents; the yes/no
questions (`exists`, `started`, `status`, `continued_by`) answer no for it.

With `rows` (the store's database, engine/rows.py) the same questions are answered
from the bundle rows; `runs_dir` then holds only the live logs of attempts running
on this host (a live log of another host's run is not visible here).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from runner.errors import InputError, NotFoundError, OperationFailed, read_fault

from . import bundle as _bundle
from . import dbbundle as _db
from .artifacts import has_artifacts, internalize
from .bundle import LOGS, MANIFEST, TRACE, WORKFLOW, TraceRead, parse_trace
from .livelog import live_log_name
from .rows import BundleRows
from .space import started_row
from .state import RunState, fold

# The folder of continuation markers (`<runs_dir>/.continued/<parent run id>` holds the
# id of the run that continued it); written by `Engine.prepare_answer`.
CONTINUED = ".continued"


# A folder name holds at most 255 bytes on every file system wfrun runs on; a longer
# id names no run (and would make the OS raise ENAMETOOLONG instead of "not found").
MAX_RUN_ID_BYTES = 255


def valid_run_id(run_id: str) -> bool:
    """A run id names one folder directly under `runs_dir`, never a dot-entry."""
    if not run_id or "/" in run_id or "\0" in run_id or run_id.startswith("."):
        return False
    try:
        return len(run_id.encode()) <= MAX_RUN_ID_BYTES
    except UnicodeEncodeError:  # a lone surrogate from a hostile URL
        return False


class RunReader:
    """Read-only access to the run bundles under `runs_dir`."""

    def __init__(self, runs_dir: Path, rows: BundleRows | None = None) -> None:
        self.runs_dir = runs_dir
        self.rows = rows

    def __repr__(self) -> str:
        if self.rows is not None:
            return f"RunReader({str(self.runs_dir)!r}, rows={self.rows!r})"
        return f"RunReader({str(self.runs_dir)!r})"

    # -- paths ------------------------------------------------------------------------
    def _root(self, run_id: str) -> Path:
        if not valid_run_id(run_id):
            raise InputError(f"'{run_id}' is not a run id")
        return self.runs_dir / run_id

    def _existing(self, run_id: str) -> Path:
        root = self._root(run_id)
        if self.rows is not None:
            if not self.rows.bundle_exists(run_id):
                raise NotFoundError(f"no run '{run_id}'; `wfrun runs` lists runs")
            return root
        if not root.is_dir():
            raise NotFoundError(f"no run '{run_id}'; `wfrun runs` lists runs")
        return root

    # -- yes/no questions ---------------------------------------------------------------
    def exists(self, run_id: str) -> bool:
        """The bundle folder exists, even half-made (no manifest or no trace yet)."""
        if self.rows is not None:
            return valid_run_id(run_id) and self.rows.bundle_exists(run_id)
        return valid_run_id(run_id) and (self.runs_dir / run_id).is_dir()

    def started(self, run_id: str) -> bool:
        """The trace holds its `run_started` event (always the first one, fsync'd)."""
        if not valid_run_id(run_id):
            return False
        if self.rows is not None:
            return started_row(self.rows.first_event(run_id))
        try:
            with open(self.runs_dir / run_id / TRACE, "rb") as fh:
                line = fh.readline()
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            # An unreadable runs folder is the machine's (a launch waits it out), not
            # the run's: a MachineFault, as a refused write is.
            raise read_fault(exc, f"the trace of run '{run_id}'") or OperationFailed(
                f"cannot read the trace of run '{run_id}': {exc.strerror}") from None
        if not line.endswith(b"\n"):
            return False  # empty, or the first write was torn
        try:
            event = json.loads(line)
        except ValueError:
            return False
        return isinstance(event, dict) and event.get("seq") == 1 \
            and event.get("type") == "run_started"

    def status(self, run_id: str) -> str | None:
        """The run status folded from the trace; None without a bundle or a `run_started`."""
        if not self.exists(run_id):
            return None
        events = self.trace(run_id)
        if not events or events[0].get("type") != "run_started":
            return None
        return fold(run_id, events).status

    def continued_by(self, run_id: str) -> str | None:
        """The run that continued this waiting run (`wfrun answer`), None if none did.

        The marker is created before the continuation's bundle and filled in right after;
        while it is still empty (or if the answering process died in between), this is
        None though `answered` is already True.
        """
        if not valid_run_id(run_id):
            return None
        if self.rows is not None:
            child = self.rows.continued_by(run_id)
            return child if child and valid_run_id(child) else None
        try:
            text = (self.runs_dir / CONTINUED / run_id).read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise OperationFailed(f"cannot read the continuation marker of run '{run_id}': "
                                  f"{exc.strerror}") from None
        return text if valid_run_id(text) else None

    def answered(self, run_id: str) -> bool:
        """A continuation of this run was begun (its marker exists): it continues once."""
        if self.rows is not None:
            return valid_run_id(run_id) and self.rows.continued_by(run_id) is not None
        return valid_run_id(run_id) and (self.runs_dir / CONTINUED / run_id).exists()

    # -- contents ---------------------------------------------------------------------
    def manifest(self, run_id: str) -> dict[str, Any]:
        if self.rows is not None:
            return self._document(run_id, "manifest", "no run '{run_id}'; `wfrun runs` "
                                  "lists runs")
        path = self._root(run_id) / MANIFEST
        if not path.is_file():
            raise NotFoundError(f"no run '{run_id}'; `wfrun runs` lists runs")
        try:
            return _bundle.read_json(path)
        except NotFoundError:  # removed between the check and the read
            raise NotFoundError(f"no run '{run_id}'; `wfrun runs` lists runs") from None
        except OperationFailed:
            raise OperationFailed(f"run '{run_id}' has a damaged manifest") from None
        except OSError as exc:
            raise OperationFailed(f"cannot read the manifest of run '{run_id}': "
                                  f"{exc.strerror}") from None

    def read_trace(self, run_id: str) -> TraceRead:
        """The valid prefix of the trace, its length in bytes and whether a tail is torn.

        An existing bundle without a trace (half-made) has no events.
        """
        root = self._existing(run_id)
        if self.rows is not None:
            return _db.read_trace(self.rows, run_id)
        try:
            return _bundle.read_trace(root)
        except OSError as exc:
            raise OperationFailed(f"cannot read the trace of run '{run_id}': "
                                  f"{exc.strerror}") from None

    def trace_tail(self, run_id: str, offset: int, next_seq: int) -> TraceRead:
        """The whole, valid events written after byte `offset` (which ends event
        `next_seq - 1`); `valid_bytes` is the offset to pass next time. Reads only
        the new bytes, so a live view can follow a long trace cheaply."""
        root = self._existing(run_id)
        if self.rows is not None:
            # Rows, not bytes: the offset grows by each event's text, as a file's would.
            read = _db.parse_events(self.rows.read_events(run_id, next_seq - 1), next_seq)
            return TraceRead(read.events, offset + read.valid_bytes, read.torn)
        try:
            with open(root / TRACE, "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except FileNotFoundError:
            return TraceRead([], offset, False)
        except OSError as exc:
            raise OperationFailed(f"cannot read the trace of run '{run_id}': "
                                  f"{exc.strerror}") from None
        read = parse_trace(data, next_seq)
        return TraceRead(read.events, offset + read.valid_bytes, read.torn)

    def workflow(self, run_id: str) -> dict[str, Any]:
        """The definition snapshot the run was started from (`workflow.json`)."""
        if self.rows is not None:
            return self._document(run_id, "workflow", "run '{run_id}' has no workflow "
                                  "snapshot")
        path = self._root(run_id) / WORKFLOW
        try:
            return _bundle.read_json(path)
        except NotFoundError:
            raise NotFoundError(f"run '{run_id}' has no workflow snapshot") from None
        except OperationFailed:
            if not (path.parent / MANIFEST).is_file():
                # Being written: the snapshot is written in place just before the
                # manifest, so a bundle without a manifest has none to show yet.
                raise NotFoundError(f"run '{run_id}' has no workflow snapshot") from None
            raise OperationFailed(f"run '{run_id}' has a damaged workflow snapshot") from None
        except OSError as exc:
            raise OperationFailed(f"cannot read the workflow snapshot of run '{run_id}': "
                                  f"{exc.strerror}") from None

    def _document(self, run_id: str, kind: str, missing: str) -> dict[str, Any]:
        assert self.rows is not None
        self._root(run_id)  # an InputError for a path-like id
        try:
            return _db.read_document(self.rows, run_id, kind)
        except NotFoundError:
            raise NotFoundError(missing.format(run_id=run_id)) from None

    def trace(self, run_id: str) -> list[dict[str, Any]]:
        """Events of the valid prefix of the trace (a torn tail is left out, not repaired)."""
        return self.read_trace(run_id).events

    def state(self, run_id: str) -> RunState:
        """`RunState` folded over the trace (values keep their artifact references)."""
        return fold(run_id, self.trace(run_id))

    def final_output(self, run_id: str) -> Any:
        """The run's final output with long strings read back from artifacts/."""
        return self.live(run_id, self.state(run_id).final_output)

    def live(self, run_id: str, value: Any) -> Any:
        """`value` (read from this run's trace) with artifact references made real again."""
        if not has_artifacts(value):
            return value
        return internalize(value, lambda ref: self.read_artifact(run_id, ref))

    def read_artifact(self, run_id: str, ref: dict[str, Any]) -> bytes:
        root = self._existing(run_id)
        try:
            if self.rows is not None:
                return _db.read_artifact(self.rows, run_id, ref)
            return _bundle.read_artifact(root, ref)
        except OperationFailed:
            raise OperationFailed(f"run '{run_id}' has an invalid artifact reference "
                                  f"{str(ref.get('path', ''))!r}") from None
        except FileNotFoundError:
            raise OperationFailed(f"run '{run_id}' is missing its artifact "
                                  f"{str(ref.get('path', ''))!r}") from None
        except OSError as exc:
            raise OperationFailed(f"cannot read an artifact of run '{run_id}': "
                                  f"{exc.strerror}") from None

    def live_log(self, run_id: str, node: str, attempt: str, stream: str,
                 offset: int = 0, turn: int = 0) -> bytes | None:
        """The bytes of a running attempt's live log from `offset` (engine/livelog.py),
        or None when there is none (not started, or its `node_log` is recorded)."""
        root = self._existing(run_id)
        name = live_log_name(node, attempt, stream, turn)
        if "/" in name or name.startswith("."):
            return None  # ids from the trace; never a path out of logs/
        try:
            with open(root / LOGS / name, "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise OperationFailed(f"cannot read the live log of node '{node}' of run "
                                  f"'{run_id}': {exc.strerror}") from None

    # -- listing ----------------------------------------------------------------------
    def list_ids(self) -> list[str]:
        """Run ids of the bundle folders, sorted; dot-entries (`.continued`) are skipped."""
        if self.rows is not None:
            return [r for r in self.rows.bundle_ids() if valid_run_id(r)]
        try:
            entries = list(os.scandir(self.runs_dir))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise OperationFailed(f"cannot list runs in {self.runs_dir}: "
                                  f"{exc.strerror}") from None
        return sorted(e.name for e in entries if valid_run_id(e.name) and e.is_dir())
