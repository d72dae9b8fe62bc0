"""The run-state vocabulary (runner/host/runtime/_runstate.py): one name per run from its
launch row and its bundle, and run lists that page and count by the same names."""

from __future__ import annotations

from typing import Any

import pytest

from runner.host.runtime._runstate import (
    COUNTED_STATES,
    RUN_STATES,
    counted_rows,
    counted_state,
    rows_for,
    run_state,
    state_counts,
)
from runner.store import LaunchRecord


def row(status: str, *, started: bool = True, ending: str | None = None) -> LaunchRecord:
    return LaunchRecord(run_id="r-1", workflow_ref="w", workflow_path=None, source={},
                        definition_digest="d", input_json=None, options_json=None,
                        status=status, runner_id=None, claim_token=None,  # type: ignore[arg-type]
                        claim_expires_at=None, epoch=0, affinity_runner_id=None,
                        origin_session_id=None, parent_run_id=None, error_code=None,
                        error_message=None, created_at=0, updated_at=0,
                        started_at=1 if started else None, finished_at=None,
                        ending=ending)  # type: ignore[arg-type]


#: (launch status, started, ending, the bundle's status) -> the run's one name.
TABLE: list[tuple[str, bool, str | None, str | None, str]] = [
    ("queued", False, None, None, "queued"),
    ("starting", False, None, None, "starting"),
    ("starting", True, None, "running", "starting"),  # resuming a parked run
    ("running", True, None, "running", "running"),
    ("running", True, None, "paused", "paused"),
    ("running", True, None, "completed", "completed"),  # the bundle a step ahead
    ("parked", True, None, "running", "parked"),  # its bundle still says running
    ("parked", True, None, "paused", "parked"),
    ("done", True, "completed", "completed", "completed"),
    ("done", True, "waiting", "waiting", "waiting"),
    ("done", True, "waiting", "continued", "continued"),
    ("done", True, "waiting", None, "waiting"),  # the bundle is on another host
    ("failed", True, None, "failed", "failed"),
    ("failed", True, None, "timed_out", "timed_out"),
    ("failed", False, None, None, "failed"),  # failed to start: no bundle
    ("cancelled", False, None, None, "cancelled"),
    ("cancelled", True, None, "cancelled", "cancelled"),
]


@pytest.mark.parametrize(("status", "started", "ending", "bundle", "name"), TABLE)
def test_every_launch_and_bundle_pair_has_one_name(status: str, started: bool,
                                                   ending: str | None, bundle: str | None,
                                                   name: str) -> None:
    record = row(status, started=started, ending=ending)
    assert run_state(record, bundle) == name
    # A list filtered by that name pages this row, and counts it under its chip.
    assert status in rows_for(name).statuses
    chip = {"paused": "running", "continued": "waiting", "timed_out": "failed"}.get(name, name)
    if status != "running":  # a running row whose bundle ended is counted as running
        assert counted_state(status, ending) == chip
        assert status in counted_rows(chip).statuses


def test_a_run_without_a_launch_row_is_what_its_bundle_says() -> None:
    for bundle in ("running", "paused", "waiting", "completed", "failed", "timed_out"):
        assert run_state(None, bundle) == bundle
    assert run_state(None, None) == "running"


def test_counts_split_done_rows_by_their_ending() -> None:
    counts: dict[tuple[str, Any], int] = {("done", "completed"): 3, ("done", "waiting"): 2,
                                          ("queued", None): 1, ("parked", None): 4}
    assert state_counts(counts) == {"queued": 1, "starting": 0, "running": 0, "parked": 4,
                                    "waiting": 2, "completed": 3, "failed": 0,
                                    "cancelled": 0}
    assert set(COUNTED_STATES) <= set(RUN_STATES)
    assert "done" not in RUN_STATES
