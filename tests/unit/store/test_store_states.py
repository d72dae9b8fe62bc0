"""The launch state contract matches seeds/000 exactly."""

from __future__ import annotations

import itertools

import pytest

from runner.store import LAUNCH_STATUSES, TERMINAL_STATUSES
from runner.store._states import (
    CLAIMED_STATUSES,
    INPUT_STATUSES,
    LAUNCH_OPERATIONS,
    LAUNCH_TRANSITIONS,
    RECOVERY_PATHS,
    RESERVING_STATUSES,
    is_valid_transition,
)

# Copied from seeds/000_0e403422aa799daa.txt, "State transitions".
SEED_TRANSITIONS = """
queued -> starting
queued -> cancelled
starting -> running
starting -> failed
starting -> cancelled
starting -> queued
running -> parked
running -> done
running -> failed
running -> cancelled
parked -> starting
parked -> cancelled
"""


def test_statuses_are_the_seed_list() -> None:
    assert LAUNCH_STATUSES == (
        "queued",
        "starting",
        "running",
        "parked",
        "done",
        "failed",
        "cancelled",
    )
    assert set(TERMINAL_STATUSES) == {"done", "failed", "cancelled"}
    assert set(RESERVING_STATUSES) == {"queued", "starting", "running"}
    assert set(CLAIMED_STATUSES) == {"starting", "running"}
    assert set(INPUT_STATUSES) == {"queued", "starting"}


def test_transitions_are_exactly_the_seed_table() -> None:
    expected = {
        tuple(part.strip() for part in line.split("->"))
        for line in SEED_TRANSITIONS.strip().splitlines()
    }
    assert expected == LAUNCH_TRANSITIONS
    assert is_valid_transition("queued", "starting")
    assert not is_valid_transition("queued", "running")
    assert not is_valid_transition("done", "queued")


def test_no_transition_leaves_a_terminal_status() -> None:
    assert not [t for t in LAUNCH_TRANSITIONS if t[0] in TERMINAL_STATUSES]


@pytest.mark.parametrize("name", sorted(LAUNCH_OPERATIONS))
def test_every_operation_is_built_from_valid_transitions(name: str) -> None:
    op = LAUNCH_OPERATIONS[name]
    assert op.sources, name
    for source in op.sources:
        assert is_valid_transition(source, op.target), (name, source)


def test_operations_cover_every_transition() -> None:
    covered = {(s, op.target) for op in LAUNCH_OPERATIONS.values() for s in op.sources}
    assert covered <= LAUNCH_TRANSITIONS
    assert covered == LAUNCH_TRANSITIONS  # starting -> queued: recovery, and a release


def test_only_the_claim_holder_releases_a_starting_launch_back_to_the_queue() -> None:
    release = LAUNCH_OPERATIONS["release"]
    assert (release.sources, release.target, release.needs_claim) == (
        ("starting",), "queued", True)


def test_only_the_holder_of_a_claim_may_leave_starting_or_running_except_cancel() -> None:
    for op in LAUNCH_OPERATIONS.values():
        if op.name == "cancel":
            assert not op.needs_claim
            assert "running" not in op.sources
            continue
        if set(op.sources) & set(CLAIMED_STATUSES):
            assert op.needs_claim, op.name


@pytest.mark.parametrize("outcome", sorted(RECOVERY_PATHS))
def test_recovery_paths_start_at_starting_and_walk_valid_transitions(outcome: str) -> None:
    path = RECOVERY_PATHS[outcome]  # type: ignore[index]
    assert path[0] == "starting"
    assert path[-1] == outcome
    for current, target in itertools.pairwise(path):
        assert is_valid_transition(current, target), (current, target)
