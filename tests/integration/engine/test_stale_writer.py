"""A fenced (stale) writer changes nothing (DESIGN §4: every write first passes a fence)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from bundlespaces import CHAIN3

from runner.compiler import Compiler, WorkflowDefinition
from runner.engine import Engine, RunState
from runner.engine._bundle import FolderBundle
from runner.engine._bundlefmt import parse_trace
from runner.engine._space import FolderSpace
from runner.engine._state import fold
from runner.errors import ClaimLost, InputError


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under a bundle (hidden ones too): bytes and permission bits."""
    out: dict[str, tuple[bytes, int]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(root))] = (path.read_bytes(), path.stat().st_mode & 0o777)
    return out


def event(seq: int, kind: str, **extra: Any) -> dict[str, Any]:
    return {"schema": "wfrun.trace-event.v1", "seq": seq, "at": "2026-01-01T00:00:00.000Z",
            "type": kind, "run_id": "r1", "payload": extra}


class Claim:
    """Who owns the run right now; each writer's fence asks whether it still does."""

    def __init__(self, owner: str) -> None:
        self.owner = owner

    def fence(self, me: str) -> Any:
        return lambda: self.owner == me


def test_two_writers_the_stale_one_writes_nothing(tmp_path: Path) -> None:
    claim = Claim("A")
    a = FolderSpace(tmp_path).create("r1", claim.fence("A"))
    a.write_workflow('{"name":"wf"}')
    a.write_manifest({"run_id": "r1", "status": "running"})
    ref = a.write_artifact(b"x" * 5000, "text/plain")
    a.append([event(1, "run_started", workflow="wf"), event(2, "node_started")], sync=True)
    a.replace_state(fold("r1", a.read_trace()).to_json())

    claim.owner = "B"  # A's claim expired; B took the run over
    before = snapshot(a.root)
    stale_writes = [
        lambda: a.append([event(3, "node_finished", output=1)], sync=True),
        lambda: a.replace_state(RunState("r1").to_json()),
        lambda: a.write_manifest({"run_id": "r1", "status": "completed"}),
        lambda: a.write_workflow('{"name":"other"}'),
        lambda: a.write_artifact(b"y" * 5000, "text/plain"),
        lambda: a.repair(),
        lambda: a.truncate_to(1),
        lambda: a.seal(),
    ]
    for write in stale_writes:
        with pytest.raises(ClaimLost):
            write()
    assert snapshot(a.root) == before
    assert a.read_artifact(ref) == b"x" * 5000  # reads still work

    # The folder lock is a second guard: B cannot open the run while A holds it.
    with pytest.raises(InputError, match="another process"):
        FolderBundle.open(tmp_path, "r1", claim.fence("B"))
    a.close()
    b = FolderBundle.open(tmp_path, "r1", claim.fence("B"))
    b.append([event(3, "node_finished", output=2)], sync=True)
    owned = snapshot(b.root)
    with pytest.raises(ClaimLost):  # A, still around, tries once more
        a.append([event(4, "run_completed")], sync=True)
    assert snapshot(b.root) == owned
    parsed = parse_trace((b.root / "trace.jsonl").read_bytes())
    assert not parsed.torn
    assert [e["seq"] for e in parsed.events] == [1, 2, 3]
    assert parsed.events[2]["payload"] == {"output": 2}
    b.close()




def compile_chain(tmp_path: Path) -> WorkflowDefinition:
    path = tmp_path / "chain.yaml"
    path.write_text(CHAIN3)
    result = Compiler().compile_path(path)
    assert result.valid
    assert result.definition is not None
    return result.definition


def test_engine_losing_its_claim_mid_run_stops_writing_and_releases_the_run(
        tmp_path: Path) -> None:
    definition = compile_chain(tmp_path)
    runs = tmp_path / "runs"
    claim = Claim("A")
    at_loss: dict[str, Any] = {}

    def lose_claim_after_a(ev: dict[str, Any], _state: RunState) -> None:
        if ev["type"] == "node_finished" and ev.get("node") == "a":
            claim.owner = "B"
            at_loss["run_id"] = ev["run_id"]
            at_loss["bytes"] = snapshot(runs / ev["run_id"])

    engine_a = Engine(runs_dir=runs, fence=claim.fence("A"), observer=lose_claim_after_a,
                      project_root=tmp_path)
    with pytest.raises(ClaimLost):
        engine_a.start(definition)
    run_id = at_loss["run_id"]
    assert snapshot(runs / run_id) == at_loss["bytes"]  # nothing after the loss
    events = parse_trace((runs / run_id / "trace.jsonl").read_bytes()).events
    # a's end was written in one append with b's start; b never ran.
    assert [(e["type"], e["node"]) for e in events[-2:]] == [("node_finished", "a"),
                                                            ("node_started", "b")]

    # The new owner can take the run over in the same process: the stale driver let go
    # of the bundle's lock when its write was refused.
    engine_b = Engine(runs_dir=runs, fence=claim.fence("B"), project_root=tmp_path)
    outcome = engine_b.resume(run_id, lambda _m: definition)
    assert outcome.status == "completed"
    assert outcome.final_output == 3
    events = parse_trace((runs / run_id / "trace.jsonl").read_bytes()).events
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["node"] for e in events if e["type"] == "node_finished"] == ["a", "b", "c"]
    assert os.stat(runs / run_id / "trace.jsonl").st_mode & 0o222 == 0  # sealed


def test_fence_checked_before_the_first_byte_of_a_new_run(tmp_path: Path) -> None:
    definition = compile_chain(tmp_path)
    runs = tmp_path / "runs"
    engine = Engine(runs_dir=runs, fence=lambda: False, project_root=tmp_path)
    with pytest.raises(ClaimLost):
        engine.start(definition, run_id="chain-x")
    assert not (runs / "chain-x").exists()
