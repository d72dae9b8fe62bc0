"""The engine's entry points: start a run, resume a parked one, continue a waiting one."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.clock import Clock, SystemClock, compact_utc, iso
from runner.compiler import WorkflowDefinition
from runner.compiler._jsonschemas import validation_errors
from runner.compiler._kinds import ends, kind_of
from runner.compiler._templates import Scope, TemplateError, render_text
from runner.errors import InputError, OperationFailed

from ._bundlefmt import BUNDLE_SCHEMA, PATHS, Fence, always
from ._bundlefmt import CONTINUED as CONTINUED  # re-exported: the marker folder
from ._cache import StepCache
from ._control import RunControl
from ._dbbundle import PATIENCE
from ._items import ChildRuns, ItemLedger, MemoryLedger
from ._processes import ProcessRegistry
from ._rows import BundleRows
from ._runner import RunDriver
from ._runtypes import CrashPoint, LaunchLink, NotificationSink, Observer, RunOutcome
from ._secrets import EMPTY, NO_SOURCE, RunSecrets, SecretSource, split_input
from ._secrets import resolve as resolve_secrets
from ._space import BundleSpace, RunBundle, space_for
from ._state import TERMINAL, TRACE_SCHEMA, RunState, fold, has_artifacts, internalize

if TYPE_CHECKING:
    from ._agent import AgentStepExecutor

Resolver = Callable[[dict[str, Any]], WorkflowDefinition]
#: How many times one node may start without ending (its process died each time)
#: before resume gives up on it: the first run and one re-run. A node's side effects
#: therefore happen at most twice however often its runner is killed.
NODE_START_BUDGET = 2


def new_run_id(workflow: str, now: float) -> str:
    return f"{workflow}-{compact_utc(now)}-{secrets.token_hex(4)}"


def check_input(definition: WorkflowDefinition, value: Any) -> Any:
    """Validate run input against the workflow's `input` schema before any bundle exists."""
    import json

    try:
        # Through JSON: a tuple becomes a list, a non-JSON value is refused here. The
        # usual `{}` of a run without input needs no round trip.
        value = {} if type(value) is dict and not value else json.loads(
            json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        raise InputError("input must be JSON (objects, lists, strings, numbers, booleans)") \
            from None
    if definition.input_schema is not None:
        errors = validation_errors(dict(definition.input_schema), value)
        if errors:
            raise InputError(f"input does not match workflow '{definition.name}': "
                             + "; ".join(errors))
    return value


@dataclass
class Engine:
    """Runs workflows into bundles under `runs_dir`, or into `rows` when given (the
    database: `runs_dir` then holds only this host's live logs)."""

    runs_dir: Path
    clock: Clock = field(default_factory=SystemClock)
    executor: AgentStepExecutor | None = None
    notifications: NotificationSink | None = None
    observer: Observer | None = None
    durability: str = "full"  # full: fsync the trace; normal: leave it to the OS
    work_dir: Path | None = None
    project_root: Path | None = None
    fence: Fence = always
    crash_point: CrashPoint | None = None  # test seam: called at named points (runner.py)
    processes: ProcessRegistry | None = None  # records shell process groups for reaping
    # Where secrets, writeOnly input fields and env values come from at start and resume.
    secret_source: SecretSource = NO_SOURCE
    rows: BundleRows | None = None  # bundles in the database (engine/_rows.py)
    claim: str | None = None  # the launch's claim token: the database checks it per write
    # The claimed launch a database bundle's first write and seal commit with (rows.py).
    launch: LaunchLink | None = None
    # How long a database bundle's write waits for an unreachable database (seconds).
    patience: float = PATIENCE
    # Whether the run's action nodes are effects of a controller operation (seed 004):
    # asked only when a resume finds an action node interrupted mid-run. True: that node
    # is not run again blindly; the run fails `indeterminate` and the controller decides.
    effects_guarded: Callable[[], bool] = lambda: False
    # Kept node results (`cache:`, engine/_cache.py); `use_cache` False: --no-cache.
    step_cache: StepCache | None = None
    use_cache: bool = True
    # Makes the ledger where a run's fan-out items are durable (ADR 0008), when its first
    # fan-out node asks; by default in memory, for this process only.
    items: Callable[[], ItemLedger] = MemoryLedger
    # Runs `workflow:` bodies of fan-out nodes as linked child runs (the launch layer).
    children: ChildRuns | None = None
    # The space of `runs_dir`/`rows` when the maker holds one already (a runner builds an
    # engine per launch over the same space); None: chosen here.
    bundle_space: BundleSpace | None = None

    @cached_property
    def space(self) -> BundleSpace:
        """Where this engine's bundles live, chosen once (engine/_space.py)."""
        if self.bundle_space is not None:
            return self.bundle_space
        return space_for(self.runs_dir, self.rows, self.clock, self.patience)

    def _driver(self, run_id: str, definition: WorkflowDefinition, bundle: RunBundle,
                state: RunState, control: RunControl | None,
                secrets: RunSecrets = EMPTY) -> RunDriver:
        driver = RunDriver(run_id=run_id, definition=definition, bundle=bundle, state=state,
                         clock=self.clock, control=control or RunControl(),
                         executor=self.executor, notifications=self.notifications,
                         observer=self.observer,
                         work_dir=str(self.work_dir or self.project_root or Path.cwd()),
                         project_root=str(self.project_root) if self.project_root else None,
                         crash_point=self.crash_point, processes=self.processes,
                         secrets=secrets)
        driver.launch = self.launch
        driver.cache = self.step_cache
        driver.cache_reads = self.use_cache
        driver.make_items = self.items
        driver.children = self.children
        return driver

    # -- start ---------------------------------------------------------------------
    def start(self, definition: WorkflowDefinition, run_input: Any = None, *,
              workflow_ref: str | None = None, run_id: str | None = None,
              control: RunControl | None = None) -> RunOutcome:
        value = check_input(definition, {} if run_input is None else run_input)
        _bundle, driver = self.create(definition, value, workflow_ref=workflow_ref,
                                     run_id=run_id, control=control)
        return driver.drive(definition.start)

    def create(self, definition: WorkflowDefinition, value: Any, *,
               workflow_ref: str | None = None, run_id: str | None = None,
               control: RunControl | None = None, parent_run_id: str | None = None,
               carried: dict[str, Any] | None = None,
               extra: dict[str, Any] | None = None,
               secrets: RunSecrets | None = None) -> tuple[RunBundle, RunDriver]:
        """`secrets`: this run's, resolved from this engine's `secret_source` and
        `value` by a caller that checked them already (the launch layer, before it
        failed the launch on a missing one); else resolved here."""
        now = self.clock.now()
        run_id = run_id or new_run_id(definition.name, now)
        # Before the bundle: a missing secret leaves nothing behind.
        if secrets is None:
            secrets = resolve_secrets(definition, self.secret_source, value)
        # Joined to a claimed launch, the run's first node start takes it to `running`.
        bundle = self.space.create(run_id, self.fence, self.durability, self.claim,
                                   None if self.launch is None else self.launch.running)
        try:
            if self.crash_point is not None:
                self.crash_point("after_bundle_created")
            return bundle, self._begin(bundle, definition, value, run_id, now, workflow_ref,
                                       control, parent_run_id, carried, extra, secrets)
        except BaseException:
            bundle.close()  # never keep the run locked after a refused write
            raise

    def _begin(self, bundle: RunBundle, definition: WorkflowDefinition, value: Any,
               run_id: str, now: float, workflow_ref: str | None, control: RunControl | None,
               parent_run_id: str | None, carried: dict[str, Any] | None,
               extra: dict[str, Any] | None, secrets: RunSecrets = EMPTY) -> RunDriver:
        value = {**value, **secrets.hidden} if secrets.hidden else value
        title = None
        if definition.title:
            try:
                # A template like any node's: the workflow's budget, not the default.
                with Scope(definition.template_budget, self.clock.monotonic):
                    title = secrets.mask(render_text(definition.title, {"input": value}))
            except TemplateError:
                pass  # the workflow's name stands in
        if self.launch is not None and parent_run_id is None and carried is None \
                and not extra and definition.pure_run:
            # Joined to a claimed launch, a pure run is written with its ending (ADR
            # 0009, lever 3): one trace write, and no `running` commit of its own; its
            # snapshot and first manifest are held for it too (ADR 0013).
            bundle.write_whole(self.crash_point)
        bundle.write_workflow(definition.snapshot_json)
        # The first manifest's fields the trace does not hold (MANIFEST_FIELDS), then
        # the rest (keys are sorted when written).
        kept = {
            "workflow_ref": workflow_ref or definition.name,
            "title": title or definition.name,
            **definition.sources_json,
            "started_at": iso(now),
        }
        manifest = {
            **kept,
            "schema": BUNDLE_SCHEMA,
            "run_id": run_id,
            "workflow": definition.name,
            "definition_digest": definition.digest,
            "parent_run_id": parent_run_id,
            "finished_at": None,
            "status": "running",
            "trace_schema": TRACE_SCHEMA,
            "paths": dict(PATHS),
        }
        bundle.write_manifest(manifest)
        if self.crash_point is not None:
            self.crash_point("after_manifest_written")
        driver = self._driver(run_id, definition, bundle, RunState(run_id), control, secrets)
        # writeOnly fields are recorded as `***` whatever their length; the driver keeps
        # their values in memory (`RunSecrets.hidden`).
        stored = split_input(definition, value)[0] if definition.write_only else value
        payload: dict[str, Any] = {"workflow": definition.name, "input": stored,
                                   "digest": definition.digest, "parent_run_id": parent_run_id}
        if carried is not None:
            payload["carried"] = carried
        payload.update(extra or {})
        if not self.space.commits_with_store:
            # A folder's first manifest is not fsync'd: the trace keeps what it alone
            # says (`manifest_from_trace` rebuilds it; rows commit it with this event).
            payload["manifest"] = kept
        # No state.json yet: the trace holds the start; the first projection follows.
        driver.emit("run_started", payload, sync=True)
        return driver

    # -- resume --------------------------------------------------------------------
    def resume(self, run_id: str, resolve: Resolver, *, force: bool = False,
               control: RunControl | None = None) -> RunOutcome:
        manifest = self.manifest(run_id)
        if manifest.get("status") in TERMINAL:
            raise InputError(f"run '{run_id}' already ended ({manifest['status']}); nothing to "
                             "resume")
        if manifest.get("status") == "waiting":
            raise InputError(f"run '{run_id}' is waiting at a checkpoint; continue it with "
                             f"`wfrun answer {run_id} ...`")
        bundle = self.space.open(run_id, self.fence, self.durability, self.claim)
        try:
            repaired = bundle.repair()
            state = fold(run_id, bundle.read_trace())
            definition = resolve(manifest)
            # Nothing secret was stored: resolve it all again, or refuse before any node.
            secrets = resolve_secrets(definition, self.secret_source, state.input) \
                if state.status == "running" else EMPTY
        except BaseException:
            bundle.close()
            raise
        mismatch = definition.digest != manifest.get("definition_digest")
        if mismatch and not force:
            bundle.close()
            raise InputError(
                f"the workflow changed since run '{run_id}' started (digest "
                f"{str(manifest.get('definition_digest'))[:19]}… is now {definition.digest[:19]}…);"
                f" cancel it and start again, or resume with --force")
        driver = self._driver(run_id, definition, bundle, state, control, secrets)
        try:
            if state.status != "running":
                # The terminal event made it to the trace but the projections did not.
                bundle.replace_state(state.to_json())
                driver._close_bundle()
                return driver.outcome()
            at, replay_from = self._resume_point(driver)
            if isinstance(at, RunOutcome):
                # Killed between a node's end and the run's: the ending is now recorded
                # and the bundle sealed, so there is nothing to resume.
                return at
            driver.emit("run_resumed", {"resume_at": at, "replayed_steps": state.steps,
                                        "forced": force and mismatch,
                                        "source_mismatch": mismatch,
                                        "repaired_bytes": repaired}, sync=True, state=True)
        except BaseException:
            bundle.close()
            raise
        if replay_from == "interrupted":
            node = driver.definition.nodes.get(at) if isinstance(at, str) else None
            if node is not None and _has_effects(node.kind) and self.effects_guarded():
                # Seed 004: a controller's child step that may have changed the world is
                # an effect. Its start is recorded (pending), its end is not, and a shell
                # command offers nothing to observe: indeterminate, never applied twice.
                message = (f"node '{at}' was interrupted while its command ran; it may "
                           "have had its effect, so this controller child does not run it "
                           "again. Check what it did; the controller decides what comes next")
                driver.emit("run_interrupted", {"reason": message, "node": at}, sync=True)
                return driver.finish("failed", error={"code": "indeterminate", "node": at,
                                                      "message": message})
            # A fan-out node makes progress across deaths: its items carry the budget.
            fanout = node is not None and node.kind in ("map", "parallel")
            if state.current_node_starts >= NODE_START_BUDGET and not fanout:
                # A crash loop: the node's process died every time it ran. Running it
                # again could repeat its side effects a third time.
                message = (f"node '{at}' was interrupted {state.current_node_starts} times "
                           "(its runner died each time); it is not run again. Check what it "
                           "did, then start a new run")
                driver.emit("run_interrupted", {"reason": message, "node": at}, sync=True)
                return driver.finish("failed", error={"code": "interrupted", "node": at,
                                                      "message": message})
            driver.resuming_node = at
        return driver.drive(at)

    def _resume_point(self, driver: RunDriver) -> tuple[Any, str]:
        st, d = driver.state, driver.definition
        if st.current_node is not None and st.current_node in d.nodes:
            return st.current_node, "interrupted"
        if st.last_node is None and st.continued_at in d.nodes:
            # A continuation killed before its first node ended: it goes on from its
            # parent's checkpoint (never from the start: that re-ran the parent's nodes).
            at = str(st.continued_at)
            output = driver.live(st.outputs.get(at))
            after = driver.next_after(at, "ok", output, None, {})
            if after is None:
                return driver.finish("completed", final_output=output), "done"
            return after, "done" if isinstance(after, RunOutcome) else "routed"
        if st.last_node is None:
            # A rerun killed before its first node ended begins again where it begins.
            return (st.start_at if st.start_at in d.nodes else d.start), "start"
        last = st.last_node
        result = st.results.get(last, {})
        node = d.nodes.get(last)
        if node is not None and ends(node.kind) == "wait" and result.get("outcome") == "ok":
            return driver.wait(last, driver.live(st.outputs.get(last))), "done"
        extra = {k: v for k, v in result.items() if k == "exit_code"}
        output = driver.live(st.outputs.get(last))
        nxt = driver.next_after(last, result.get("outcome", "ok"), output, result.get("error"),
                                extra)
        if isinstance(nxt, RunOutcome):
            return nxt, "done"
        return nxt, "routed"

    # -- continuation ----------------------------------------------------------------
    def answer(self, parent_run_id: str, answer: Any, resolve: Resolver, *,
               control: RunControl | None = None) -> RunOutcome:
        """Continue a `waiting` run as a new linked run carrying outputs and steps."""
        driver, nxt = self.prepare_answer(parent_run_id, answer, resolve, control=control)
        return self.drive_continuation(driver, nxt)

    def prepare_answer(self, parent_run_id: str, answer: Any, resolve: Resolver, *,
                       control: RunControl | None = None, run_id: str | None = None,
                       definition: WorkflowDefinition | None = None
                       ) -> tuple[RunDriver, str | None]:
        """Create the continuation bundle (no node runs yet); returns it and its first node."""
        manifest = self.manifest(parent_run_id)
        if manifest.get("status") != "waiting":
            raise InputError(f"run '{parent_run_id}' is {manifest.get('status')}, not waiting "
                             "at a checkpoint")
        space = self.space
        parent_bundle = space.view(parent_run_id)
        parent = fold(parent_run_id, parent_bundle.read_trace())
        definition = definition or resolve(manifest)
        if definition.digest != manifest.get("definition_digest"):
            raise InputError(f"the workflow changed since run '{parent_run_id}' started; "
                             "start a new run instead")
        checkpoint = parent.waiting_on
        if checkpoint is None:
            raise OperationFailed(f"run '{parent_run_id}' does not record its checkpoint")
        if not space.mark_continued(parent_run_id):
            raise InputError(f"run '{parent_run_id}' was already answered; each waiting run "
                             "continues once")
        # The parent's values as recorded (artifact refs into its own bundle, escapes)
        # become real values again; the new bundle records them its own way.
        def live(value: Any) -> Any:
            return internalize(value, parent_bundle.read_artifact) if has_artifacts(
                value) else value

        outputs = dict(live(parent.outputs))
        cp_output = dict(outputs.get(checkpoint) or {})
        cp_output["answer"] = answer
        outputs[checkpoint] = cp_output
        carried = {"outputs": outputs, "results": live(parent.results), "steps": parent.steps,
                   "scope_inputs": live(parent.scope_inputs)}
        try:
            _, driver = self.create(definition, live(parent.input), workflow_ref=manifest.get(
                "workflow_ref"), control=control, run_id=run_id, parent_run_id=parent_run_id,
                carried=carried, extra={"continued_from": parent_run_id,
                                        "checkpoint": checkpoint, "answer": answer,
                                        "carried_steps": parent.steps})
        except BaseException:
            space.unmark_continued(parent_run_id, "")  # nothing continued it: answer again
            raise
        space.set_continued(parent_run_id, driver.run_id)
        driver.state.last_node = checkpoint
        return driver, checkpoint

    def drive_continuation(self, driver: RunDriver, checkpoint: str | None) -> RunOutcome:
        assert checkpoint is not None
        cp_output = driver.live(driver.state.outputs.get(checkpoint))
        try:
            nxt = driver.next_after(checkpoint, "ok", cp_output, None, {})
            if isinstance(nxt, RunOutcome):
                return nxt
            if nxt is None:
                return driver.finish("completed", final_output=cp_output)
        except BaseException:
            driver.bundle.close()  # a refused write (ClaimLost): let go of the run
            raise
        return driver.drive(nxt)

    # -- interruption ----------------------------------------------------------------
    def abandon(self, run_id: str, status: str = "failed", *, code: str = "interrupted",
                reason: str = "interrupted") -> RunOutcome:
        """End a run that will not run again with a terminal event, so its bundle agrees
        with its launch: `failed` (after a crash) or `cancelled` (cancelled while no
        runner held it). Nodes are not run."""
        if status == "failed":
            return self.interrupt(run_id, reason, code=code)
        driver = self._open_unended(run_id)
        if driver.state.terminal:
            return self._finish_projections(driver)
        return driver.finish("cancelled", error={"code": code, "message": reason})

    def settle(self, run_id: str) -> RunOutcome:
        """The outcome of a run that has ended (terminal or waiting), finishing the
        projections if its runner died between the trace's ending and the manifest."""
        manifest = self.manifest(run_id)
        if manifest.get("status") in TERMINAL or manifest.get("status") == "waiting":
            bundle = self.space.view(run_id)
            return self._bare_driver(run_id, bundle, fold(run_id, bundle.read_trace())).outcome()
        bundle = self.space.open(run_id, self.fence, self.durability, self.claim)
        try:
            bundle.repair()
            state = fold(run_id, bundle.read_trace())
            if state.status == "running":
                raise InputError(f"run '{run_id}' has not ended")
            driver = self._bare_driver(run_id, bundle, state)
            bundle.replace_state(state.to_json())
            driver._close_bundle()
        except BaseException:
            bundle.close()
            raise
        return driver.outcome()

    def _bare_driver(self, run_id: str, bundle: RunBundle, state: RunState) -> RunDriver:
        return RunDriver(run_id=run_id, definition=WorkflowDefinition("", "", {}, {}),
                         bundle=bundle, state=state, clock=self.clock, control=RunControl(),
                         executor=None, notifications=None, observer=None, work_dir=".",
                         project_root=None)

    def interrupt(self, run_id: str, reason: str = "interrupted", *,
                  code: str = "interrupted") -> RunOutcome:
        """End a run abandoned by a dead process: `run_interrupted`, then `run_failed`."""
        driver = self._open_unended(run_id)
        if driver.state.terminal:
            return self._finish_projections(driver)
        driver.emit("run_interrupted", {"reason": reason, "node": driver.state.current_node},
                    sync=True)
        return driver.finish("failed", error={"code": code, "message": reason})

    def _open_unended(self, run_id: str) -> RunDriver:
        """Open a run whose manifest has not ended, repaired and folded, for an ending."""
        manifest = self.manifest(run_id)
        if manifest.get("status") in TERMINAL or manifest.get("status") == "waiting":
            raise InputError(f"run '{run_id}' already ended ({manifest.get('status')})")
        bundle = self.space.open(run_id, self.fence, self.durability, self.claim)
        try:
            bundle.repair()
            state = fold(run_id, bundle.read_trace())
        except BaseException:
            bundle.close()
            raise
        return self._bare_driver(run_id, bundle, state)

    @staticmethod
    def _finish_projections(driver: RunDriver) -> RunOutcome:
        """The ending made it to the trace but not to the projections: write them."""
        driver.bundle.replace_state(driver.state.to_json())
        driver._close_bundle()
        return driver.outcome()

    # -- reading ---------------------------------------------------------------------
    def manifest(self, run_id: str) -> dict[str, Any]:
        return self.space.manifest(run_id)


def _has_effects(kind: str) -> bool:
    row = kind_of(kind)
    return row is not None and row.effects
