"""Foreground runs: `wfrun run`, `start --wait`, `resume` and `answer` as launch rows.

A foreground run is "enqueue and claim in one commit, then execute here holding the
claim" (no host ever sees it queued, so none takes it first): the same
row, claim, lease keeper and fence as a run a host activates, so a Ctrl-C parks
the launch (resumed only when asked), a killed one is reclaimed after its lease
by `wfrun host` or `wfrun resume`, and `wfrun cancel` works on it either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.engine import AgentStepExecutor, RunControl, RunOutcome, RunReader
from runner.engine._processes import reap_dead_registries
from runner.engine._runtypes import Observer
from runner.engine._secrets import SecretSource, write_only_fields
from runner.engine._secrets import resolve as resolve_secrets
from runner.errors import (
    DefinitionInvalid,
    InputError,
    MachineFault,
    NotFoundError,
    OperationFailed,
    TemporaryError,
    WfrunError,
)
from runner.launch import LaunchCoordinator, PreflightError, workflow_name
from runner.store import LaunchBook, LaunchRecord, Store

from ._audit import Actor, Done, audited
from ._coordinators import build_coordinator
from ._launches import dead_local_runner
from ._local import Workspace


def foreground_coordinator(ws: Workspace, store: Store, *,
                           executor: AgentStepExecutor | None = None,
                           observer: Observer | None = None,
                           durability: str = "full",
                           secrets: Mapping[str, str] | None = None,
                           use_cache: bool = True) -> LaunchCoordinator:
    """The runner of a foreground run (`wfrun run`, `start --wait`, `resume`, `answer`)."""
    coordinator = build_coordinator(ws, store, "foreground", executor=executor,
                                    observer=observer, durability=durability, given=secrets)
    coordinator.options.use_cache = use_cache
    return coordinator


def prepared(coordinator: LaunchCoordinator, ref: str, value: Any, *,
             parent_run_id: str | None = None, detached: bool = False) -> LaunchRecord:
    """Queue a launch claimed by this process in the same commit (no host can take it
    first), with affinity to it unless `detached`; the claimed record."""
    try:
        return coordinator.prepare_here(ref, value, parent_run_id=parent_run_id,
                                        detached=detached)
    except PreflightError as exc:
        raise preflight_error(exc) from None


def preflight_error(exc: PreflightError) -> WfrunError:
    """A refused start as the CLI's error classes (exit 3 not found, 1 a busy store or
    an invalid definition, as `wfrun validate` exits; 2 anything else the caller should
    fix), with its stable code."""
    text = f"{exc.message} [{exc.code}]"
    if exc.code == "workflow_not_found":
        return NotFoundError(text)
    if exc.code == "workflow_invalid":
        return DefinitionInvalid(text)
    if exc.code == "store_unavailable":
        return TemporaryError(text)
    return InputError(text)


def queue_here(coordinator: LaunchCoordinator, ref: str, value: Any) -> tuple[str, LaunchRecord]:
    """`wfrun start --wait`: one launch queued and claimed here in one commit;
    (workflow name, the claimed record)."""
    record = prepared(coordinator, ref, value, detached=True)  # a fault re-queues it
    return workflow_name(record.workflow_ref), record


def queue_detached(coordinator: LaunchCoordinator, ref: str, value: Any) -> tuple[str, str]:
    """`wfrun start`: one queued detached launch; (workflow name, run id). A writeOnly
    input value is refused: it would stay in this process's memory, out of reach of
    the host that activates the launch (`queue_here` runs it in this process)."""
    if isinstance(value, dict):
        try:
            definition, _ = coordinator.resolver.compile(ref)
        except WfrunError:
            definition = None  # prepare reports it
        secret = [f for f in write_only_fields(definition) if f in value] if definition else []
        if secret:
            raise InputError(f"input field '{secret[0]}' is secret (writeOnly) and is never "
                             "stored, so a host cannot activate this launch with it: use "
                             "`wfrun start --wait` or `wfrun run`, or declare a secret "
                             "(secrets:) that the host reads from its environment")
    try:
        record = coordinator.prepare(ref, value)
    except PreflightError as exc:
        raise preflight_error(exc) from None
    return workflow_name(record.workflow_ref), record.run_id


def queue_answer(coordinator: LaunchCoordinator, run_id: str, answer: Any) -> LaunchRecord:
    """The HTTP API's answer: the waiting run's continuation queued for a host (`wfrun
    answer` runs it here instead)."""
    if not coordinator.reader.exists(run_id):
        raise NotFoundError(f"no run '{run_id}' with a checkpoint to answer")
    manifest = coordinator.reader.manifest(run_id)
    ref = str(manifest.get("workflow_ref") or manifest.get("workflow"))
    try:
        return coordinator.prepare(ref, answer, parent_run_id=run_id)
    except PreflightError as exc:
        raise preflight_error(exc) from None


def execute_here(coordinator: LaunchCoordinator, run: str | LaunchRecord, control: RunControl,
                 *, force: bool = False) -> RunOutcome:
    """Run one launch in this process to its end (or its park): claimed by id here, or
    already claimed (`run` is the record `prepared` returned)."""
    if isinstance(run, LaunchRecord):
        record, run_id = run, run.run_id
    else:
        run_id = run
        row = coordinator.book.get(run_id)
        dead = dead_local_runner(row.runner_id) if row is not None else None
        record = coordinator.claim(run_id, dead_runner=dead)
    outcome = coordinator.execute(record, control=control, force=force)
    if outcome is not None:
        return outcome
    row = coordinator.book.get(run_id)
    fault = coordinator.faults.last
    if fault is not None and row is not None and row.status == "parked":
        raise TemporaryError(f"run {run_id} is parked: {fault.problem}; {fault.todo}, then "
                             f"`wfrun resume {run_id}` continues it")
    if fault is not None and row is not None and row.status == "queued":  # start --wait
        raise TemporaryError(f"run {run_id} did not start: {fault.problem}; it stays queued: "
                             f"{fault.todo}, then `wfrun resume {run_id}` (or a `wfrun host`) "
                             "starts it")
    if fault is not None and row is not None and row.status in ("starting", "running") \
            and coordinator.reader.started(run_id):
        # The store refused to record what the run did (its disk full): the bundle holds
        # it, and the launch is settled from the bundle once the store takes writes.
        raise TemporaryError(f"run {run_id} is not recorded in the store: {fault.problem}; "
                             f"{fault.todo}, then `wfrun resume {run_id}` settles it from its "
                             "run bundle")
    if fault is not None:
        raise MachineFault(f"run {run_id} did not start (nothing ran): {fault.problem}",
                           fault.todo)
    if row is not None and row.status == "failed":
        began = "failed" if row.started_at is not None else "failed to start"
        cause = coordinator.crash_causes.pop(run_id, None)
        # A crash here: this terminal is the runner's log, so it gets the cause itself.
        message = f"the run crashed ({cause})" if cause else row.error_message
        raise OperationFailed(f"run {run_id} {began}: {message} [{row.error_code}]")
    status = row.status if row is not None else "gone"
    raise OperationFailed(f"run {run_id} did not run here ({status}); `wfrun status {run_id}` "
                          "says where it is")


def run_workflow(ws: Workspace, store: Store, ref: str, value: Any, control: RunControl, *,
                 executor: AgentStepExecutor | None = None, observer: Observer | None = None,
                 durability: str = "full",
                 secrets: Mapping[str, str] | None = None,
                 use_cache: bool = True) -> RunOutcome:
    coordinator = foreground_coordinator(ws, store, executor=executor, observer=observer,
                                         durability=durability, secrets=secrets,
                                         use_cache=use_cache)
    _preflight_secrets(coordinator, ref, value)
    return execute_here(coordinator, prepared(coordinator, ref, value), control)


def run_in_store(ws: Workspace, ref: str, value: Any, *,
                 executor: AgentStepExecutor | None = None) -> RunOutcome:
    """One foreground run with a store opened for it and closed after (`wfrun dev
    --run`'s re-runs): a launch row like `wfrun run`'s."""
    from ._local import open_store

    store = open_store(ws)
    try:
        return run_workflow(ws, store, ref, value, RunControl(), executor=executor)
    finally:
        store.close()


def _preflight_secrets(coordinator: LaunchCoordinator, ref: str, value: Any) -> None:
    """This process will run it: a missing or too short secret is refused before
    anything is queued (other problems are the preflight's to report)."""
    try:
        definition, _ = coordinator.resolver.compile(ref)
    except WfrunError:
        return
    resolve_secrets(definition, coordinator.options.secret_source,
                    {} if value is None else value)


def resume_run(ws: Workspace, store: Store, run_id: str, control: RunControl, *,
               force: bool = False, executor: AgentStepExecutor | None = None,
               observer: Observer | None = None,
               secrets: Mapping[str, str] | None = None,
               use_cache: bool = True) -> RunOutcome:
    """An explicit resume: a parked launch, or one whose runner died (lease expired)."""
    # Shell process groups left by a runner that died would run on beside the resume.
    reap_dead_registries(ws.children_dir)
    if LaunchBook(store).get(run_id) is None:
        # Every run is a launch row; one without (a bundle from before that, or a store
        # that was reset) is not run around the queue, where `runs`, `status`, `cancel`
        # and the hosts would not see it. Nothing is changed: its bundle stays readable.
        if not ws.reader(store).exists(run_id):
            raise NotFoundError(f"no run '{run_id}'; `wfrun runs` lists runs")
        raise InputError(f"run {run_id} has no launch row (made before every run had one, "
                         "or its store was reset), so it cannot be resumed; its bundle is "
                         f"kept (`wfrun show {run_id}`): start the workflow again with "
                         "`wfrun run`")
    coordinator = foreground_coordinator(ws, store, executor=executor, observer=observer,
                                         secrets=secrets, use_cache=use_cache)
    _check_secrets(ws, coordinator.reader, run_id, coordinator.options.secret_source)
    return execute_here(coordinator, run_id, control, force=force)


def _check_secrets(ws: Workspace, reader: RunReader, run_id: str, source: SecretSource) -> None:
    """Refuse a resume that lacks a secret before anything is claimed (nothing secret was
    stored, so it must be given again); other problems are left to the resume itself."""
    try:
        if reader.status(run_id) != "running":
            return
        manifest = reader.manifest(run_id)
        definition, _ = ws.compile(str(manifest.get("workflow_ref") or manifest["workflow"]))
        run_input = reader.state(run_id).input
    except (WfrunError, KeyError):
        return
    resolve_secrets(definition, source, run_input)


def answer_run(ws: Workspace, store: Store, run_id: str, answer: Any, control: RunControl, *,
               executor: AgentStepExecutor | None = None,
               observer: Observer | None = None,
               secrets: Mapping[str, str] | None = None,
               actor: Actor | None = None) -> RunOutcome:
    """Continue a waiting run as a new linked launch, run here; with an actor, making
    the continuation is an audited action (recorded before it runs)."""
    coordinator = foreground_coordinator(ws, store, executor=executor, observer=observer,
                                         secrets=secrets)

    def make() -> LaunchRecord:
        manifest = coordinator.reader.manifest(run_id)
        ref = str(manifest.get("workflow_ref") or manifest.get("workflow"))
        return prepared(coordinator, ref, answer, parent_run_id=run_id)

    child = make() if actor is None else audited(
        store, actor, "answer", run_id=run_id, workflow=None, detail={}, do=make,
        done=lambda r: Done(r.run_id, workflow_name(r.workflow_ref)))
    return execute_here(coordinator, child, control)


def start_and_wait(coordinator: LaunchCoordinator, run: str | LaunchRecord, control: RunControl,
                   observer: Observer | None) -> RunOutcome:
    """`wfrun start --wait`: the launch `queue_here` claimed, executed here."""
    coordinator.options.observer = observer
    return execute_here(coordinator, run, control)
