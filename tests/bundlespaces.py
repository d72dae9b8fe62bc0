"""The bundle-space conformance suite: the engine on folders, on the in-memory rows
fake and on Postgres rows must behave the same (runner/engine/_space.py).

A test module defines a `kit` fixture returning a `Kit` and imports the `test_*`
functions below (`from bundlespaces import *`). A kit says where bundles live
(`rows` None: folders under `runs`) and how a writer holds and loses the claim
on a run: a folder writer only by its fence callable, a rows writer by its claim
token, which the rows check inside each write's transaction.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runner._canonical import canonical_json
from runner.clock import SystemClock
from runner.compiler import Compiler, WorkflowDefinition
from runner.engine import Engine, RunReader
from runner.engine._bundlefmt import always
from runner.engine._rows import BundleRows
from runner.engine._space import space_for
from runner.errors import ClaimLost, InputError, OperationFailed

__all__ = [
    "Holder",
    "Kit",
    "test_a_continuation_carries_outputs_and_continues_once",
    "test_a_crash_after_the_bundle_is_created_leaves_a_discardable_bundle",
    "test_a_crash_after_the_manifest_leaves_a_discardable_bundle",
    "test_a_fenced_out_writer_writes_nothing",
    "test_a_half_made_continuation_is_discarded_and_its_parent_answered_again",
    "test_a_run_starts_completes_and_is_sealed",
    "test_a_trace_is_followed_from_an_offset",
    "test_an_interrupted_run_resumes_without_repeating_a_completed_node",
    "test_strings_over_4_kib_move_to_artifacts",
    "test_unstarted_answers_and_discards_a_half_made_bundle_in_one_call",
]


class Killed(BaseException):
    """Stands in for SIGKILL at an engine crash point (the process would just stop)."""


#: Three `compute` nodes in a chain: the trivial run the hot-path figures count (the
#: benches read the same file).
CHAIN3 = (Path(__file__).resolve().parents[1] / "fixtures" / "workflows"
          / "chain3.yaml").read_text()

@dataclass
class Holder:
    """A writer's hold on one run: what to give the engine, and how to lose it."""

    fence: Callable[[], bool] = always
    claim: str | None = None
    revoke: Callable[[], None] = lambda: None


@dataclass
class Kit:
    name: str
    runs: Path
    rows: BundleRows | None
    hold: Callable[[str], Holder]  # a held claim on a run id (a launch row on Postgres)
    files: list[Path] = field(default_factory=list)

    def engine(self, holder: Holder | None = None, **kw: Any) -> Engine:
        holder = holder or Holder()
        return Engine(runs_dir=self.runs, clock=SystemClock(), work_dir=self.runs.parent,
                      project_root=self.runs.parent, rows=self.rows, fence=holder.fence,
                      claim=holder.claim, **kw)

    def reader(self) -> RunReader:
        return RunReader(self.runs, self.rows)

    def workflow(self, text: str, name: str = "wf") -> WorkflowDefinition:
        path = self.runs.parent / f"{name}.yaml"
        path.write_text(textwrap.dedent(text))
        result = Compiler().compile_path(path)
        assert result.valid, [d.message for d in result.errors]
        assert result.definition is not None
        return result.definition

    def types(self, run_id: str) -> list[str]:
        return [e["type"] for e in self.reader().trace(run_id)]


# A two-node workflow whose first node appends a line to `count` (its side effect)
# and whose second node is a checkpoint or a plain compute.
def _counting(kit: Kit, second: str) -> tuple[WorkflowDefinition, Path]:
    count = kit.runs.parent / "count"
    definition = kit.workflow(f"""
        start: one
        nodes:
          one:
            action: {{shell: [sh, -c, 'echo x >> "$1"; echo done', sh, "{count}"],
                      parse: "{{{{ stdout | trim }}}}"}}
          two: {second}
        edges:
          - {{from: one, to: two}}
    """)
    return definition, count


def test_a_run_starts_completes_and_is_sealed(kit: Kit) -> None:
    definition, count = _counting(kit, '{compute: "{{ {\'first\': outputs.one} }}"}')
    holder = kit.hold("wf-run-1")
    out = kit.engine(holder).start(definition, run_id="wf-run-1")
    assert out.status == "completed", out.error
    assert out.final_output == {"first": "done"}
    reader = kit.reader()
    assert reader.exists("wf-run-1")
    assert reader.started("wf-run-1")
    assert reader.status("wf-run-1") == "completed"
    assert reader.manifest("wf-run-1")["status"] == "completed"
    assert reader.workflow("wf-run-1")["name"] == "wf"
    assert reader.final_output("wf-run-1") == {"first": "done"}
    assert "wf-run-1" in reader.list_ids()
    assert kit.types("wf-run-1")[0] == "run_started"
    assert kit.types("wf-run-1")[-1] == "run_completed"
    assert count.read_text() == "x\n"
    # Sealed: whoever opens it again can write nothing, and the trace is unchanged.
    before = reader.trace("wf-run-1")
    bundle = space_for(kit.runs, kit.rows).open("wf-run-1", always, "full", None)
    try:
        with pytest.raises(OperationFailed, match="immutable"):
            bundle.append([{"seq": len(before) + 1, "type": "x"}], sync=True)
        with pytest.raises(OperationFailed, match="immutable"):
            bundle.write_manifest({"status": "running"})
    finally:
        bundle.close()
    assert reader.trace("wf-run-1") == before
    with pytest.raises(InputError, match="already ended"):
        kit.engine().resume("wf-run-1", lambda _m: definition)


def test_an_interrupted_run_resumes_without_repeating_a_completed_node(kit: Kit) -> None:
    definition, count = _counting(kit, '{compute: "{{ outputs.one ~ \'!\' }}"}')

    def crash(point: str) -> None:
        if point == "between_nodes":
            raise Killed()

    with pytest.raises(Killed):
        kit.engine(kit.hold("wf-run-2"), crash_point=crash).start(definition,
                                                                  run_id="wf-run-2")
    assert kit.reader().status("wf-run-2") == "running"
    assert count.read_text() == "x\n"
    out = kit.engine(kit.hold("wf-run-2")).resume("wf-run-2", lambda _m: definition)
    assert out.status == "completed", out.error
    assert out.final_output == "done!"
    assert count.read_text() == "x\n"  # node one ran once
    types = kit.types("wf-run-2")
    assert types.count("run_resumed") == 1
    assert [e["node"] for e in kit.reader().trace("wf-run-2")
            if e["type"] == "node_finished"] == ["one", "two"]
    seqs = [e["seq"] for e in kit.reader().trace("wf-run-2")]
    assert seqs == list(range(1, len(seqs) + 1))


def test_a_continuation_carries_outputs_and_continues_once(kit: Kit) -> None:
    definition = kit.workflow("""
        start: one
        nodes:
          one: {compute: "{{ 'first' }}"}
          ask: {checkpoint: "go on?"}
          done: {compute: "{{ {'one': outputs.one, 'answer': outputs.ask.answer} }}"}
        edges:
          - {from: one, to: ask}
          - {from: ask, to: done}
    """)
    out = kit.engine(kit.hold("wf-run-3")).start(definition, run_id="wf-run-3")
    assert out.status == "waiting", out.error
    reader = kit.reader()
    assert reader.manifest("wf-run-3")["status"] == "waiting"
    assert not reader.answered("wf-run-3")
    engine = kit.engine(kit.hold("wf-run-3b"))
    driver, nxt = engine.prepare_answer("wf-run-3", "yes", lambda _m: definition,
                                        run_id="wf-run-3b")
    assert reader.answered("wf-run-3")
    assert reader.continued_by("wf-run-3") == "wf-run-3b"
    final = engine.drive_continuation(driver, nxt)
    assert final.status == "completed", final.error
    assert final.final_output == {"one": "first", "answer": "yes"}
    assert reader.manifest("wf-run-3b")["parent_run_id"] == "wf-run-3"
    with pytest.raises(InputError, match="already answered"):
        kit.engine().prepare_answer("wf-run-3", "again", lambda _m: definition,
                                    run_id="wf-run-3c")
    assert not reader.exists("wf-run-3c")


def _crash_at(kit: Kit, point: str, run_id: str) -> WorkflowDefinition:
    definition = kit.workflow("""
        start: a
        nodes:
          a: {compute: "{{ 1 }}"}
    """)

    def crash(name: str) -> None:
        if name == point:
            raise Killed()

    with pytest.raises(Killed):
        kit.engine(kit.hold(run_id), crash_point=crash).start(definition, run_id=run_id)
    return definition


def _discard_and_restart(kit: Kit, definition: WorkflowDefinition, run_id: str) -> None:
    reader = kit.reader()
    assert reader.exists(run_id)
    assert not reader.started(run_id)
    assert reader.status(run_id) is None
    holder = kit.hold(run_id)
    # A started run is never discarded; a half-made one is, and the launch starts afresh.
    assert kit.engine(holder).space.discard_unstarted(run_id)
    assert not reader.exists(run_id)
    out = kit.engine(holder).start(definition, run_id=run_id)
    assert out.status == "completed", out.error
    assert not kit.engine(holder).space.discard_unstarted(run_id)
    assert reader.exists(run_id)


def _nothing_left_then_start(kit: Kit, definition: WorkflowDefinition, run_id: str) -> None:
    """A database bundle's row, snapshot, manifest and `run_started` are one
    transaction: a creator killed before it leaves no bundle at all."""
    reader = kit.reader()
    assert not reader.exists(run_id)
    holder = kit.hold(run_id)
    assert not kit.engine(holder).space.discard_unstarted(run_id)
    out = kit.engine(holder).start(definition, run_id=run_id)
    assert out.status == "completed", out.error
    assert reader.started(run_id)


def test_a_crash_after_the_bundle_is_created_leaves_a_discardable_bundle(kit: Kit) -> None:
    definition = _crash_at(kit, "after_bundle_created", "wf-run-4")
    with pytest.raises(Exception, match="no run"):
        kit.reader().manifest("wf-run-4")
    if kit.rows is not None:
        _nothing_left_then_start(kit, definition, "wf-run-4")
        return
    _discard_and_restart(kit, definition, "wf-run-4")


def test_a_crash_after_the_manifest_leaves_a_discardable_bundle(kit: Kit) -> None:
    definition = _crash_at(kit, "after_manifest_written", "wf-run-5")
    if kit.rows is not None:
        with pytest.raises(Exception, match="no run"):
            kit.reader().manifest("wf-run-5")
        _nothing_left_then_start(kit, definition, "wf-run-5")
        return
    assert kit.reader().manifest("wf-run-5")["status"] == "running"
    assert kit.reader().trace("wf-run-5") == []
    _discard_and_restart(kit, definition, "wf-run-5")


def test_unstarted_answers_and_discards_a_half_made_bundle_in_one_call(kit: Kit) -> None:
    """The launch's one question before it activates a run afresh: no bundle and a
    half-made one (removed on the way) are unstarted; a started run is kept."""
    definition = _crash_at(kit, "after_manifest_written", "wf-run-9")
    reader = kit.reader()
    holder = kit.hold("wf-run-9")
    assert kit.engine(holder).space.unstarted("wf-run-9")
    assert not reader.exists("wf-run-9")  # a folder's half-made bundle is gone
    assert kit.engine(holder).space.unstarted("wf-run-9")  # no bundle at all
    out = kit.engine(holder).start(definition, run_id="wf-run-9")
    assert out.status == "completed", out.error
    assert not kit.engine(holder).space.unstarted("wf-run-9")
    assert reader.started("wf-run-9")  # asked, and left as it was


def test_a_half_made_continuation_is_discarded_and_its_parent_answered_again(
        kit: Kit) -> None:
    """A continuation's creator killed before `run_started`: the launch's question
    (`unstarted`, given the parent) removes what it left and frees the parent's
    continuation slot, so the answer is given again."""
    definition = kit.workflow("""
        start: ask
        nodes:
          ask: {checkpoint: "go on?"}
          done: {compute: "{{ outputs.ask.answer }}"}
        edges:
          - {from: ask, to: done}
    """)
    out = kit.engine(kit.hold("wf-run-12")).start(definition, run_id="wf-run-12")
    assert out.status == "waiting", out.error

    def crash(name: str) -> None:
        if name == "after_manifest_written":
            raise Killed()

    holder = kit.hold("wf-run-12b")
    with pytest.raises(Killed):
        kit.engine(holder, crash_point=crash).prepare_answer(
            "wf-run-12", "yes", lambda _m: definition, run_id="wf-run-12b")
    engine = kit.engine(holder)
    # A SIGKILL runs no `except`: the slot stays taken, as the kill left it.
    assert engine.space.mark_continued("wf-run-12")
    reader = kit.reader()
    assert reader.answered("wf-run-12")
    folder = kit.rows is None  # rows commit nothing before `run_started`: nothing left
    assert reader.exists("wf-run-12b") == folder
    assert engine.space.unstarted("wf-run-12b", "wf-run-12")
    assert not reader.exists("wf-run-12b")
    if not folder:
        return
    assert not reader.answered("wf-run-12")
    driver, nxt = engine.prepare_answer("wf-run-12", "yes", lambda _m: definition,
                                        run_id="wf-run-12b")
    final = engine.drive_continuation(driver, nxt)
    assert final.status == "completed", final.error
    assert final.final_output == "yes"
    assert reader.continued_by("wf-run-12") == "wf-run-12b"


def test_a_fenced_out_writer_writes_nothing(kit: Kit) -> None:
    definition, count = _counting(kit, '{compute: "{{ outputs.one }}"}')
    first = kit.hold("wf-run-6")
    revoked = {"done": False}

    def crash(point: str) -> None:
        # The claim is lost while node one's ending is recorded (a takeover): every
        # write after this point is refused.
        if point == "after_trace_append" and not revoked["done"]:
            revoked["done"] = True
            first.revoke()

    with pytest.raises(ClaimLost):
        kit.engine(first, crash_point=crash).start(definition, run_id="wf-run-6")
    reader = kit.reader()
    before = reader.trace("wf-run-6")
    # Node one's end went in one append with node two's start; node two never ran.
    assert [(e["type"], e.get("node")) for e in before[-2:]] == [
        ("node_finished", "one"), ("node_started", "two")]
    assert reader.manifest("wf-run-6")["status"] == "running"
    # The stale writer tries again: refused before anything is written.
    with pytest.raises(ClaimLost):
        kit.engine(first).resume("wf-run-6", lambda _m: definition)
    assert reader.trace("wf-run-6") == before
    # The new holder finishes it; node one is not repeated.
    out = kit.engine(kit.hold("wf-run-6")).resume("wf-run-6", lambda _m: definition)
    assert out.status == "completed", out.error
    assert count.read_text() == "x\n"


def test_strings_over_4_kib_move_to_artifacts(kit: Kit) -> None:
    definition = kit.workflow("""
        start: long
        nodes:
          long: {compute: "{{ 'é' * 2100 }}"}
          edge: {compute: "{{ 'y' * 4096 }}"}
          out: {compute: "{{ {'long': outputs.long, 'edge': outputs.edge} }}"}
        edges:
          - {from: long, to: edge}
          - {from: edge, to: out}
    """)
    out = kit.engine(kit.hold("wf-run-7")).start(definition, run_id="wf-run-7")
    assert out.status == "completed", out.error
    reader = kit.reader()
    data = ("é" * 2100).encode()
    digest = hashlib.sha256(data).hexdigest()
    finished = {e["node"]: e["payload"]["output"] for e in reader.trace("wf-run-7")
                if e["type"] == "node_finished"}
    assert finished["long"] == {"$artifact": {
        "path": f"artifacts/sha256-{digest}.txt", "media_type": "text/plain; charset=utf-8",
        "bytes": 4200, "sha256": digest}}
    assert finished["edge"] == "y" * 4096  # exactly 4 KiB stays in the trace
    assert "é" * 100 not in json.dumps(reader.trace("wf-run-7"), ensure_ascii=False)
    assert reader.read_artifact("wf-run-7", finished["long"]["$artifact"]) == data
    assert reader.final_output("wf-run-7") == {"long": "é" * 2100, "edge": "y" * 4096}
    with pytest.raises(OperationFailed, match="invalid artifact reference"):
        reader.read_artifact("wf-run-7", {"path": "../../etc/passwd"})


def test_a_trace_is_followed_from_an_offset(kit: Kit) -> None:
    """`trace_tail` (the UI's live view) from the offset that ends event 3: offsets
    count each event's line in bytes, in a folder and in rows alike."""
    definition = kit.workflow("""
        start: a
        nodes:
          a: {compute: "{{ 'é' }}"}
          b: {compute: "{{ outputs.a }}"}
        edges:
          - {from: a, to: b}
    """)
    out = kit.engine(kit.hold("wf-run-8")).start(definition, run_id="wf-run-8")
    assert out.status == "completed", out.error
    reader = kit.reader()
    whole = reader.read_trace("wf-run-8")
    lines = [len(canonical_json(e).encode()) + 1 for e in whole.events]
    assert whole.valid_bytes == sum(lines)
    offset = sum(lines[:3])
    rest = reader.trace_tail("wf-run-8", offset, 4)
    assert rest.events == whole.events[3:]
    assert rest.valid_bytes == whole.valid_bytes
    assert not rest.torn
    assert reader.trace_tail("wf-run-8", rest.valid_bytes, len(whole.events) + 1).events == []
