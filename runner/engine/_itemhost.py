"""Items of another runner's fan-out node, run on this host (ADR 0008 phase 2).

A shared node's items (shell bodies of a run no session owns) may be claimed by any
host. Such a host does not hold the parent run: it reads the parent's bundle (never
writes it), folds its trace, resolves its definition and secrets as a resume would,
and so has the node's template values at the visit the items belong to. Each item
then runs through the same code as on the parent's host (`fanout.run_body`).

The parent's trace has one writer, so nothing is written to it here: the item's
output and error reach the parent through its row, its logs (`node_log` payloads,
masked and bounded) through the store's `fanout_logs` in the same transaction, and
the parent records them under `NODE[i]` when its node ends. The live log of a
running item (not a record: a follower's view) goes where the run's own live logs
go on this host, `logs/NODE[i].<attempt>.<stream>` beside its bundle, so `wfrun logs
RUN NODE[i] --follow` on this host streams it whichever process runs the item; a
private temporary folder when that cannot be made.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner._private import private_dirs
from runner._safety import bound, mask_values, redact
from runner.compiler import Node, WorkflowDefinition
from runner.compiler._templates import Scope, TemplateError, TemplateStopped

from ._bundlefmt import LOGS
from ._control import RunControl
from ._engine import Engine
from ._fanout import run_body
from ._fanplan import SHARED_PLANS, _Plan, _plan
from ._items import ItemEnd
from ._livelog import LiveLog
from ._nodecontext import NodeContext, NodeResult
from ._runner import LOG_CAP, RunDriver
from ._secrets import resolve as resolve_secrets
from ._state import fold

Resolve = Callable[[dict[str, Any]], WorkflowDefinition]


class _Recorder:
    """StepLogs and StepUpdates of an item run away from its parent: the live log in a
    private temporary folder (removed with the item), nothing recorded in a trace."""

    def __init__(self, host: ItemHost, node: str, attempt: str) -> None:
        self._host, self._node, self._attempt = host, node, attempt

    def record(self, stdout: str, stderr: str, stdout_cut: bool = False,
               stderr_cut: bool = False, exit_code: int | None = None) -> None:
        """Kept for the parent's trace (its one writer records it when the node ends):
        bounded, stderr redacted and secrets masked as `RunDriver.record_log` does."""
        out, err = bound(stdout, LOG_CAP), bound(redact(stderr), LOG_CAP)
        log = self._host.driver.secrets.mask_json({
            "stdout": out, "stderr": err, "stdout_truncated": stdout_cut or out != stdout,
            "stderr_truncated": stderr_cut or err != stderr, "exit_code": exit_code})
        index = self._host.index_of.get(self._node)
        if index is not None:
            with self._host.lock:
                self._host.logs.setdefault(index, []).append((self._attempt, log))

    def live(self, extra: tuple[str, ...], cap_chars: int) -> LiveLog:
        values = mask_values([*self._host.driver.secrets.masked, *extra])
        return LiveLog(self._host.live, self._node, self._attempt, values,
                       cap_bytes=LOG_CAP, cap_chars=cap_chars)

    def publish(self, kind: str, key: str, data: Any) -> None:
        pass

    def notify(self, notification_id: str, kind: str, message: str,
               channels: tuple[str, ...] = ()) -> None:
        pass

    def prompt_sent(self, kind: str, prompt: str) -> None:
        pass


class ItemHost:
    """One visit of one shared fan-out node of another runner's run, ready to run its
    items here (`FanoutPort` for `run_body`)."""

    def __init__(self, driver: RunDriver, node: Node, visit: int, plan: _Plan,
                 count: int, live: Path | None = None) -> None:
        self.driver, self.node, self.visit, self.plan = driver, node, visit, plan
        self.count = count
        self.scratch = tempfile.mkdtemp(prefix="wfrun-items-")  # 0700
        self.live = live or Path(self.scratch)  # where items' live logs go
        self.lock = threading.Lock()
        self.ctx = driver.node_context(node, "", None)
        self.index_of = {f"{node.id}[{label}]": i for i, label in enumerate(plan.labels)}
        self.logs: dict[int, list[tuple[str, Any]]] = {}  # index -> its attempts' logs

    # -- FanoutPort (what run_body uses of it) ------------------------------------------
    def item_context(self, node: Node, attempt: str, deadline: float | None,
                     values: dict[str, Any], control: RunControl,
                     lock: threading.Lock, span: str | None = None) -> NodeContext:
        d = self.driver
        recorder = _Recorder(self, node.id, attempt)
        return NodeContext(
            run_id=d.run_id, workflow=d.definition.name, node=node, attempt=attempt,
            deadline=deadline, values=values, visit=self.visit, resuming=False,
            control=control, clock=d.clock, secrets=d.secrets, logs=recorder,
            updates=recorder, executor=None, work_dir=d.work_dir, processes=d.processes,
            span=span)

    def template_scope(self, deadline: float | None, control: RunControl) -> Scope:
        d = self.driver
        return Scope(d.definition.template_budget, d.clock.monotonic, deadline, control)

    # -- running ------------------------------------------------------------------------
    def run(self, index: int, control: RunControl) -> ItemEnd | None:
        """Run item `index` to its end (None: a park stopped it), masked like the
        parent's own items (a secret's value never reaches the store)."""
        if not 0 <= index < self.count:
            return ItemEnd(index, "failed", error={"code": "internal_error",
                                                   "message": "no such item"})
        try:
            end = run_body(self.ctx, self, self.plan, index, control,  # type: ignore[arg-type]
                           self.lock)
        except Exception as exc:  # a bug in one item ends that item, never the host
            end = ItemEnd(index, "failed", error={"code": "internal_error",
                                                  "message": type(exc).__name__})
        if end is None:
            return None
        mask = self.driver.secrets.mask_json
        return ItemEnd(end.index, end.outcome, mask(end.output), mask(end.error))

    def take_logs(self, index: int) -> list[tuple[str, Any]]:
        """The logs item `index` recorded here (each attempt's), handed over once."""
        with self.lock:
            return self.logs.pop(index, [])

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def open_item_host(engine: Engine, run_id: str, node_id: str, visit: int, count: int,
                   resolve: Resolve) -> ItemHost | str:
    """Read run `run_id` (never written) and make the ItemHost of `node_id`'s visit
    `visit`, or say why this host cannot run its items (the parent's host will)."""
    manifest = engine.manifest(run_id)
    bundle = engine.space.view(run_id)
    state = fold(run_id, bundle.read_trace())
    if state.status != "running" or state.current_node != node_id \
            or state.visits.get(node_id, 0) != visit:
        return f"run {run_id} is not in {node_id} (visit {visit})"
    definition = resolve(manifest)
    if definition.digest != manifest.get("definition_digest"):
        return f"the workflow of run {run_id} changed since it started"
    node = definition.nodes.get(node_id)
    if node is None:
        return f"run {run_id} has no node {node_id}"
    secrets = resolve_secrets(definition, engine.secret_source, state.input)
    driver = engine._driver(run_id, definition, bundle, state, RunControl(), secrets)
    plan: _Plan | NodeResult | None = SHARED_PLANS.get(run_id, node, visit)
    if plan is None:  # the parent ran elsewhere (or its definition was compiled anew)
        try:
            with driver.scope:
                plan = _plan(node, driver.context(node.scope))
        except (TemplateError, TemplateStopped) as exc:
            return f"run {run_id}: {exc}"
    if isinstance(plan, NodeResult) or len(plan.bodies) != count:
        return f"run {run_id}: {node_id} does not yield its {count} items here"
    return ItemHost(driver, node, visit, plan, count, _live_folder(engine, run_id))


def _live_folder(engine: Engine, run_id: str) -> Path | None:
    """The run's live-log folder on this host (`RunReader.live_log` reads there), made
    0700 if need be; None when it cannot be (the item's logs then stay private)."""
    runs_dir = engine.space.runs_dir
    if not runs_dir.is_dir():
        return None
    folder = runs_dir / run_id / LOGS
    try:
        private_dirs(folder)
    except OSError:
        return None
    return folder
