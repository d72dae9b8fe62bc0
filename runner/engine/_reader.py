"""Reading run bundles from outside the engine (DESIGN §4).

Other layers (views, launch, hosts, controllers) read bundles only through
`RunReader`; they never open bundle files themselves and never write, delete or
re-fence them. The reader takes no lock and writes nothing, so it can look at a
run that another process is executing: the state is re-folded from the valid
prefix of the trace (the truth), never taken from `state.json`, which may lag.

A run id that could name a path outside `runs_dir` ('/', a leading '.', empty)
is an `InputError` where the caller asked for a run's contents; the yes/no
questions (`exists`, `started`, `status`, `continued_by`) answer no for it.

The answers come from the workspace's bundle space (engine/_space.py): folders
under `runs_dir`, or the store's database rows (`runs_dir` then holds only the
live logs of attempts running on this host).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from runner.errors import NotFoundError, OperationFailed

from ._bundlefmt import CONTINUED as CONTINUED  # re-exported: the marker folder
from ._bundlefmt import LOGS, TraceRead
from ._bundlefmt import MAX_RUN_ID_BYTES as MAX_RUN_ID_BYTES
from ._livelog import live_log_name
from ._rows import BundleRows
from ._space import BundleSpace, check_run_id, space_for, valid_run_id
from ._state import RunState, fold, has_artifacts, internalize

__all__ = ["CONTINUED", "MAX_RUN_ID_BYTES", "RunReader", "valid_run_id"]


class RunReader:
    """Read-only access to the run bundles of one space (`space_for(runs_dir, rows)`)."""

    def __init__(self, runs_dir: Path, rows: BundleRows | None = None, *,
                 space: BundleSpace | None = None) -> None:
        self.runs_dir = runs_dir
        self.space = space or space_for(runs_dir, rows)

    def __repr__(self) -> str:
        return f"RunReader({self.space!r})"

    # -- ids ----------------------------------------------------------------------------
    def _existing(self, run_id: str) -> None:
        check_run_id(run_id)
        if not self.space.exists(run_id):
            raise NotFoundError(f"no run '{run_id}'; `wfrun runs` lists runs")

    def preloaded(self, run_ids: Iterable[str]) -> RunReader:
        """A reader of this space with the bundles of `run_ids` read up front, in one go
        where the space is rows: for one listing (a page of runs), then dropped."""
        space = self.space.preloaded(run_ids)
        return self if space is self.space else RunReader(self.runs_dir, space=space)

    # -- yes/no questions ---------------------------------------------------------------
    def exists(self, run_id: str) -> bool:
        """The bundle exists, even half-made (no manifest or no trace yet)."""
        return valid_run_id(run_id) and self.space.exists(run_id)

    def started(self, run_id: str) -> bool:
        """The trace holds its `run_started` event (always the first one, durable)."""
        return valid_run_id(run_id) and self.space.started(run_id)

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
        child = self.space.continued_by(run_id)
        return child if child and valid_run_id(child) else None

    def answered(self, run_id: str) -> bool:
        """A continuation of this run was begun (its marker exists): it continues once."""
        return valid_run_id(run_id) and self.space.answered(run_id)

    # -- contents ---------------------------------------------------------------------
    def manifest(self, run_id: str) -> dict[str, Any]:
        check_run_id(run_id)
        return self.space.manifest(run_id)

    def read_trace(self, run_id: str) -> TraceRead:
        """The valid prefix of the trace, its length in bytes and whether a tail is torn.

        An existing bundle without a trace (half-made) has no events.
        """
        self._existing(run_id)
        return self.space.trace(run_id)

    def trace_tail(self, run_id: str, offset: int, next_seq: int) -> TraceRead:
        """The whole, valid events written after byte `offset` (which ends event
        `next_seq - 1`); `valid_bytes` is the offset to pass next time. Reads only
        the new bytes, so a live view can follow a long trace cheaply."""
        self._existing(run_id)
        return self.space.trace_tail(run_id, offset, next_seq)

    def workflow(self, run_id: str) -> dict[str, Any]:
        """The definition snapshot the run was started from (`workflow.json`)."""
        check_run_id(run_id)
        return self.space.workflow(run_id)

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
        self._existing(run_id)
        try:
            return self.space.read_artifact(run_id, ref)
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
        """The bytes of a running attempt's live log from `offset` (engine/_livelog.py),
        or None when there is none (not started, or its `node_log` is recorded)."""
        self._existing(run_id)
        name = live_log_name(node, attempt, stream, turn)
        if "/" in name or name.startswith("."):
            return None  # ids from the trace; never a path out of logs/
        try:
            with open(self.runs_dir / run_id / LOGS / name, "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise OperationFailed(f"cannot read the live log of node '{node}' of run "
                                  f"'{run_id}': {exc.strerror}") from None

    def live_attempts(self, run_id: str, node: str) -> list[tuple[str, str, int]]:
        """(node, attempt, turn) of each live log of fan-out `node`'s items (`NODE[i]`)
        present now: an item's attempt is in no event until it ends, so a follower finds
        it by its file."""
        self._existing(run_id)
        prefix = live_log_name(node, "", "stdout").removesuffix("..stdout") + "["
        try:
            names = os.listdir(self.runs_dir / run_id / LOGS)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise OperationFailed(f"cannot list the live logs of run '{run_id}': "
                                  f"{exc.strerror}") from None
        found = set()
        for name in names:
            stem, _, stream = name.rpartition(".")
            item, sep, rest = stem.partition("].")
            if not name.startswith(prefix) or stream not in ("stdout", "stderr") or not sep:
                continue
            attempt, _, turn = rest.partition("-")
            if attempt and "." not in attempt and (not turn or turn.isdigit()):
                found.add((f"{node}[{item[len(prefix):]}]", attempt, int(turn or 0)))
        return sorted(found)

    # -- listing ----------------------------------------------------------------------
    def list_ids(self) -> list[str]:
        """Run ids of the bundles, sorted; dot-entries (`.continued`) are skipped."""
        return self.space.list_ids()
