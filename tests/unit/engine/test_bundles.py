"""Run bundles: permissions, ids, artifacts, repair, fencing, source identity, input checks."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from runner._canonical import canonical_json
from runner.clock import FakeClock
from runner.engine import RunControl
from runner.engine._bundle import FolderBundle
from runner.engine._bundlefmt import first_event
from runner.engine._space import FolderSpace
from runner.engine.executors._scripted import ScriptedExecutor
from runner.errors import ClaimLost, InputError, OperationFailed


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


PARKABLE = """
    start: long
    nodes:
      long: {compute: "{{ 'x' * 5000 }}"}
      wait:
        action: {shell: [sh, -c, 'if [ ! -f marker ]; then touch marker; sleep 30; fi']}
      use: {compute: "{{ {'n': outputs.long | length, 'head': outputs.long[:3]} }}"}
    edges:
      - {from: long, to: wait}
      - {from: wait, to: use}
"""


def _parked(env: Any, when: Any, text: str = PARKABLE) -> str:
    d = env.workflow(text)
    control = RunControl()
    when((env.root / "marker").exists, control.park)
    out = env.engine().start(d, control=control)
    assert out.parked
    return str(out.run_id)


def test_bundle_folders_are_0700_and_files_0600(env: Any, when: Any) -> None:
    run_id = _parked(env, when)
    root = env.runs / run_id
    assert _mode(env.runs) == 0o700
    assert _mode(root) == 0o700
    assert _mode(root / "artifacts") == 0o700
    files = [p for p in root.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"manifest.json", "workflow.json", "state.json", "trace.jsonl"} <= names
    assert ".lock" not in names  # the writer locks the folder itself
    assert any(p.parent.name == "artifacts" for p in files)
    for p in files:  # the shared snapshot is read-only from the start (write_snapshot)
        assert _mode(p) == (0o400 if p.name == "workflow.json" else 0o600), p


def test_a_terminal_bundle_is_read_only_and_refuses_writes(env: Any) -> None:
    d = env.workflow("""
        start: a
        nodes:
          a: {compute: "{{ 1 }}"}
    """)
    out = env.engine().start(d)
    root = env.runs / out.run_id
    for name in ("manifest.json", "workflow.json", "state.json", "trace.jsonl"):
        assert _mode(root / name) == 0o400, name
    before = _snapshot(root)
    # A writer opening the ended run (even as root, which file modes do not stop).
    bundle = FolderBundle.open(env.runs, out.run_id)
    try:
        with pytest.raises(OperationFailed, match="immutable"):
            bundle.append([{"seq": 99, "type": "run_started"}], sync=True)
        with pytest.raises(OperationFailed, match="immutable"):
            bundle.replace_state({})
        with pytest.raises(OperationFailed, match="immutable"):
            bundle.write_manifest({})
    finally:
        bundle.close()
    assert _snapshot(root) == before


def test_a_sealed_folder_bundle_refuses_every_write(tmp_path: Path) -> None:
    bundle = FolderSpace(tmp_path / "runs").create("x-20240101T000000Z-00000000")
    bundle.write_manifest({"status": "completed"})
    bundle.append([{"seq": 1, "type": "run_started"}], sync=True)
    bundle.seal()
    with pytest.raises(OperationFailed):
        bundle.append([{"seq": 2, "type": "run_completed"}], sync=True)
    with pytest.raises(OperationFailed):
        bundle.write_artifact(b"data", "text/plain")
    with pytest.raises(OperationFailed):
        bundle.replace_state({})
    bundle.close()


@pytest.mark.parametrize(("title", "shown"), [(None, "w"), ("for {{ input.who }}", "for ada"),
                                              ("{{ input.who.nope.deeper }}", "w")])
def test_the_first_manifest_is_titled_and_the_trace_keeps_what_it_alone_says(
        env: Any, title: str | None, shown: str) -> None:
    """The title renders from the input, and is the workflow's name without one or when
    it does not render; `run_started` carries the manifest fields the trace does not
    already hold (MANIFEST_FIELDS), from which a lost first manifest is rebuilt."""
    from runner.engine._bundlefmt import MANIFEST_FIELDS
    from runner.engine._bundleread import manifest_from_trace

    head = "" if title is None else f"title: {json.dumps(title)}\n"
    d = env.workflow(head + 'start: a\nnodes:\n  a: {compute: "{{ 1 }}"}\n', name="w")
    out = env.engine().start(d, {"who": "ada"})
    manifest = env.manifest(out.run_id)
    assert manifest["title"] == shown
    (started,) = env.events(out.run_id, "run_started")
    kept = started["payload"]["manifest"]
    assert sorted(kept) == sorted(MANIFEST_FIELDS)
    assert kept == {k: manifest[k] for k in MANIFEST_FIELDS}
    rebuilt = manifest_from_trace(out.run_id, started)
    assert rebuilt == {**manifest, "status": "running", "finished_at": None}


def test_run_ids_are_workflow_utc_time_and_8_hex(env: Any) -> None:
    d = env.workflow("""
        start: a
        nodes:
          a: {compute: "{{ 1 }}"}
    """, name="my-flow")
    clock = FakeClock(start=1_700_000_000.0)
    first = env.engine(clock=clock).start(d)
    assert re.fullmatch(r"my-flow-20231114T221320Z-[0-9a-f]{8}", first.run_id)
    clock.advance(3600)
    second = env.engine(clock=clock).start(d)
    assert re.fullmatch(r"my-flow-20231114T231320Z-[0-9a-f]{8}", second.run_id)
    assert sorted([second.run_id, first.run_id]) == [first.run_id, second.run_id]
    assert env.manifest(first.run_id)["run_id"] == first.run_id
    assert all(e["run_id"] == first.run_id for e in env.trace(first.run_id))
    assert [e["seq"] for e in env.trace(first.run_id)] == list(
        range(1, len(env.trace(first.run_id)) + 1))


def test_long_strings_move_to_artifacts_and_come_back_intact(env: Any) -> None:
    d = env.workflow("""
        start: long
        nodes:
          long: {compute: "{{ 'é' * 3000 }}"}
          use:
            compute: "{{ {'n': outputs.long | length, 'same': outputs.long == 'é' * 3000} }}"
          echo:
            action: {shell: [sh, -c, 'printf %s "$1" | wc -c', sh, "{{ outputs.long }}"],
                     parse: "{{ stdout | trim | int }}"}
        edges:
          - {from: long, to: use}
          - {from: use, to: echo}
    """)
    out = env.engine().start(d)
    assert out.status == "completed", out.error
    assert out.state.outputs["use"] == {"n": 3000, "same": True}
    assert out.final_output == 6000  # bytes of 3000 two-byte characters
    root = env.runs / out.run_id
    data = ("é" * 3000).encode()
    digest = hashlib.sha256(data).hexdigest()
    artifact = root / "artifacts" / f"sha256-{digest}.txt"
    assert artifact.read_bytes() == data
    assert "é" * 100 not in (root / "trace.jsonl").read_text()
    assert "é" * 100 not in (root / "state.json").read_text()
    ref = out.state.outputs["long"]["$artifact"]
    assert ref == {"path": f"artifacts/sha256-{digest}.txt",
                   "media_type": "text/plain; charset=utf-8", "bytes": 6000, "sha256": digest}


def test_long_final_output_is_returned_as_the_real_string(env: Any) -> None:
    d = env.workflow("""
        start: long
        nodes:
          long: {compute: "{{ 'y' * 5000 }}"}
    """)
    out = env.engine().start(d)
    assert out.final_output == "y" * 5000
    last = env.trace(out.run_id)[-1]["payload"]["final_output"]
    assert set(last) == {"$artifact"}
    assert last["$artifact"]["bytes"] == 5000


def test_artifact_shaped_user_output_round_trips(env: Any) -> None:
    d = env.workflow("""
        start: a
        nodes:
          a: {compute: "{{ {'$artifact': {'path': 'artifacts/sha256-evil.txt'}} }}"}
          b: {compute: "{{ {'$escaped': outputs.a, 'inner': outputs.a['$artifact'].path} }}"}
          c: {compute: "{{ {'b': outputs.b, 'a': outputs.a} }}"}
        edges:
          - {from: a, to: b}
          - {from: b, to: c}
    """)
    out = env.engine().start(d)
    assert out.status == "completed", out.error
    user_a = {"$artifact": {"path": "artifacts/sha256-evil.txt"}}
    assert out.final_output == {"b": {"$escaped": user_a, "inner": "artifacts/sha256-evil.txt"},
                                "a": user_a}
    # On disk the colliding object is wrapped, so it is never mistaken for a reference.
    finished = [e for e in env.trace(out.run_id) if e["type"] == "node_finished"]
    assert finished[0]["payload"]["output"] == {"$escaped": user_a}


def test_a_torn_trace_tail_is_repaired_on_resume(env: Any, when: Any) -> None:
    run_id = _parked(env, when)
    trace = env.runs / run_id / "trace.jsonl"
    whole = trace.read_bytes()
    half = b'{"seq": 999, "type": "node_fin'
    with open(trace, "ab") as fh:
        fh.write(half)
    out = env.engine().resume(run_id, env.resolver())
    assert out.status == "completed", out.error
    assert out.final_output == {"n": 5000, "head": "xxx"}
    data = trace.read_bytes()
    assert data.startswith(whole)
    assert half not in data
    resumed = env.events(run_id, "run_resumed")[0]["payload"]
    assert resumed["repaired_bytes"] == len(half)
    seqs = [e["seq"] for e in env.trace(run_id)]
    assert seqs == list(range(1, len(seqs) + 1))


def test_a_fenced_writer_raises_claim_lost_and_writes_nothing(env: Any, when: Any) -> None:
    run_id = _parked(env, when)
    root = env.runs / run_id
    before = _snapshot(root)
    with pytest.raises(ClaimLost):
        env.engine(fence=lambda: False).resume(run_id, env.resolver())
    assert _snapshot(root) == before
    bundle = FolderBundle.open(env.runs, run_id, fence=lambda: False)
    try:
        for write in (lambda: bundle.append([{"seq": 1}], sync=True),
                      lambda: bundle.replace_state({}), lambda: bundle.write_manifest({}),
                      lambda: bundle.write_artifact(b"x" * 10, "text/plain"),
                      bundle.repair, bundle.seal):
            with pytest.raises(ClaimLost):
                write()
    finally:
        bundle.close()
    assert _snapshot(root) == before
    # The lost claim released the bundle: a writer that holds the claim can finish it.
    out = env.engine().resume(run_id, env.resolver())
    assert out.status == "completed"


def test_creation_writes_the_snapshot_with_the_first_manifest_under_the_folders_check(
        tmp_path: Path) -> None:
    checks = {"n": 0, "held": True}

    def fence() -> bool:
        checks["n"] += 1
        return checks["held"]

    bundle = FolderSpace(tmp_path).create("r1", fence)
    bundle.write_workflow(canonical_json({"name": "wf"}))
    assert checks["n"] == 1  # the folder's own check; the snapshot is held
    assert not (bundle.root / "workflow.json").exists()
    bundle.write_manifest({"run_id": "r1", "status": "running"})
    assert checks["n"] == 1  # no run yet: the folder's check covers the first manifest
    assert json.loads((bundle.root / "workflow.json").read_text()) == {"name": "wf"}
    assert _mode(bundle.root / "workflow.json") == 0o400
    assert sorted(p.name for p in bundle.root.iterdir()) == ["manifest.json", "workflow.json"]
    bundle.append([{"seq": 1, "type": "run_started"}], sync=True)
    assert checks["n"] == 2  # the write that makes it a run asks
    bundle.close()

    # A claim lost after the folder's check: the bundle stays half-made (no run_started,
    # not one byte of trace), which readers take for no run and a claimant discards.
    lost = FolderSpace(tmp_path).create("r2", fence)
    lost.write_workflow(canonical_json({"name": "wf"}))
    checks["held"] = False
    lost.write_manifest({"run_id": "r2", "status": "running"})
    with pytest.raises(ClaimLost):
        lost.append([{"seq": 1, "type": "run_started"}], sync=True)
    lost.close()
    assert sorted(p.name for p in lost.root.iterdir()) == ["manifest.json", "workflow.json"]
    assert first_event(lost.root, "r2") is None


def test_losing_the_claim_mid_run_stops_writes_and_releases_the_bundle(env: Any) -> None:
    claim = {"held": True, "dropped": False}
    env.write("hooks.py", """
        def drop(ctx):
            open(ctx.project["root"] + "/drop", "w").close()
            return "dropped"
    """)
    d = env.workflow("""
        start: a
        nodes:
          a: {compute: "{{ 1 }}"}
          b: {compute: {call: "./hooks.py:drop"}}
          c: {compute: "{{ 3 }}"}
        edges:
          - {from: a, to: b}
          - {from: b, to: c}
    """)
    snapshots: list[dict[str, bytes]] = []

    def fence() -> bool:
        if not claim["dropped"] and (env.root / "drop").exists():
            claim["held"], claim["dropped"] = False, True
            snapshots.append(_snapshot(env.runs / env.only_run()))
        return claim["held"]

    with pytest.raises(ClaimLost):
        env.engine(fence=fence).start(d)
    run_id = env.only_run()
    assert _snapshot(env.runs / run_id) == snapshots[0]
    assert "node_finished" not in [e["type"] for e in env.trace(run_id) if e.get("node") == "b"]
    claim["held"] = True
    out = env.engine(fence=fence).resume(run_id, env.resolver())
    assert out.status == "completed"
    assert out.final_output == 3


def test_changed_source_refuses_resume_unless_forced(env: Any, when: Any) -> None:
    run_id = _parked(env, when)
    env.write("wf.yaml", PARKABLE.replace("outputs.long[:3]", "outputs.long[:2]"))
    with pytest.raises(InputError, match="changed since run"):
        env.engine().resume(run_id, env.resolver())
    assert "run_resumed" not in env.types(run_id)
    out = env.engine().resume(run_id, env.resolver(), force=True)
    assert out.status == "completed"
    assert out.final_output == {"n": 5000, "head": "xx"}
    payload = env.events(run_id, "run_resumed")[0]["payload"]
    assert payload["forced"] is True
    assert payload["source_mismatch"] is True


def test_resume_of_an_ended_run_is_refused(env: Any) -> None:
    d = env.workflow("""
        start: a
        nodes:
          a: {compute: "{{ 1 }}"}
    """)
    out = env.engine().start(d)
    with pytest.raises(InputError, match="already ended"):
        env.engine().resume(out.run_id, env.resolver())


def test_input_failing_the_schema_creates_no_bundle(env: Any) -> None:
    d = env.workflow("""
        input:
          type: object
          required: [task]
          properties: {task: {type: string}}
        start: a
        nodes:
          a: {compute: "{{ input.task }}"}
    """)
    with pytest.raises(InputError, match="input does not match workflow 'wf'"):
        env.engine().start(d, {"task": 3})
    with pytest.raises(InputError):
        env.engine().start(d, {})
    with pytest.raises(InputError, match="must be JSON"):
        env.engine().start(d, {"task": float("nan")})
    assert not env.runs.exists() or not any(env.runs.iterdir())


def test_state_json_is_a_projection_of_the_trace(env: Any) -> None:
    d = env.workflow("""
        start: a
        nodes:
          a: {compute: "{{ {'v': 1} }}"}
          b: {decision: {question: "?", choices: {x: c}}}
          c: {compute: "{{ outputs.a.v + 1 }}"}
        edges:
          - {from: a, to: b}
    """)
    out = env.engine(executor=ScriptedExecutor({"b": {"route": "x"}})).start(d)
    from runner.engine import fold

    folded = fold(out.run_id, env.trace(out.run_id)).to_json()
    assert env.state_file(out.run_id) == json.loads(json.dumps(folded))
    assert folded["status"] == "completed"
    assert folded["trace_seq"] == len(env.trace(out.run_id))
    manifest = env.manifest(out.run_id)
    assert manifest["status"] == "completed"
    assert manifest["finished_at"]
    assert manifest["definition_digest"] == d.digest
    assert json.loads((env.runs / out.run_id / "workflow.json").read_text()) == json.loads(
        json.dumps(d.snapshot()))


def test_bundle_files_are_not_world_readable_even_with_a_loose_umask(env: Any) -> None:
    old = os.umask(0)
    try:
        d = env.workflow("""
            start: a
            nodes:
              a: {compute: "{{ 'z' * 5000 }}"}
        """)
        out = env.engine().start(d)
    finally:
        os.umask(old)
    root = env.runs / out.run_id
    for p in [root, root / "artifacts", *root.rglob("*")]:
        assert _mode(p) & 0o077 == 0, p


def _create_with_snapshot(runs: Path, run_id: str, snapshot: dict[str, Any]) -> Path:
    bundle = FolderSpace(runs).create(run_id)
    bundle.write_workflow(canonical_json(snapshot))
    bundle.write_manifest({"run_id": run_id, "status": "running"})
    bundle.close()
    return bundle.root / "workflow.json"


def test_runs_of_one_definition_link_one_read_only_snapshot(tmp_path: Path) -> None:
    """A file creation costs ~0.35 ms of kernel CPU here, a link ~0.02 ms: every run of
    one definition links the one copy in runs/.snapshots/, named by its SHA-256."""
    one = _create_with_snapshot(tmp_path, "r1", {"name": "wf", "nodes": [1]})
    two = _create_with_snapshot(tmp_path, "r2", {"name": "wf", "nodes": [1]})
    other = _create_with_snapshot(tmp_path, "r3", {"name": "wf", "nodes": [2]})
    assert one.stat().st_ino == two.stat().st_ino != other.stat().st_ino
    data = one.read_bytes()
    shared = tmp_path / ".snapshots" / f"sha256-{hashlib.sha256(data).hexdigest()}.json"
    assert shared.stat().st_ino == one.stat().st_ino
    assert one.stat().st_nlink == 3
    assert json.loads(two.read_text()) == {"name": "wf", "nodes": [1]}
    assert json.loads(other.read_text()) == {"name": "wf", "nodes": [2]}
    assert _mode(shared) == 0o400
    assert _mode(tmp_path / ".snapshots") == 0o700
    assert sorted(p.name for p in (tmp_path / ".snapshots").iterdir()) == sorted(
        f"sha256-{hashlib.sha256(f.read_bytes()).hexdigest()}.json" for f in (one, other))
    # A rewrite (not a fresh bundle) replaces the link and leaves the shared copy alone.
    bundle = FolderBundle.open(tmp_path, "r2")
    bundle.write_workflow(canonical_json({"name": "wf", "nodes": [9]}))
    bundle.close()
    assert json.loads(two.read_text()) == {"name": "wf", "nodes": [9]}
    assert shared.read_bytes() == data
    assert one.stat().st_nlink == 2


def test_pruning_forgets_a_snapshot_only_when_no_run_links_it(tmp_path: Path) -> None:
    from runner.engine._removal import forget_snapshots

    one = _create_with_snapshot(tmp_path, "r1", {"name": "wf"})
    _create_with_snapshot(tmp_path, "r2", {"name": "wf"})
    shared = next((tmp_path / ".snapshots").iterdir())
    (tmp_path / "r1" / "workflow.json").unlink()
    assert forget_snapshots(tmp_path) == 0
    assert shared.exists()
    (tmp_path / "r2" / "workflow.json").unlink()
    assert forget_snapshots(tmp_path) == 1
    assert not shared.exists()
    # The next run of that definition stores it again.
    again = _create_with_snapshot(tmp_path, "r4", {"name": "wf"})
    assert again.read_bytes() == shared.read_bytes()
    assert again.stat().st_nlink == 2
    assert not one.exists()


@pytest.mark.parametrize("err", [errno.EPERM, errno.EXDEV, errno.EMLINK])
def test_a_file_system_that_refuses_the_link_gets_its_own_snapshot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int) -> None:
    """A link can fail where no copy could: a file system without hard links (EPERM),
    another device, or the inode's link limit (ext4: 65,000; a fresh copy is made)."""
    _create_with_snapshot(tmp_path, "r1", {"name": "wf"})
    real_link, calls = os.link, []

    def link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(Path(dst).name)
        if len(calls) == 1:  # the first link into a run folder is refused
            raise OSError(err, os.strerror(err))
        real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", link)
    path = _create_with_snapshot(tmp_path, "r2", {"name": "wf"})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"name": "wf"}
    first = (tmp_path / "r1" / "workflow.json").stat()
    if err == errno.EMLINK:  # a fresh shared copy, linked by the new run
        assert path.stat().st_ino != first.st_ino
        assert path.stat().st_nlink == 2
        assert first.st_nlink == 1  # the old copy stays with the runs that link it
    else:  # written in place, 0600, as before the shared copies
        assert path.stat().st_nlink == 1
        assert _mode(path) == 0o600


def test_sealing_makes_an_unlinked_snapshot_read_only_and_leaves_a_shared_one_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sealing skips the chmod of a workflow.json that links the shared copy (0400 from
    the start), so a run that had to write its own copy must still get one."""
    linked = FolderSpace(tmp_path).create("r1")
    linked.write_workflow(canonical_json({"name": "wf"}))
    linked.write_manifest({"run_id": "r1", "status": "running"})
    linked.append([{"seq": 1, "type": "run_started"}], sync=True)

    def refused(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "link", refused)  # no hard links here: its own copy
    own = FolderSpace(tmp_path).create("r2")
    own.write_workflow(canonical_json({"name": "wf"}))
    own.write_manifest({"run_id": "r2", "status": "running"})
    own.append([{"seq": 1, "type": "run_started"}], sync=True)
    monkeypatch.undo()
    assert _mode(own.root / "workflow.json") == 0o600
    own.close()  # opened again: its trace is sealed by path, not through an open file
    own = FolderBundle.open(tmp_path, "r2")
    shared = next((tmp_path / ".snapshots").iterdir())
    chmods: list[str] = []
    real_chmod = os.chmod

    def chmod(path: Any, mode: int, *args: Any, **kwargs: Any) -> None:
        chmods.append(os.fspath(path))
        real_chmod(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "chmod", chmod)
    for bundle in (linked, own):
        bundle.replace_state({"status": "completed"})
        bundle.write_manifest({"run_id": bundle.run_id, "status": "completed"})
        bundle.seal()
        bundle.close()
    monkeypatch.undo()
    for root in (linked.root, own.root):
        for name in ("manifest.json", "workflow.json", "state.json", "trace.jsonl"):
            assert _mode(root / name) == 0o400, (root.name, name)
    assert str(linked.root / "workflow.json") not in chmods  # the shared inode untouched
    assert str(own.root / "workflow.json") in chmods
    assert _mode(shared) == 0o400
    assert str(own.root / "trace.jsonl") in chmods
    assert str(linked.root / "trace.jsonl") not in chmods  # fchmod'ed while open

