"""What a run is called, in one place: the run-state vocabulary every surface reads.

A run has two records that each know part of the truth: its launch row (queued,
starting, running, parked, done, failed, cancelled; the store's contract) and,
once it started, its bundle (running, paused, waiting, completed, failed,
timed_out, cancelled; the trace's fold). `run_state` merges them, and `wfrun runs`,
`status`, `show`, `why`, the HTTP API and the web view all call it, so no two of
them can call one run by two names (issue 34).

The rules: before the run begins (queued, starting) and while it is parked, the
launch row is the news (a parked run's bundle still says running); once it runs
or has ended, the bundle says more (completed or waiting where the row says done,
timed_out where it says failed). A run without a launch row (made by a wfrun
before every run was one) is what its bundle says.

Lists page launch rows in SQL, so each state also names the rows that can hold it
(`rows_for`), and the per-state counts come from the rows' status and ending
(`state_counts`): the `done` rows are split into completed and waiting, never
counted as one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from runner.store import LaunchRecord
    from runner.store._states import LaunchEnding, LaunchStatus

RunState = Literal["queued", "starting", "running", "paused", "parked", "waiting",
                   "continued", "completed", "failed", "timed_out", "cancelled"]
RUN_STATES: tuple[RunState, ...] = get_args(RunState)
#: The states a run list counts and filters by (a chip each in the web view). Paused is
#: counted with running (held in its runner) or parked (`wfrun pause`), continued (an
#: answered checkpoint) with waiting, timed_out with failed: the rows cannot tell them
#: apart without their bundles.
COUNTED_STATES: tuple[RunState, ...] = ("queued", "starting", "running", "parked", "waiting",
                                        "completed", "failed", "cancelled")
#: States in which the run is not doing anything and cannot move on by itself.
ENDED_STATES: tuple[RunState, ...] = ("waiting", "continued", "completed", "failed",
                                      "timed_out", "cancelled")


def run_state(record: LaunchRecord | None, bundle: str | None) -> RunState:
    """The one name of a run, from its launch row and its bundle's status (as the run
    views fold it: paused and continued included); either may be missing."""
    if record is None:
        return _known(bundle)
    status = record.status
    if status == "parked" and record.park_mode == "paused":
        return "paused"  # `wfrun pause`: parked until `wfrun unpause`
    if status in ("queued", "starting", "parked"):
        return status
    if status == "cancelled":
        return "cancelled"
    if status == "failed":
        # A run that failed after it started: its bundle's ending says more (timed_out).
        if bundle in ("failed", "timed_out") and record.started_at is not None:
            return _known(bundle)
        return "failed"
    if status == "done":
        if bundle in ("completed", "waiting", "continued"):
            return _known(bundle)
        return "waiting" if record.ending == "waiting" else "completed"
    # running: the bundle may be a step ahead of the row (ended, ending not recorded).
    return _known(bundle)


def _known(bundle: str | None) -> RunState:
    for state in RUN_STATES:
        if bundle == state:
            return state
    return "running"


@dataclass(frozen=True)
class RowFilter:
    """The launch rows that can hold a run in some state: their statuses, and for done
    rows the ending."""

    statuses: tuple[LaunchStatus, ...]
    ending: LaunchEnding | None = None


#: The rows whose run can be in each state. A running row's bundle may already have
#: ended (its ending not yet recorded), so `running` rows are candidates of every
#: state the bundle can reach; the exact state is checked with the bundle.
ROWS_FOR: Mapping[str | None, RowFilter] = {
    None: RowFilter(("queued", "starting", "running", "parked", "done", "failed",
                     "cancelled")),
    "queued": RowFilter(("queued",)),
    "starting": RowFilter(("starting",)),
    "parked": RowFilter(("parked",)),
    "running": RowFilter(("running",)),
    "paused": RowFilter(("running", "parked")),
    "completed": RowFilter(("running", "done"), "completed"),
    "waiting": RowFilter(("running", "done"), "waiting"),
    "continued": RowFilter(("running", "done"), "waiting"),
    "failed": RowFilter(("running", "failed")),
    "timed_out": RowFilter(("running", "failed")),
    "cancelled": RowFilter(("running", "cancelled")),
}


def rows_for(state: str | None) -> RowFilter:
    """The launch rows a list of runs in `state` (None: every state) pages."""
    return ROWS_FOR[state]


def counted_state(status: str, ending: str | None) -> RunState:
    """The counted state of a launch row, without its bundle."""
    if status == "done":
        return "waiting" if ending == "waiting" else "completed"
    return status  # type: ignore[return-value]  # every other launch status is a state


def counted_rows(state: str) -> RowFilter:
    """The launch rows `state_counts` counts as `state` (the inverse of `counted_state`)."""
    if state in ("completed", "waiting"):
        return RowFilter(("done",), state)  # type: ignore[arg-type]
    return RowFilter((state,))  # type: ignore[arg-type]


def state_counts(counts: Mapping[tuple[str, str | None], int]) -> dict[RunState, int]:
    """Runs per counted state from launch rows counted per (status, ending)."""
    out: dict[RunState, int] = dict.fromkeys(COUNTED_STATES, 0)
    for (status, ending), n in counts.items():
        out[counted_state(status, ending)] += n
    return out
