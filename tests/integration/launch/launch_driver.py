"""One agent session on the real launch stack, optionally SIGKILLed at a named point.

    python launch_driver.py PROJECT SESSION_LOG POINT [--prompt TEXT] [--offset SECONDS]
                            [--store URL]

The stack is the production one: `SqliteStore` at PROJECT/.wfrun/state/store.sqlite3
(or, with `--store postgresql://...`, that `PostgresStore` with the run bundles as
rows in it, from `Workspace.bundle_rows` as a host chooses them),
a `Workspace` over PROJECT's workflows, a `LaunchCoordinator` with short leases,
a `SessionController` and a `JsonlHost` whose session log is SESSION_LOG (an
existing log is loaded, like a host restart). The coordinator's crash hook kills
this process with SIGKILL when it passes POINT (`none` never crashes).

With `--prompt`, the user sends that text and the turn (and its follow-ups) run.
Without it, this is a restart: `on_session_start("resume")`, then any follow-up
turns; if the last thing the model was asked to act on is still unanswered (the
process died before its turn), the user says "continue". `--offset` moves the
store's clock forward, so leases a killed process held have expired.

The scripted model: "please start W" -> `workflow start W`; a workflow step ->
`submit`; a "failed to start" follow-up -> start the workflow again. With
"... and break it" in the prompt, the model edits W's source right after the
queued reply (in the same turn), so activation fails with `source_changed`.

Prints one JSON line: launches, turns, errors of the controller.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from runner.clock import SystemClock
from runner.compiler import build_catalog
from runner.engine._agent import CONTRACT_RE
from runner.host.runtime._local import Workspace
from runner.host.session import SessionController
from runner.host.session._controller import SessionExecutor
from runner.host.session._protocol import SessionEntry
from runner.host.session._reference import JsonlHost, ModelReply, ModelView, ToolCall
from runner.launch import EngineOptions
from runner.launch._intents import AGENT_STEP_TYPE, DEFERRED_TURN_TYPE
from runner.store import SqliteStore, Store
from runner.testing import build_coordinator

LEASE_SECONDS = 2.0
TRIGGERS = (AGENT_STEP_TYPE, DEFERRED_TURN_TYPE)


def _trigger(entry: SessionEntry) -> bool:
    if entry.type == "custom_message":
        return entry.custom_type in TRIGGERS
    return entry.type == "message" and entry.role == "user" and entry.content != "continue"


def pending_trigger(entries: list[SessionEntry]) -> SessionEntry | None:
    """The last message the model must act on, if the model has not answered it yet."""
    for i in range(len(entries) - 1, -1, -1):
        if _trigger(entries[i]):
            answered = any(e.type == "message" and e.role == "assistant"
                           for e in entries[i + 1:])
            return None if answered else entries[i]
    return None


class Model:
    def __init__(self, project: Path) -> None:
        self.project = project
        self.workflow = "steady"
        self.break_it = False

    def __call__(self, view: ModelView) -> ModelReply:
        reply = view.last_tool_reply
        if reply is not None:
            if self.break_it and reply.details.get("queued"):
                self.break_it = False
                src = self.project / ".wfrun" / "workflows" / f"{self.workflow}.yaml"
                src.write_text(src.read_text().replace("finished v1", "finished v2"))
            return "ok"
        trigger = pending_trigger(view.entries)
        if trigger is None:
            return "nothing to do"
        text = str(trigger.content)
        if trigger.custom_type == AGENT_STEP_TYPE:
            match = list(CONTRACT_RE.finditer(text))[-1]
            return ToolCall("workflow", {"action": "submit", "step": match.group("step"),
                                         "attempt": match.group("attempt"),
                                         "output": {"summary": "planned"}})
        if trigger.custom_type == DEFERRED_TURN_TYPE and "failed to start" in text:
            return self.start()  # the corrected retry: the source is valid again
        if text.startswith("please start "):
            self.workflow = text.split()[2]
            self.break_it = "break it" in text
            return self.start()
        return "nothing to do"

    def start(self) -> ToolCall:
        return ToolCall("workflow", {"action": "start", "workflow": self.workflow,
                                     "input": {"task": "crash matrix"}})


def open_store(project: Path, url: str | None, offset: float) -> Store:
    """The store on a clock `offset` seconds ahead (leases a killed process held expire)."""
    clock = Ahead(offset)
    if url is None:
        return SqliteStore(project / ".wfrun" / "state" / "store.sqlite3", clock=clock)
    from runner.store.postgres import PostgresStore

    return PostgresStore(url, clock=clock, pool_size=2)


class Ahead(SystemClock):
    """The system clock, `offset` seconds ahead."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def now(self) -> float:
        return super().now() + self.offset


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("project", type=Path)
    ap.add_argument("session_log", type=Path)
    ap.add_argument("point")
    ap.add_argument("--prompt")
    ap.add_argument("--offset", type=float, default=0.0)
    ap.add_argument("--store", default=None, help="a postgresql:// URL; default SQLite")
    args = ap.parse_args(argv)
    project: Path = args.project.resolve()
    point: str = args.point

    def crash(name: str) -> None:
        if name == point:
            os.kill(os.getpid(), signal.SIGKILL)

    ws = Workspace(build_catalog("workflows", project, None), project, project / ".wfrun")
    store = open_store(project, args.store, args.offset)
    model = Model(project)
    host = JsonlHost(args.session_log, model)
    options = EngineOptions(project_root=project)
    coordinator = build_coordinator(ws, store, "plain", runner=f"driver-{os.getpid()}",
                                    options=options, lease_seconds=LEASE_SECONDS,
                                    renew_every=LEASE_SECONDS / 4, crash=crash)
    controller = SessionController(host, coordinator)
    options.executor = lambda _record: SessionExecutor(controller)
    options.notifications = controller.notification_sink()
    host.quiet = controller.wait_quiet
    host.listener = controller
    if args.prompt:
        host.start("startup")
        host.prompt(args.prompt)
    else:
        host.start("resume")
        host.run_until_idle()
        if pending_trigger(host.read_session_entries()) is not None:
            host.prompt("continue")
    controller.wait_quiet()
    host.run_until_idle()
    controller.on_session_shutdown("exit")
    launches = [{"run_id": r.run_id, "status": r.status, "error_code": r.error_code,
                 "runner": r.runner_id} for r in store.launches.query()]
    print(json.dumps({"launches": launches, "turns": host.turns, "errors": controller.errors}))
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
