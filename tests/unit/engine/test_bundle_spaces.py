"""The bundle-space conformance suite (tests/bundlespaces.py) on folders and on the
in-memory rows fake (`MemoryRows`); tests/integration/store/test_bundles_postgres.py
runs it on Postgres."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from bundlespaces import *  # noqa: F403  (the conformance tests)
from bundlespaces import CHAIN3, Holder, Kit

from runner.clock import FakeClock
from runner.engine import Engine
from runner.engine._dbbundle import PATIENCE, RETRY_EVERY
from runner.engine._rows import MemoryRows
from runner.errors import ClaimLost


@pytest.fixture(params=["folder", "memory"])
def kit(request: pytest.FixtureRequest, tmp_path: Path) -> Kit:
    runs = tmp_path / "runs"
    if request.param == "folder":
        def hold_folder(_run_id: str) -> Holder:
            held = {"yes": True}
            return Holder(fence=lambda: held["yes"], revoke=lambda: held.update(yes=False))

        return Kit("folder", runs, None, hold_folder)
    rows = MemoryRows()

    def hold_row(_run_id: str) -> Holder:
        # The fence callable always says yes: only the rows' own check can refuse.
        token = secrets.token_hex(8)
        return Holder(claim=token, revoke=lambda: rows.revoke(token))

    return Kit("memory", runs, rows, hold_row)


def test_memory_rows_refuse_a_revoked_claim_and_a_sealed_bundle() -> None:
    rows = MemoryRows()
    assert rows.create_bundle("r", "c1") == "ok"
    assert rows.create_bundle("r", "c1") == "exists"
    assert rows.append_events("r", [(1, "{}")], "c1") == "ok"
    assert rows.append_events("r", [(1, "{}")], "c1") == "exists"  # seq taken
    rows.revoke("c1")
    assert rows.append_events("r", [(2, "{}")], "c1") == "fenced"
    assert rows.put_document("r", "state", "{}", "c1") == "fenced"
    assert rows.seal_bundle("r", None) == "ok"
    assert rows.put_document("r", "manifest", "{}", None) == "sealed"
    assert rows.append_events("nope", [(1, "{}")], None) == "missing"
    assert rows.read_events("r") == ["{}"]


_THREE = """
    start: a
    nodes:
      a: {compute: "{{ 1 }}"}
      b: {compute: "{{ outputs.a + 1 }}"}
      c: {compute: "{{ 'w' * 5000 }}"}
    edges:
      - {from: a, to: b}
      - {from: b, to: c}
"""


@pytest.mark.parametrize("answer_lost", [False, True])
def test_writes_wait_out_a_database_outage(tmp_path: Path, answer_lost: bool) -> None:
    """Every write during an outage answers `unavailable`; with `answer_lost` it had
    committed first (the connection broke before the answer). Either way the run ends
    once, each event once, in order."""
    kit = Kit("memory", tmp_path / "runs", MemoryRows(), lambda _r: Holder())
    definition = kit.workflow(_THREE)
    rows = kit.rows
    assert isinstance(rows, MemoryRows)
    clock = FakeClock()
    outcome = None
    for outage_at in range(1, 16):  # an outage at each write of the run in turn
        rows.outages, rows.commit_then_fail = 0, answer_lost
        engine = Engine(runs_dir=kit.runs, clock=clock, rows=rows, claim="c")
        run_id = f"wf-outage-{outage_at}"
        writes = rows.writes

        def crash(point: str, at: int = outage_at, base: int = writes) -> None:
            if rows.writes - base >= at and rows.outages == 0:
                rows.outages = 3
        engine.crash_point = crash
        outcome = engine.start(definition, run_id=run_id)
        assert outcome.status == "completed", (outage_at, outcome.error)
        trace = kit.reader().trace(run_id)
        assert [e["seq"] for e in trace] == list(range(1, len(trace) + 1))
        assert [e["type"] for e in trace].count("run_completed") == 1
        assert kit.reader().final_output(run_id) == "w" * 5000
        assert rows.bundle_sealed(run_id)
    assert outcome is not None


def test_an_outage_past_the_patience_lets_go_of_the_run(tmp_path: Path) -> None:
    rows = MemoryRows()
    kit = Kit("memory", tmp_path / "runs", rows, lambda _r: Holder())
    definition = kit.workflow(_THREE)
    clock = FakeClock()

    def crash(point: str) -> None:
        if point == "between_nodes":
            rows.outages = 10**9  # the database never comes back
    engine = Engine(runs_dir=kit.runs, clock=clock, rows=rows, claim="c", crash_point=crash)
    started = clock.monotonic()
    with pytest.raises(ClaimLost, match="cannot reach the database"):
        engine.start(definition, run_id="wf-gone")
    assert clock.monotonic() - started >= PATIENCE
    rows.outages = 0
    assert kit.reader().status("wf-gone") == "running"  # left for a runner to resume
    assert not rows.bundle_sealed("wf-gone")


@pytest.mark.parametrize("patience", [PATIENCE, 4 * PATIENCE])
def test_a_write_waits_for_the_database_as_long_as_the_engine_says(
        tmp_path: Path, patience: float) -> None:
    """The coordinator gives its engine a third of the claim's lease: a server restart
    longer than the default patience is waited out, not a reason to let the run go
    (and run its interrupted node again elsewhere)."""
    rows = MemoryRows()
    kit = Kit("memory", tmp_path / "runs", rows, lambda _r: Holder())
    definition = kit.workflow(_THREE)
    clock = FakeClock()
    outage = 2 * PATIENCE  # seconds on the engine's clock

    def crash(point: str) -> None:
        if point == "between_nodes" and not down:
            down.append(clock.monotonic())
            rows.outages = int(outage / RETRY_EVERY)  # one answer per try
    down: list[float] = []
    engine = Engine(runs_dir=kit.runs, clock=clock, rows=rows, claim="c", crash_point=crash,
                    patience=patience)
    if patience < outage:
        with pytest.raises(ClaimLost, match="cannot reach the database"):
            engine.start(definition, run_id="wf-wait")
        return
    outcome = engine.start(definition, run_id="wf-wait")
    assert outcome.status == "completed"
    assert clock.monotonic() - down[0] >= outage - RETRY_EVERY  # it waited it out




def test_a_node_end_goes_with_the_next_nodes_start_in_one_write(tmp_path: Path) -> None:
    """The loop routes before it writes a node's end: [a ended, b started] is one
    transaction, and the last node's end is in the ending's. A 3-node run: [create,
    snapshot, manifest, run_started], a started, [a, b], [b, c], [c + ending + seal]."""
    rows = MemoryRows()
    kit = Kit("memory", tmp_path / "runs", rows, lambda _r: Holder())
    definition = kit.workflow(CHAIN3)
    seen: list[tuple[str, int]] = []
    engine = Engine(runs_dir=kit.runs, clock=FakeClock(), rows=rows, claim="c",
                    crash_point=lambda point: seen.append((point, rows.writes)))
    before = rows.writes
    assert engine.start(definition, run_id="wf-seven").final_output == 3
    assert rows.writes - before == 5
    trace = [(e["type"], e.get("node")) for e in kit.reader().trace("wf-seven")]
    assert trace == [("run_started", None), ("node_started", "a"), ("node_finished", "a"),
                     ("node_started", "b"), ("node_finished", "b"), ("node_started", "c"),
                     ("node_finished", "c"), ("run_completed", None)]
    # between_nodes comes after the pair is written (the next node has not run), and
    # after_routing before it (the end is still held).
    points = [p for p, _ in seen if p in ("after_routing", "between_nodes")]
    assert points == ["after_routing", "between_nodes"] * 2
    at = dict((p, w) for p, w in seen if p in ("after_routing", "between_nodes"))
    assert at["between_nodes"] == at["after_routing"] + 1
