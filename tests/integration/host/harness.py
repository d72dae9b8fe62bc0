"""A test session: store + workspace + launch coordinator + session controller + JSONL host.

    s = make_session(tmp_path, model, {"hello": HELLO_YAML})
    s.host.prompt("please start hello")      # one user turn, then every follow-up turn
    s.launch(run_id).status                  # the durable row

The model is a plain function `ModelView -> str | ToolCall | list[ToolCall]`
(see `runner.host.session._reference`); `Scripted` builds one from small rules. Nothing
here talks to a real model. The store clock is a `FakeClock` the test controls
(`s.store_clock.advance(...)` expires leases); the engine runs on the system
clock so step deadlines behave normally.

The store is SQLite (`store_url=None`) or the Postgres schema `store_url` names; on
Postgres the URL goes into the project's `.wfrun/config.yaml` (so `wfrun ...` picks it
up the way a user's project does) and run bundles are rows, chosen by
`Workspace.bundle_rows` as the product chooses them. `has_bundle`, `manifest`,
`trace` and `put_manifest` read and write a bundle of either kind.

The API is kept small and stable: other test modules (the crash helpers) import
`make_session`, `Session`, `Scripted` and the workflow texts below.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.clock import FakeClock
from runner.compiler import build_catalog
from runner.engine._agent import CONTRACT_RE
from runner.host.runtime._launches import launch_status
from runner.host.runtime._local import Workspace, store_path
from runner.host.session import SessionController
from runner.host.session._controller import SessionExecutor
from runner.host.session._reference import JsonlHost, Model, ModelReply, ModelView, ToolCall
from runner.launch import EngineOptions, LaunchCoordinator
from runner.store import LaunchRecord, SqliteStore, Store
from runner.testing import build_coordinator

#: One agent step, then done. The step contract arrives as a session message.
AGENT_WF = """
    input:
      type: object
      required: [task]
      properties: {task: {type: string}}
    start: plan
    presentation: "plan ready: {{ outputs.plan.summary }}"
    nodes:
      plan:
        agent:
          prompt: "Plan {{ input.task }}."
          output:
            type: object
            required: [summary]
            properties: {summary: {type: string}}
"""

#: No agent step: a compute node, done at once.
COMPUTE_WF = """
    start: only
    nodes:
      only: {compute: "{{ {'ok': true} }}"}
"""


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


@dataclass
class Session:
    """Everything one test session needs; `restart()` simulates a process restart."""

    root: Path
    host: JsonlHost
    controller: SessionController
    coordinator: LaunchCoordinator
    store: Store
    ws: Workspace
    options: EngineOptions
    store_clock: FakeClock
    model: Model
    session_id: str
    crash: Callable[[str], None] | None = None
    family: list[Session] = field(default_factory=list)  # this session and its restarts
    store_url: str | None = None  # a Postgres schema; None: the project's SQLite file

    # -- workflows -------------------------------------------------------------
    @property
    def workflows_dir(self) -> Path:
        return self.root / ".wfrun" / "workflows"

    def write_workflow(self, name: str, text: str) -> Path:
        path = self.workflows_dir / f"{name}.yaml"
        path.write_text(dedent(text))
        return path

    # -- store views -------------------------------------------------------------
    def launch(self, run_id: str) -> LaunchRecord:
        record = self.store.launches.get(run_id)
        assert record is not None, f"no launch row {run_id}"
        return record

    def launches(self) -> list[LaunchRecord]:
        return self.store.launches.query()

    def status(self, run_id: str) -> dict[str, Any]:
        return launch_status(self.ws, self.store, run_id)

    # -- run bundles (folders on SQLite, rows on Postgres) ------------------------------
    def has_bundle(self, run_id: str) -> bool:
        return self.ws.reader(self.store).exists(run_id)

    def manifest(self, run_id: str) -> dict[str, Any]:
        return self.ws.reader(self.store).manifest(run_id)

    def trace(self, run_id: str) -> list[dict[str, Any]]:
        return self.ws.reader(self.store).trace(run_id)

    def bundle_ids(self) -> list[str]:
        return self.ws.reader(self.store).list_ids()

    def committed(self, sql: str) -> list[tuple[Any, ...]]:
        """`sql` on a new connection of its own: only what is committed, as another
        process sees it."""
        if self.store_url is None:
            import sqlite3

            conn = sqlite3.connect(store_path(self.ws))
            try:
                return conn.execute(sql).fetchall()
            finally:
                conn.close()
        import psycopg

        with psycopg.connect(self.store_url) as pg:
            return pg.execute(sql).fetchall()

    def stored_bytes(self) -> dict[str, bytes]:
        """Everything the store holds at rest: each file of the state folder (the SQLite
        files after a checkpoint, the kept compiled definitions), or each Postgres table
        of the schema as text."""
        if self.store_url is None:
            self.store.checkpoint()  # type: ignore[attr-defined]
            state = store_path(self.ws).parent
            return {str(f.relative_to(state)): f.read_bytes() for f in state.rglob("*")
                    if f.is_file()}
        tables = [name for (name,) in self.committed(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
        return {t: "\n".join(str(r) for r in self.committed(
            f'SELECT t::text FROM "{t}" t')).encode() for t in tables}

    def put_manifest(self, run_id: str, text: str) -> None:
        """Overwrite a bundle's manifest (a test forging what a dead process left)."""
        rows = self.ws.bundle_rows(self.store)
        if rows is None:
            (self.ws.runs_dir / run_id / "manifest.json").write_text(text)
        else:
            rows.put_document(run_id, "manifest", text, None)

    # -- the session log -----------------------------------------------------------
    def messages(self, custom_type: str | None = None) -> list[Any]:
        """Custom (model-visible) messages in the session log, optionally of one type."""
        return [e for e in self.host.read_session_entries() if e.type == "custom_message"
                and (custom_type is None or e.custom_type == custom_type)]

    def tool_results(self) -> list[Any]:
        return [e for e in self.host.read_session_entries()
                if e.type == "message" and e.role == "toolResult"]

    def settle(self, timeout: float = 10.0) -> None:
        """Wait for background work, then run any requested follow-up turns."""
        self.controller.wait_quiet(timeout)
        self.host.run_until_idle()
        self.controller.wait_quiet(timeout)

    # -- lifecycle ----------------------------------------------------------------
    def restart(self, model: Model | None = None, *, start: bool = True,
                crash: Callable[[str], None] | None = None) -> Session:
        """A new process: new store handle, coordinator, controller and host on the
        same store file and session log. The old controller is not shut down (a crash)."""
        again = _build(self.root, model or self.model, session_id=self.session_id,
                       store_clock=self.store_clock, crash=crash, start=start,
                       family=self.family, store_url=self.store_url)
        return again

    def shutdown(self, reason: str = "quit") -> None:
        self.controller.on_session_shutdown(reason)

    def close(self) -> None:
        """Stop background runs of this session and every restart of it; close stores."""
        for s in self.family:
            thread = s.controller._thread
            if thread is not None and thread.is_alive():
                act = s.controller.active
                if act is not None:
                    act.control.cancel("test teardown")
                thread.join(timeout=5)
        for s in self.family:
            s.store.close()


def make_session(tmp_path: Path, model: Model, workflows: dict[str, str], *,
                 session_id: str = "session-1", store_clock: FakeClock | None = None,
                 crash: Callable[[str], None] | None = None, start: bool = True,
                 store_url: str | None = None) -> Session:
    """A project under `tmp_path/proj` with `workflows` (name -> YAML), and a started session."""
    root = tmp_path / "proj"
    wf_dir = root / ".wfrun" / "workflows"
    wf_dir.mkdir(parents=True, exist_ok=True)
    for name, text in workflows.items():
        (wf_dir / f"{name}.yaml").write_text(dedent(text))
    if store_url is not None:
        (root / ".wfrun" / "config.yaml").write_text(f"store: '{store_url}'\n")
    return _build(root, model, session_id=session_id, store_clock=store_clock or FakeClock(),
                  crash=crash, start=start, family=[], store_url=store_url)


def open_test_store(ws: Workspace, store_url: str | None, clock: FakeClock) -> Store:
    """The session's store on the test's clock: the SQLite file, or the Postgres schema."""
    if store_url is None:
        return SqliteStore(store_path(ws), clock=clock)
    from runner.store.postgres import PostgresStore

    return PostgresStore(store_url, clock=clock, pool_size=2)


def _build(root: Path, model: Model, *, session_id: str, store_clock: FakeClock,
           crash: Callable[[str], None] | None, start: bool, family: list[Session],
           store_url: str | None = None) -> Session:
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun" / "state")
    store = open_test_store(ws, store_url, store_clock)
    options = EngineOptions(project_root=root)
    coordinator = build_coordinator(ws, store, "plain", runner=f"test:{session_id}",
                                    options=options, crash=crash)
    host = JsonlHost(root / "sessions" / f"{session_id}.jsonl", model, sid=session_id)
    controller = SessionController(host, coordinator,
                                   status=lambda run_id: launch_status(ws, store, run_id))
    options.executor = lambda _record: SessionExecutor(controller)
    options.notifications = controller.notification_sink()
    host.listener = controller
    host.quiet = controller.wait_quiet
    session = Session(root, host, controller, coordinator, store, ws, options, store_clock,
                      model, session_id, crash, family, store_url)
    family.append(session)
    if start:
        host.start("resume" if len(host.read_session_entries()) else "startup")
    return session


# -- scripted models --------------------------------------------------------------

Rule = Callable[[ModelView], ModelReply | None]


class Scripted:
    """A model from rules tried in order; the first that returns a reply wins.

    After any tool reply in the same turn the model ends its turn with text, unless
    a rule claims the view first (rules see `view.last_tool_reply`). Every view the
    model saw is kept in `views`, every reply in `replies`.
    """

    def __init__(self, *rules: Rule, done: str = "ok") -> None:
        self.rules = list(rules)
        self.done = done
        self.views: list[ModelView] = []
        self.replies: list[ModelReply] = []

    def __call__(self, view: ModelView) -> ModelReply:
        self.views.append(view)
        for rule in self.rules:
            reply = rule(view)
            if reply is not None:
                self.replies.append(reply)
                return reply
        self.replies.append(self.done)
        return self.done


def on_user(pattern: str, call: ToolCall | Callable[[ModelView], ToolCall]) -> Rule:
    """Call a tool once when the latest user/custom message matches `pattern`."""
    rx = re.compile(pattern)

    def rule(view: ModelView) -> ModelReply | None:
        if view.last_tool_reply is not None or not rx.search(view.last_user_text):
            return None
        return call(view) if callable(call) else call
    return rule


def once(rule: Rule) -> Rule:
    """A rule that fires at most once."""
    fired = [False]

    def wrapped(view: ModelView) -> ModelReply | None:
        if fired[0]:
            return None
        reply = rule(view)
        if reply is not None:
            fired[0] = True
        return reply
    return wrapped


def start_call(workflow: str, task: Any = "x", **extra: Any) -> ToolCall:
    args: dict[str, Any] = {"action": "start", "workflow": workflow, **extra}
    if task is not None:
        args["input"] = {"task": task} if not isinstance(task, dict) else task
    return ToolCall("workflow", args)


def submit_steps(output: Callable[[re.Match[str]], Any] | Any = None) -> Rule:
    """Submit the step named by the latest step contract (output from `output`)."""

    def rule(view: ModelView) -> ModelReply | None:
        if view.last_tool_reply is not None:
            return None
        found = list(CONTRACT_RE.finditer(view.last_user_text))
        if not found:
            return None
        m = found[-1]
        value = output(m) if callable(output) else output
        if value is None:
            value = {"summary": f"done {m.group('step')}"}
        return ToolCall("workflow", {"action": "submit", "step": m.group("step"),
                                     "attempt": m.group("attempt"), "output": value})
    return rule


def reply_text(entries: list[Any]) -> list[str]:
    return [str(e.content) for e in entries]


# -- crashes and the CLI ----------------------------------------------------------------


class Crash(BaseException):
    """A simulated process death at a named point (not caught by `except Exception`)."""


def crash_at(point: str, times: int = 1) -> Callable[[str], None]:
    """A coordinator crash hook that raises `Crash` the first `times` passes of `point`."""
    left = [times]

    def hook(name: str) -> None:
        if name == point and left[0] > 0:
            left[0] -= 1
            raise Crash(point)
    return hook


def drop_fds_under(folder: Path) -> int:
    """Close this process's file descriptors on files under `folder` (Linux).

    A simulated crash leaves the dead "process's" run-bundle lock open in this one;
    a real crash releases it with the process. Returns how many were closed.
    """
    import os

    closed = 0
    prefix = str(folder.resolve())
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(prefix):
            try:
                os.close(int(name))
                closed += 1
            except OSError:
                pass
    return closed


@dataclass(frozen=True)
class CliResult:
    code: int
    stdout: str
    stderr: str


def wfrun(root: Path, *args: str) -> CliResult:
    """Run a `wfrun` command in-process against the project at `root`."""
    from click.testing import CliRunner

    from runner.cli import definitions, launches, runs  # noqa: F401  (registers commands)
    from runner.cli.app import cli

    result = CliRunner().invoke(cli, ["--project", str(root), *args], catch_exceptions=False)
    return CliResult(result.exit_code, result.stdout, result.stderr)
