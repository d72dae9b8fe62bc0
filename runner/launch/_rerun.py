"""`wfrun rerun` as a launch: planned and linked before it is queued, created from its
plan when it activates.

A rerun is a launch like any run (a `queued` row that `runs`, `status`, `cancel`,
the hosts and recovery all see). Its plan (which run, from which node, the `--set`
values, whether a changed definition was accepted) rides in the row's private
launch options, cleared once it runs; by then the new bundle's `run_started`
records it (`rerun`) with the carried results. The link both ways lives in the
store's `workflow_reruns` (written just before the row; a refused enqueue removes
it). The plan is made twice: at the request, so every mistake is refused before
anything is queued, and at activation, from the same immutable old bundle.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from runner.compiler import WorkflowDefinition
from runner.engine import Engine, RunControl, RunReader, new_run_id
from runner.engine._rerun import ItemRows, RerunPlan, plan
from runner.engine._runner import RunDriver
from runner.engine._secrets import write_only_fields
from runner.errors import InputError
from runner.store import LaunchRecord, StoreError

from ._items import item_rows

if TYPE_CHECKING:
    from runner.clock import Clock
    from runner.store import Store

    from ._queue import Resolver


class RerunSite(Protocol):
    """What queueing a rerun needs of a runner (the coordinator; launch/ never imports it)."""

    @property
    def clock(self) -> Clock: ...
    @property
    def reader(self) -> RunReader: ...
    @property
    def resolver(self) -> Resolver: ...
    @property
    def store(self) -> Store: ...

    def prepare(self, ref: str, run_input: Any = None, *, run_id: str | None = None,
                options: dict[str, Any] | None = None) -> LaunchRecord: ...

    def prepare_here(self, ref: str, run_input: Any = None, *, run_id: str | None = None,
                     options: dict[str, Any] | None = None) -> LaunchRecord: ...

#: The launch option that makes a launch a rerun.
OPTION = "rerun"


@dataclass(frozen=True)
class RerunRequest:
    """What `wfrun rerun` (and the HTTP API) asks for."""

    run_id: str
    from_node: str | None = None  # None: the node that failed
    input: Any = None  # None: the old run's input
    set: Mapping[str, Any] = field(default_factory=dict)  # node -> replaced output
    force: bool = False  # accept a changed definition (recorded)


@dataclass(frozen=True)
class RerunQueued:
    record: LaunchRecord  # the new launch (claimed by this process when run here)
    plan: RerunPlan

    @property
    def run_id(self) -> str:
        return self.record.run_id

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.record.run_id, "status": self.record.status,
                **{f"rerun_{k}" if k == "of" else k: v for k, v in self.plan.record().items()}}


def rerun_options(record: LaunchRecord) -> dict[str, Any] | None:
    """The rerun plan a launch row carries, or None for any other launch."""
    options = record.options()
    value = options.get(OPTION) if options else None
    return value if isinstance(value, dict) else None


def queue_rerun(co: RerunSite, request: RerunRequest, *,
                here: bool = False) -> RerunQueued:
    """Plan the rerun (refusing any mistake with nothing stored), link it and queue its
    launch: for any host, or (`here`) claimed by this process in the same commit."""
    manifest = co.reader.manifest(request.run_id)  # NotFoundError: no such run
    ref = str(manifest.get("workflow_ref") or manifest.get("workflow"))
    definition, _ = co.resolver.compile(ref)  # NotFoundError, DefinitionInvalid
    rerun = plan(co.reader, request.run_id, definition, from_node=request.from_node,
                 overrides=request.set, force=request.force,
                 item_rows=item_rows(co.store.fanout))
    value = rerun.input if request.input is None else request.input
    rerun = rerun.for_input(value)
    if request.input is None and isinstance(value, dict):
        hidden = [f for f in write_only_fields(definition) if f in value]
        if hidden:
            raise InputError(f"input field '{hidden[0]}' of run '{request.run_id}' is secret "
                             "(writeOnly) and was never stored; give the input again with "
                             "--input")
    run_id = new_run_id(definition.name, co.clock.now())
    options = {OPTION: {"of": request.run_id, "from": rerun.from_node,
                        "set": dict(request.set), "force": request.force}}
    co.store.reruns.link(run_id, request.run_id, rerun.from_node, forced=rerun.forced,
                         changed_nodes=rerun.changed_nodes)
    try:
        if here:
            record = co.prepare_here(ref, value, run_id=run_id, options=options)
        else:
            record = co.prepare(ref, value, run_id=run_id, options=options)
    except BaseException:
        with contextlib.suppress(StoreError):  # the refusal is the news, not this
            co.store.reruns.unlink(run_id)
        raise
    return RerunQueued(record, rerun)


def create_rerun(reader: RunReader, engine: Engine, record: LaunchRecord,
                 definition: WorkflowDefinition, value: Any, control: RunControl,
                 rows: ItemRows) -> RunDriver:
    """The rerun's bundle, its reused results carried in `run_started`; no node runs yet
    (the coordinator drives it from the plan's node, `RunState.start_at`). `rows` reads
    the old run's item rows (`item_rows`)."""
    options = rerun_options(record)
    assert options is not None
    rerun = plan(reader, str(options["of"]), definition, from_node=str(options["from"]),
                 overrides=options.get("set") or {}, force=bool(options.get("force")),
                 item_rows=rows).for_input(value)
    extra: dict[str, Any] = {"rerun": rerun.record(), "start_at": rerun.from_node}
    if rerun.items:
        extra["reused_items"] = rerun.items
    _, driver = engine.create(definition, value, workflow_ref=record.workflow_ref,
                              run_id=record.run_id, control=control, carried=rerun.carried,
                              extra=extra)
    return driver
