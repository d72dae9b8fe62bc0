"""A power cut under the commits that do not wait for the disk.

Claims, lease renewals and `mark_running` commit with `synchronous = NORMAL`
(runner/store/domain/_launches.py, `_CLAIM_DURABLE`): a power cut may lose them, and
only them, after the process had acted on them. What the disk then holds is the
store as of its last durable commit (the enqueue) and the bundle as of its last
fsync. These tests build exactly that image (copies of the store files taken after
the enqueue, of the bundle at a point right after an fsync) and restart on it."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from runner.compiler import build_catalog
from runner.host.runtime._local import Workspace
from runner.launch import EngineOptions, LaunchCoordinator
from runner.store import SqliteStore
from runner.testing import build_coordinator

WORKFLOW = """\
    input: {type: object, required: [n], properties: {n: {type: integer}}}
    start: a
    nodes:
      a: {action: {use_shell: true, shell: "echo a {{ input.n }} >> effects.log"}}
      b: {compute: "{{ input.n + 1 }}"}
      c: {action: {use_shell: true, shell: "echo c {{ outputs.b }} >> effects.log"}}
    edges:
      - {from: a, to: b}
      - {from: b, to: c}
"""


class PowerCut(BaseException):
    """Stops the process's work at a named point, as the power going out would."""


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "cut.yaml").write_text(textwrap.dedent(WORKFLOW))
    return root


def _coordinator(root: Path, runner_id: str, **options: Any) -> LaunchCoordinator:
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
    store = SqliteStore(root / ".wfrun" / "state" / "store.sqlite3")
    return build_coordinator(ws, store, "plain", runner=runner_id,
                             options=EngineOptions(project_root=root, **options))


def _copy_store(state: Path, to: Path) -> None:
    to.mkdir()
    for name in ("store.sqlite3", "store.sqlite3-wal"):
        if (state / name).exists():
            shutil.copy2(state / name, to / name)


def _restore(image: Path, state: Path, bundle: Path, bundle_image: Path) -> None:
    for path in state.glob("store.sqlite3*"):
        path.unlink()
    for path in image.iterdir():
        shutil.copy2(path, state / path.name)
    shutil.rmtree(bundle)
    shutil.copytree(bundle_image, bundle)


@pytest.mark.parametrize("point", ["after_running", "between_nodes"])
def test_a_power_cut_that_loses_the_claim_and_running_resumes_from_the_bundle(
        tmp_path: Path, point: str) -> None:
    root = _project(tmp_path)
    state = root / ".wfrun" / "state"
    first = _coordinator(root, "host-one")
    record = first.prepare("cut", {"n": 41})
    run_id = record.run_id
    image = tmp_path / "store-image"
    _copy_store(state, image)  # the last durable commit: the enqueue

    bundle = root / ".wfrun" / "runs" / run_id
    bundle_image = tmp_path / "bundle-image"
    seen: list[str] = []

    def cut(name: str) -> None:
        seen.append(name)
        # Both points follow an fsync of the trace (run_started; a's end with b's
        # start), so the folder as it is now is what the disk holds.
        if name == point:
            shutil.copytree(bundle, bundle_image)
            raise PowerCut(name)

    first.crash = cut
    first.options = EngineOptions(project_root=root, crash_point=cut)
    claimed = first.claim_next(None)
    assert claimed is not None
    with pytest.raises(PowerCut):
        first.execute(claimed)
    first.store.close()
    log = root / "effects.log"
    ran = log.read_text().splitlines() if log.exists() else []
    assert ran == ([] if point == "after_running" else ["a 41"])

    _restore(image, state, bundle, bundle_image)
    second = _coordinator(root, "host-two")
    (row,) = [r for r in second.store.launches.query() if r.run_id == run_id]
    assert (row.status, row.epoch) == ("queued", 0)  # the claim and running are gone
    again = second.claim_next(None)
    assert again is not None
    assert again.run_id == run_id
    outcome = second.execute(again)
    assert outcome is not None
    assert outcome.status == "completed"
    # Nothing lost (the input came back from the bundle's durable run_started: the
    # row's copy is cleared at running), nothing whose end was durable ran twice.
    assert (root / "effects.log").read_text().splitlines() == ["a 41", "c 42"]
    (done,) = [r for r in second.store.launches.query() if r.run_id == run_id]
    assert done.status == "done"
    second.store.close()
