"""Conformance under random interleavings: the launch invariants hold after every step."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from storekit import Backend, FakeClock, launch

from runner.store import TERMINAL_STATUSES, LaunchRecord, LostRace, Store
from runner.store._states import LAUNCH_TRANSITIONS, RECOVERY_PATHS

SESSIONS = [None, "session-a", "session-b"]
RUNS = [f"run-{i}" for i in range(3)]
CODES = ["activation_failed", "source_changed"]


def _allowed_pairs() -> set[tuple[str | None, str]]:
    pairs: set[tuple[str | None, str]] = set(LAUNCH_TRANSITIONS)
    pairs.add((None, "queued"))
    for path in RECOVERY_PATHS.values():
        pairs.add((path[0], path[-1]))  # a recovery jumps along valid transitions
    return pairs


class LaunchMachine(RuleBasedStateMachine):
    backend: Backend

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.store: Store = self.backend.fresh(self.clock)
        self.tokens: dict[str, list[str]] = {}  # every token ever handed out, per run
        self.terminal: dict[str, LaunchRecord] = {}
        self.epochs: dict[str, int] = {}
        self.counter = itertools.count()

    def teardown(self) -> None:
        self.store.close()

    # --- rules ---------------------------------------------------------------------

    @rule(
        run=st.sampled_from(RUNS),
        session=st.sampled_from(SESSIONS),
        parent=st.sampled_from([None, "parent-1"]),
    )
    def enqueue(self, run: str, session: str | None, parent: str | None) -> None:
        result = self.store.launches.enqueue(
            launch(run, origin_session_id=session, parent_run_id=parent)
        )
        if isinstance(result, LostRace):
            assert result.reason in ("already_exists", "session_reserved", "continuation_exists")

    @rule(session=st.sampled_from(SESSIONS), lease=st.sampled_from([5.0, 30.0]))
    def claim_next(self, session: str | None, lease: float) -> None:
        claimed = self.store.launches.claim_next(
            runner_id="h", session_id=session, lease_seconds=lease
        )
        if claimed is not None:
            assert claimed.claim_token not in self.tokens.get(claimed.run_id, [])
            self.tokens.setdefault(claimed.run_id, []).append(claimed.claim_token or "")

    @rule(run=st.sampled_from(RUNS))
    def claim(self, run: str) -> None:
        result = self.store.launches.claim(run, runner_id="h2", lease_seconds=10)
        if isinstance(result, LaunchRecord):
            self.tokens.setdefault(run, []).append(result.claim_token or "")

    @rule(
        run=st.sampled_from(RUNS),
        latest=st.booleans(),
        op=st.sampled_from(
            ["mark_running", "park", "finish", "fail", "cancel_claimed", "renew_lease"]
        ),
    )
    def with_token(self, run: str, latest: bool, op: str) -> None:
        tokens = self.tokens.get(run) or ["never-issued"]
        token = tokens[-1] if latest else tokens[0]
        launches = self.store.launches
        if op == "fail":
            result = launches.fail(run, token, code=CODES[0], message="x")
        elif op == "cancel_claimed":
            result = launches.cancel(run, claim_token=token)
        else:
            result = getattr(launches, op)(run, token)
        if token != tokens[-1]:
            assert isinstance(result, LostRace), (op, "stale token won")

    @rule(run=st.sampled_from(RUNS))
    def cancel(self, run: str) -> None:
        self.store.launches.cancel(run)

    @rule(run=st.sampled_from(RUNS), outcome=st.sampled_from(sorted(RECOVERY_PATHS)))
    def recover(self, run: str, outcome: str) -> None:
        record = self.store.launches.get(run)
        epoch = record.epoch if record else 0
        self.store.launches.recover_expired_starting(
            run,
            epoch=epoch,
            outcome=outcome,  # type: ignore[arg-type]
            code=CODES[1],
            message="source changed",
        )

    @rule(seconds=st.sampled_from([1.0, 6.0, 31.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # --- invariants ----------------------------------------------------------------

    @invariant()
    def launches_keep_the_contract(self) -> None:
        records = self.store.launches.query()
        reserving = [
            r.origin_session_id
            for r in records
            if r.origin_session_id and r.status in ("queued", "starting", "running")
        ]
        assert len(reserving) == len(set(reserving)), "two reservations for one session"
        live_children = [
            r.parent_run_id
            for r in records
            if r.parent_run_id
            and not (r.status in ("failed", "cancelled") and r.started_at is None)
        ]
        assert len(live_children) == len(set(live_children)), "two continuations"
        now = self.store.now_ms()
        for record in records:
            assert record.epoch >= self.epochs.get(record.run_id, 0)
            self.epochs[record.run_id] = record.epoch
            if record.status not in ("queued", "starting"):
                assert record.input_cleared
            if record.run_id in self.terminal:
                assert record == self.terminal[record.run_id], "a terminal launch changed"
            elif record.status in TERMINAL_STATUSES:
                self.terminal[record.run_id] = record
            holders = [
                t
                for t in self.tokens.get(record.run_id, [])
                if self.store.launches.check_claim(record.run_id, t) in ("starting", "running")
            ]
            assert len(holders) <= 1, "two tokens pass the fence"
            if holders:
                assert record.lease_live(now)
                assert holders == [record.claim_token]

    @invariant()
    def every_recorded_change_is_allowed(self) -> None:
        allowed = _allowed_pairs()
        for event in self.store.run_events.read(limit=10_000):
            pair = (event.payload["from"], event.payload["to"])
            if pair[0] != pair[1]:
                assert pair in allowed, (event.type, pair)


@pytest.mark.timeout(60)
def test_random_interleavings_keep_the_launch_invariants(backend: Backend) -> None:
    machine = type("BoundLaunchMachine", (LaunchMachine,), {"backend": backend})
    run_state_machine_as_test(
        machine,
        settings=settings(max_examples=40, stateful_step_count=30, deadline=None, database=None),
    )
