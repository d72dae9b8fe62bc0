"""RunReader: the one way other layers read run bundles (real bundles from the Engine)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from runner.engine import RunReader, RunState
from runner.engine import _engine as engine_module
from runner.engine import _reader as reader_module
from runner.engine._bundle import FolderBundle
from runner.engine._space import FolderSpace
from runner.engine.executors._scripted import ScriptedExecutor
from runner.errors import InputError, NotFoundError, OperationFailed

LONG = "z" * 5000  # over the 4 KiB artifact threshold

AGENT_WF = """
    start: write
    nodes:
      write:
        agent:
          prompt: "Write it."
          output: {type: string}
"""
SMALL_WF = """
    start: one
    nodes:
      one: {compute: "{{ 1 }}"}
      two: {compute: "{{ {'n': outputs.one + 1} }}"}
    edges: [{from: one, to: two}]
"""
WAITS_WF = """
    start: ask
    nodes:
      ask: {checkpoint: "Ship it?"}
      after: {compute: "{{ outputs.ask.answer }}"}
    edges: [{from: ask, to: after}]
"""


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mode)
            for p in sorted(root.rglob("*")) if p.is_file()}


def _writable(path: Path) -> Path:
    os.chmod(path, 0o600)  # a sealed bundle's files are read-only
    return path


def _agent_run(env: Any) -> str:
    d = env.workflow(AGENT_WF)
    out = env.engine(executor=ScriptedExecutor({"write": LONG})).start(d)
    assert out.status == "completed", out.error
    return str(out.run_id)


def _half_made(env: Any, run_id: str = "half-20270101T000000Z-00000000") -> str:
    """A bundle as a crash leaves it between the manifest and `run_started`."""
    bundle = FolderSpace(env.runs).create(run_id)
    try:
        bundle.write_manifest({"run_id": run_id, "workflow": "half", "status": "running"})
    finally:
        bundle.close()
    return run_id


def test_a_completed_run_reads_back_whole(env: Any) -> None:
    run_id = _agent_run(env)
    reader = RunReader(env.runs)
    assert reader.runs_dir == env.runs
    assert reader.exists(run_id)
    assert reader.started(run_id)
    assert reader.status(run_id) == "completed"
    manifest = reader.manifest(run_id)
    assert manifest == env.manifest(run_id)
    assert manifest["run_id"] == run_id
    assert manifest["workflow"] == "wf"
    events = reader.trace(run_id)
    assert events == env.trace(run_id)
    assert events[0]["type"] == "run_started"
    assert events[-1]["type"] == "run_completed"
    state = reader.state(run_id)
    assert isinstance(state, RunState)
    assert state.run_id == run_id
    assert state.status == "completed"
    assert state.trace_seq == len(events)
    assert state.to_json() == env.state_file(run_id)
    assert reader.read_trace(run_id).torn is False


def test_an_artifact_backed_final_output_is_the_real_string(env: Any) -> None:
    run_id = _agent_run(env)
    reader = RunReader(env.runs)
    ref = reader.state(run_id).final_output  # the fold keeps the reference
    assert set(ref) == {"$artifact"}
    assert ref["$artifact"]["bytes"] == len(LONG)
    assert reader.final_output(run_id) == LONG
    assert reader.read_artifact(run_id, ref["$artifact"]) == LONG.encode()
    # `live` makes any value from this run's trace real, nested or not.
    assert reader.live(run_id, {"a": [ref]}) == {"a": [LONG]}
    assert reader.live(run_id, {"plain": 1}) == {"plain": 1}


def test_a_small_final_output_needs_no_artifact(env: Any) -> None:
    out = env.engine().start(env.workflow(SMALL_WF))
    reader = RunReader(env.runs)
    assert reader.final_output(out.run_id) == {"n": 2}
    assert not (env.runs / out.run_id / "artifacts").exists()


def test_bad_or_missing_artifacts_fail_cleanly(env: Any) -> None:
    run_id = _agent_run(env)
    reader = RunReader(env.runs)
    ref = reader.state(run_id).final_output["$artifact"]
    with pytest.raises(OperationFailed, match="invalid artifact reference"):
        reader.read_artifact(run_id, {"path": "../../etc/passwd"})
    with pytest.raises(OperationFailed, match="invalid artifact reference"):
        reader.read_artifact(run_id, {"path": "artifacts/sha256-x/../../manifest.json"})
    (env.runs / run_id / ref["path"]).unlink()
    with pytest.raises(OperationFailed, match="missing its artifact"):
        reader.final_output(run_id)


def test_a_half_made_bundle_exists_but_has_not_started(env: Any) -> None:
    run_id = _half_made(env)
    reader = RunReader(env.runs)
    assert reader.exists(run_id)
    assert not reader.started(run_id)
    assert reader.status(run_id) is None
    assert reader.manifest(run_id)["workflow"] == "half"
    assert reader.trace(run_id) == []
    assert reader.state(run_id) == RunState(run_id)
    assert reader.final_output(run_id) is None
    assert reader.list_ids() == [run_id]


def test_a_bare_folder_exists_without_a_manifest(env: Any) -> None:
    (env.runs / "bare-20270101T000000Z-00000000").mkdir(parents=True)
    reader = RunReader(env.runs)
    assert reader.exists("bare-20270101T000000Z-00000000")
    assert not reader.started("bare-20270101T000000Z-00000000")
    assert reader.status("bare-20270101T000000Z-00000000") is None
    with pytest.raises(NotFoundError, match="no run 'bare-"):
        reader.manifest("bare-20270101T000000Z-00000000")


def test_a_torn_trace_tail_is_left_out_and_not_repaired(env: Any) -> None:
    out = env.engine().start(env.workflow(SMALL_WF))
    reader = RunReader(env.runs)
    whole = reader.trace(out.run_id)
    trace = _writable(env.runs / out.run_id / "trace.jsonl")
    with open(trace, "ab") as fh:
        fh.write(b'{"seq": 999, "type": "node_fin')
    data = trace.read_bytes()
    read = reader.read_trace(out.run_id)
    assert read.torn
    assert read.events == whole == reader.trace(out.run_id)
    assert read.valid_bytes == len(data) - len(b'{"seq": 999, "type": "node_fin')
    assert reader.status(out.run_id) == "completed"
    assert reader.final_output(out.run_id) == {"n": 2}
    assert trace.read_bytes() == data  # reading never repairs


def test_a_torn_first_event_means_not_started(env: Any) -> None:
    run_id = _half_made(env)
    (env.runs / run_id / "trace.jsonl").write_bytes(b'{"seq": 1, "type": "run_sta')
    reader = RunReader(env.runs)
    assert not reader.started(run_id)
    assert reader.status(run_id) is None
    assert reader.trace(run_id) == []


def test_status_is_the_folded_trace_not_the_manifest(env: Any) -> None:
    out = env.engine().start(env.workflow(SMALL_WF))
    manifest = _writable(env.runs / out.run_id / "manifest.json")
    value = json.loads(manifest.read_text())
    value["status"] = "running"  # as if the process died before the manifest write
    manifest.write_text(json.dumps(value))
    reader = RunReader(env.runs)
    assert reader.manifest(out.run_id)["status"] == "running"
    assert reader.status(out.run_id) == "completed"


def test_a_damaged_manifest_is_operation_failed(env: Any) -> None:
    out = env.engine().start(env.workflow(SMALL_WF))
    manifest = _writable(env.runs / out.run_id / "manifest.json")
    reader = RunReader(env.runs)
    manifest.write_text("{not json")
    with pytest.raises(OperationFailed, match="damaged manifest"):
        reader.manifest(out.run_id)
    manifest.write_text("[1, 2]")
    with pytest.raises(OperationFailed, match="damaged manifest"):
        reader.manifest(out.run_id)


def test_a_torn_first_manifest_of_a_bundle_being_made_is_no_run_yet(env: Any) -> None:
    """The first manifest is written in place (no temp file and rename): until
    `run_started` is durable, a torn one means the bundle is being made, as a missing
    one does, not a damaged run."""
    root = env.runs / "wf-20270101T000000Z-0000abcd"
    root.mkdir(parents=True)
    (root / "manifest.json").write_text('{"schema": "wfrun.run-bun')
    reader = RunReader(env.runs)
    with pytest.raises(NotFoundError, match="no run"):
        reader.manifest(root.name)
    assert reader.exists(root.name)
    assert not reader.started(root.name)


def test_missing_runs_are_not_found(env: Any) -> None:
    env.engine().start(env.workflow(SMALL_WF))
    reader = RunReader(env.runs)
    missing = "wf-20270101T000000Z-00000000"
    assert not reader.exists(missing)
    assert not reader.started(missing)
    assert reader.status(missing) is None
    assert reader.continued_by(missing) is None
    for read in (reader.manifest, reader.trace, reader.state, reader.final_output):
        with pytest.raises(NotFoundError, match=f"no run '{missing}'"):
            read(missing)
    with pytest.raises(NotFoundError):
        reader.read_artifact(missing, {"path": "artifacts/sha256-0.txt"})


@pytest.mark.parametrize("bad", ["", "a/b", "../x", ".continued", ".lock", "x\0y"])
def test_malformed_run_ids_are_input_errors_and_never_exist(env: Any, bad: str) -> None:
    env.engine().start(env.workflow(SMALL_WF))
    (env.runs / ".continued").mkdir(exist_ok=True)
    reader = RunReader(env.runs)
    for read in (reader.manifest, reader.trace, reader.state, reader.final_output):
        with pytest.raises(InputError, match="is not a run id") as info:
            read(bad)
        assert not isinstance(info.value, NotFoundError)
    assert not reader.exists(bad)
    assert not reader.started(bad)
    assert reader.status(bad) is None
    assert reader.continued_by(bad) is None


def test_list_ids_is_sorted_and_skips_dot_entries_and_files(env: Any) -> None:
    reader = RunReader(env.runs)
    assert reader.list_ids() == []  # no runs folder yet
    engine = env.engine()
    parent = engine.start(env.workflow(WAITS_WF))
    child = engine.answer(parent.run_id, "yes", env.resolver())
    half = _half_made(env, "aaa-20270101T000000Z-00000000")
    (env.runs / "stray.txt").write_text("not a run")
    assert (env.runs / ".continued").is_dir()
    assert reader.list_ids() == sorted([parent.run_id, child.run_id, half])


def test_continued_by_names_the_run_that_answered(env: Any) -> None:
    engine = env.engine()
    parent = engine.start(env.workflow(WAITS_WF))
    reader = RunReader(env.runs)
    assert reader.status(parent.run_id) == "waiting"
    assert reader.continued_by(parent.run_id) is None
    assert not reader.answered(parent.run_id)
    child = engine.answer(parent.run_id, "shipped", env.resolver())
    assert child.status == "completed", child.error
    assert reader.continued_by(parent.run_id) == child.run_id
    assert reader.answered(parent.run_id)
    assert reader.continued_by(child.run_id) is None
    assert reader.manifest(child.run_id)["parent_run_id"] == parent.run_id
    assert reader.state(child.run_id).parent_run_id == parent.run_id
    assert reader.final_output(child.run_id) == "shipped"
    assert reader.status(parent.run_id) == "waiting"  # the parent stays a sealed record


def test_an_empty_continuation_marker_is_answered_but_names_no_run(env: Any) -> None:
    # `prepare_answer` creates the marker before the continuation and fills it right after.
    parent = env.engine().start(env.workflow(WAITS_WF))
    (env.runs / ".continued").mkdir()
    (env.runs / ".continued" / parent.run_id).write_text("")
    reader = RunReader(env.runs)
    assert reader.answered(parent.run_id)
    assert reader.continued_by(parent.run_id) is None


def test_the_marker_folder_is_the_engines(env: Any) -> None:
    assert reader_module.CONTINUED == engine_module.CONTINUED


def test_reading_writes_nothing(env: Any) -> None:
    run_id = _agent_run(env)
    half = _half_made(env)
    before = _snapshot(env.runs)
    reader = RunReader(env.runs)
    for rid in (run_id, half):
        reader.exists(rid)
        reader.started(rid)
        reader.status(rid)
        reader.manifest(rid)
        reader.trace(rid)
        reader.state(rid)
        reader.final_output(rid)
        reader.continued_by(rid)
    reader.list_ids()
    assert _snapshot(env.runs) == before


def test_a_manifest_a_power_loss_emptied_or_tore_is_rebuilt_from_the_trace(env: Any) -> None:
    """The first manifest is not fsync'd and the final one is rewritten in place: a
    started bundle whose manifest is missing, empty, zeroed or cut short reads as the
    trace says, the same manifest its writer wrote."""
    out = env.engine().start(env.workflow(SMALL_WF))
    path = _writable(env.runs / out.run_id / "manifest.json")
    text = path.read_text()
    written = json.loads(text)
    assert written["status"] == "completed"
    reader = RunReader(env.runs)
    for damaged in ("", "\0" * len(text), text[:7], text[: len(text) // 2], text[:-3]):
        path.write_text(damaged)
        assert reader.manifest(out.run_id) == written, repr(damaged)
    path.unlink()
    assert reader.manifest(out.run_id) == written
    bundle = FolderBundle.open(env.runs, out.run_id)  # resume and removal find it too
    try:
        assert bundle.read_manifest() == written
    finally:
        bundle.close()


def test_a_started_runs_first_manifest_is_rebuilt_as_it_was_written(env: Any) -> None:
    out = env.engine().start(env.workflow(SMALL_WF))
    run_id = out.run_id
    path = _writable(env.runs / run_id / "manifest.json")
    first = {**json.loads(path.read_text()), "status": "running", "finished_at": None}
    trace = env.runs / run_id / "trace.jsonl"
    _writable(trace).write_text(trace.read_text().splitlines()[0] + "\n")  # run_started
    path.write_text("")
    assert RunReader(env.runs).manifest(run_id) == first
