"""Launch-level secrecy (seed 000 "Error contract", DESIGN §5, §9).

One agent session on the real stack starts launches whose input, errors and
exceptions carry secrets, and whose activations fail, run, fail at a node, or
get cancelled. Afterwards no secret is in any store row (launch errors, run
events, turn intents), in any message wfrun wrote into the session log, in a
`workflow status` reply, or in `wfrun status --json`; the store file and its WAL
hold no copy of the cleared private input, before and after a checkpoint; and
the store files are private (0600 in a 0700 folder).
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from launch_it_kit import Project

from runner.compiler import WorkflowDefinition, build_catalog
from runner.errors import OperationFailed, WfrunError
from runner.host.runtime._local import Workspace
from runner.host.session import SessionController
from runner.host.session._controller import SessionExecutor
from runner.host.session._reference import JsonlHost, ModelReply, ModelView, ToolCall
from runner.launch import EngineOptions
from runner.launch._intents import DEFERRED_TURN_TYPE
from runner.store import SqliteStore
from runner.testing import build_coordinator

# Not token-shaped: only "no raw input in messages" keeps it out.
SECRET_INPUT = "sekrit-input-5e1f0c2a9b"
TOKEN = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
ENV_PASSWORD = "hunter2-correct-horse"
EXC_SECRET = "exc-only-secret-77c1d0"
KNOWN_SECRET = "configured-secret-31415"  # known to the host (e.g. from its environment)
SECRETS = (SECRET_INPUT, TOKEN, ENV_PASSWORD, EXC_SECRET, KNOWN_SECRET)

TINY = """\
    input: {type: object, required: [task], properties: {task: {type: string}}}
    start: one
    nodes:
      one: {compute: "{{ input.task | length }}"}
"""
# Fails at its node; the error echoes the command (raw input) and an env-like stderr line.
LEAKY = """\
    input: {type: object, required: [task], properties: {task: {type: string}}}
    start: deploy
    nodes:
      deploy:
        action:
          use_shell: true
          shell: "echo 'DB_PASSWORD=@PW@ API_KEY=@KEY@' >&2; echo {{ input.task }} >&2; exit 3"
""".replace("@PW@", ENV_PASSWORD).replace("@KEY@", TOKEN)


class ArmedResolver:
    """The workspace, plus one planned failure for the next compile (the activation)."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.armed: BaseException | None = None

    def compile(self, ref: str) -> tuple[WorkflowDefinition, str]:
        exc, self.armed = self.armed, None
        if exc is not None:
            raise exc
        return self.ws.compile(ref)


@dataclass
class Plan:
    workflow: str = "tiny"
    arm: BaseException | None = None
    cancel: bool = False


def secrets_in(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def file_hits(path: Path) -> list[str]:
    """Secrets in a file's bytes, read by another process: closing any descriptor of
    the store file in this process would drop the POSIX locks SQLite holds on it."""
    if not path.exists():
        return []
    data = subprocess.run(["cat", str(path)], capture_output=True, timeout=30,
                          check=True).stdout
    return [s for s in SECRETS if s.encode() in data]


class Session:
    def __init__(self, project: Project) -> None:
        root = project.root
        self.project = project
        self.plan = Plan()
        self.queued_hits: list[str] = []
        ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
        self.resolver = ArmedResolver(ws)
        self.store = SqliteStore(project.store_path)
        options = EngineOptions(project_root=root)
        self.coordinator = build_coordinator(ws, self.store, "plain", resolver=self.resolver,
                                             runner="security", options=options,
                                             secrets=(KNOWN_SECRET,))
        self.host = JsonlHost(project.session_log, self.model)
        self.controller = SessionController(self.host, self.coordinator)
        options.executor = lambda _record: SessionExecutor(self.controller)
        self.host.quiet = self.controller.wait_quiet
        self.host.listener = self.controller
        self.host.start()

    def model(self, view: ModelView) -> ModelReply:
        reply = view.last_tool_reply
        if reply is None:
            if view.last_role == "user":
                return ToolCall("workflow", {"action": "start", "workflow": self.plan.workflow,
                                             "input": {"task": SECRET_INPUT}})
            return "noted"
        if reply.details.get("action") == "start" and reply.details.get("queued"):
            # While queued, the private input is in the store (so the grep below works).
            self.queued_hits = file_hits(self.project.store_path) + file_hits(self.wal)
            self.resolver.armed = self.plan.arm
            if self.plan.cancel:
                return ToolCall("workflow", {"action": "cancel",
                                             "runId": reply.details["runId"]})
        return "ok"

    @property
    def wal(self) -> Path:
        return self.project.store_path.with_name("store.sqlite3-wal")

    def start(self, plan: Plan) -> Any:
        self.plan = plan
        before = {r.run_id for r in self.store.launches.query()}
        self.host.prompt(f"please start {plan.workflow}")
        self.controller.wait_quiet()
        [record] = [r for r in self.store.launches.query() if r.run_id not in before]
        assert SECRET_INPUT in self.queued_hits, "the input was never stored privately"
        return record


def all_rows(project: Project) -> str:
    conn = sqlite3.connect(project.store_path.as_uri() + "?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
        return "\n".join(repr(row) for t in tables for row in conn.execute(f"SELECT * FROM {t}"))
    finally:
        conn.close()


@pytest.mark.slow
def test_no_secret_reaches_errors_follow_ups_events_status_or_the_store_files(
        tmp_path: Path) -> None:
    project = Project(tmp_path / "proj")
    project.write_workflow("tiny", TINY)
    project.write_workflow("leaky", LEAKY)
    s = Session(project)

    done = s.start(Plan())
    env_like = s.start(Plan(arm=WfrunError(
        f"cannot load settings: GITHUB_TOKEN={TOKEN} DB_PASSWORD={ENV_PASSWORD} "
        f"for {SECRET_INPUT}")))
    unexpected = s.start(Plan(arm=RuntimeError(f"connect failed: {EXC_SECRET} {TOKEN}")))
    known = s.start(Plan(arm=OperationFailed(f"the vault answered {KNOWN_SECRET}")))
    run_failed = s.start(Plan(workflow="leaky"))
    cancelled = s.start(Plan(cancel=True))

    statuses = {r.run_id: r.status for r in s.store.launches.query()}
    assert statuses == {done.run_id: "done", env_like.run_id: "failed",
                        unexpected.run_id: "failed", known.run_id: "failed",
                        run_failed.run_id: "failed", cancelled.run_id: "cancelled"}
    assert s.project.manifest(run_failed.run_id)["status"] == "failed"  # type: ignore[index]

    # Persisted launch errors: safe, bounded, still useful.
    errors = {r.run_id: (r.error_code, r.error_message) for r in s.store.launches.query()}
    assert errors[env_like.run_id][0] == "activation_failed"
    assert "GITHUB_TOKEN=[redacted]" in str(errors[env_like.run_id][1])
    assert errors[unexpected.run_id] == (
        "activation_failed", "activation failed (RuntimeError); see the host log")
    assert "[redacted]" in str(errors[known.run_id][1])
    # Nothing anywhere in the store: launch rows, run events, intents, notifications.
    assert secrets_in(all_rows(project)) == []
    for record in s.store.launches.query():
        assert record.input_json is None

    # The session log: every message wfrun wrote (follow-ups, tool replies, steps).
    follow_ups = project.custom(DEFERRED_TURN_TYPE)
    assert len(follow_ups) == 4  # three failed starts and one failed run, once each
    assert sorted(f["details"]["runId"] for f in follow_ups) == sorted(
        [env_like.run_id, unexpected.run_id, known.run_id, run_failed.run_id])
    for entry in project.session_entries():
        if entry.get("role") == "assistant":
            continue  # the model's own words (its tool call carries the input it chose)
        assert secrets_in(json.dumps(entry)) == [], entry
    run_fail = next(f for f in follow_ups if f["details"]["runId"] == run_failed.run_id)
    assert "ended with state failed" in run_fail["content"]
    assert "exited with 3" in run_fail["content"]

    # The model's `workflow status` and the CLI's `wfrun status --json`.
    for record in (env_like, unexpected, known, run_failed, cancelled):
        reply = s.controller.on_tool_call("c", "workflow",
                                          {"action": "status", "runId": record.run_id})
        assert secrets_in(reply.content + json.dumps(reply.details, default=str)) == []
    env = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
    env["WFRUN_HOME"] = str(tmp_path / "home")
    for args in ([], *[[r.run_id] for r in (done, env_like, unexpected, known, run_failed,
                                             cancelled)]):
        out = subprocess.run([sys.executable, "-m", "runner", "status", *args, "--json"],
                             cwd=project.root, env=env, capture_output=True, text=True,
                             timeout=30, check=False)
        assert out.returncode == 0, out.stderr
        assert secrets_in(out.stdout + out.stderr) == []
    assert json.loads(subprocess.run(
        [sys.executable, "-m", "runner", "status", known.run_id, "--json"], cwd=project.root,
        env=env, capture_output=True, text=True, timeout=30, check=True).stdout
    )["error"]["code"] == "activation_failed"

    # The bytes of the store file and its WAL: no copy of the cleared input, with no
    # explicit checkpoint (the store is still open, the WAL still in use) ...
    assert s.wal.exists()
    assert file_hits(project.store_path) == []
    assert file_hits(s.wal) == []
    # ... and after one.
    s.store.checkpoint()
    assert file_hits(project.store_path) == []
    assert file_hits(s.wal) == []

    # Private files: 0600 in a 0700 folder, the SQLite sidecars included.
    folder = project.store_path.parent
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for path in (project.store_path, s.wal, project.store_path.with_name("store.sqlite3-shm")):
        assert path.exists()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    s.controller.on_session_shutdown("test")
    s.store.close()
