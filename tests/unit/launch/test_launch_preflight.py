"""LaunchCoordinator.prepare: every check before the reply, nothing stored when one fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.clock import FakeClock
from runner.compiler import build_catalog
from runner.errors import ConflictError, DefinitionInvalid, InputError, NotFoundError
from runner.host.runtime._local import Workspace
from runner.launch import LaunchCoordinator, PreflightError
from runner.launch._endings import classify as _classify
from runner.store import SqliteStore, StoreUnavailable
from runner.testing import build_coordinator

pytestmark = pytest.mark.timeout(10)
WF = """\
input: {type: object, required: [task], properties: {task: {type: string}}}
start: a
nodes:
  a: {compute: "{{ input.task }}"}
"""


class _Broken:
    """A launch queue whose writes fail like a locked or vanished database."""

    def __init__(self, real: Any, fail: str) -> None:
        self.real, self.fail = real, fail

    def __getattr__(self, name: str) -> Any:
        if name == self.fail:
            def boom(*_a: Any, **_k: Any) -> Any:
                raise StoreUnavailable("database is locked (password=hunter2hunter2)")
            return boom
        return getattr(self.real, name)


class _Store:
    def __init__(self, real: SqliteStore, fail: str) -> None:
        self.real = real
        self.launches = _Broken(real.launches, fail)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.fixture
def env(tmp_path: Path) -> tuple[Workspace, SqliteStore, LaunchCoordinator]:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "w.yaml").write_text(WF)
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun" / "state")
    store = SqliteStore(tmp_path / "store.sqlite3", clock=FakeClock())
    coordinator = build_coordinator(ws, store, "plain", runner="r")
    yield ws, store, coordinator
    store.close()


@pytest.mark.parametrize("fail", ["find_session_reservation", "enqueue"])
def test_store_unavailable_is_a_preflight_error_with_a_safe_message(env: Any,
                                                                    fail: str) -> None:
    ws, store, _ = env
    coordinator = build_coordinator(ws, _Store(store, fail), "plain",  # type: ignore[arg-type]
                                    runner="r")
    with pytest.raises(PreflightError) as caught:
        coordinator.prepare("w", {"task": "x"}, session_id="s1")
    assert caught.value.code == "store_unavailable"
    assert "hunter2hunter2" not in caught.value.message
    assert caught.value.message.startswith("the workflow store is unavailable")
    assert store.launches.query() == []


def _parent(ws: Workspace, run_id: str, **manifest: Any) -> None:
    folder = ws.runs_dir / run_id
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_continuation_preflight_checks_the_parent_and_its_source(env: Any) -> None:
    ws, store, coordinator = env
    digest = ws.compile("w")[0].digest
    _parent(ws, "w-done", status="completed", definition_digest=digest)
    _parent(ws, "w-old", status="waiting", definition_digest="sha256:0")
    cases = [("w-missing", "workflow_not_found", "no run 'w-missing' to continue"),
             ("w-done", "activation_failed", "is completed, not waiting at a checkpoint"),
             ("w-old", "source_changed", "the workflow changed since run 'w-old' started")]
    for parent, code, text in cases:
        with pytest.raises(PreflightError) as caught:
            coordinator.prepare("w", "yes", session_id="s1", parent_run_id=parent)
        assert (caught.value.code, text in caught.value.message) == (code, True), parent
    assert store.launches.query() == []
    _parent(ws, "w-ok", status="waiting", definition_digest=digest)
    record = coordinator.prepare("w", "yes", session_id="s1", parent_run_id="w-ok")
    assert record.parent_run_id == "w-ok"
    assert record.input() == "yes"


def test_cancel_refuses_unknown_and_finished_launches(env: Any) -> None:
    _, _store, coordinator = env
    with pytest.raises(NotFoundError):
        coordinator.cancel("w-nope")
    record = coordinator.prepare("w", {"task": "x"})
    assert coordinator.cancel(record.run_id).status == "cancelled"
    with pytest.raises(ConflictError) as caught:
        coordinator.cancel(record.run_id)
    assert "already ended (cancelled)" in caught.value.message
    assert coordinator.claim_next(None) is None  # nothing left to activate


def test_claim_next_treats_an_unavailable_store_as_idle(env: Any) -> None:
    ws, store, _ = env
    coordinator = build_coordinator(ws, _Store(store, "claim_next"),  # type: ignore[arg-type]
                                    "plain", runner="r")
    assert coordinator.claim_next("s1") is None


@pytest.mark.parametrize(("exc", "code", "message"), [
    (NotFoundError("no workflow named 'x'"), "workflow_not_found", "no workflow named 'x'"),
    (DefinitionInvalid("workflow 'x' has 1 error(s)"), "workflow_invalid",
     "workflow 'x' has 1 error(s)"),
    (InputError("the input is invalid: task is required"), "input_invalid",
     "the input is invalid: task is required"),
    (StoreUnavailable("locked at /secret/path"), "store_unavailable",
     "the workflow store is unavailable; try again shortly"),
    (ValueError("token=abc123abc123"), "activation_failed",
     "activation failed (ValueError); see the host log"),
])
def test_startup_failures_map_to_stable_codes(exc: BaseException, code: str,
                                              message: str) -> None:
    assert _classify(exc) == (code, message)
