"""The run path: begin a claimed launch, drive its run, record how it ended.

`begin` decides once what the claimed row needs:

    no bundle, or a half-made one     activate: re-check the source, create the
                                      bundle, `running`, first node
    a bundle that has ended           record the ending the bundle shows
    a bundle that is running          resume it (replay, re-run the interrupted node)

and `drive` runs it and maps how the run ended onto the row (endings.py). Both
pass one boundary (`_caught`): a lost claim lets go, a full or read-only disk
holds the launch (faults.py), and any other unexpected exception fails the launch
(the bundle ended too, the reservation released, one follow-up for a session).

A claimed launch is joined to its run's bundle (`RunLink`, see "the link" below):
the launch's `running` transition and its ending ride the bundle's first write and
its seal.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from runner._leases import renew_every
from runner.clock import Clock
from runner.compiler import WorkflowDefinition
from runner.engine import Engine, RunControl, RunOutcome, RunReader, check_input
from runner.engine._secrets import SecretMissing, restore_input
from runner.engine._secrets import resolve as resolve_secrets
from runner.engine._state import TERMINAL
from runner.errors import ClaimLost, MachineFault, WfrunError, machine_fault
from runner.store import (
    MAX_ACTIVATION_CRASHES,
    InputScrub,
    LaunchBook,
    LaunchRecord,
    LeaseFence,
    LostRace,
    NextClaim,
    Store,
    StoreError,
    StoreUnreachable,
)

from ._activation import Activation, CrashPoints
from ._endings import Endings, Step, classify
from ._engines import Engines
from ._faults import FaultHold, store_fault
from ._held import HeldInput
from ._intents import new_intent, workflow_name
from ._items import item_rows
from ._keeper import LeaseKeeper
from ._queue import Claims, Resolver, relative
from ._rerun import create_rerun, rerun_options

log = logging.getLogger(__name__)


class _SourceChanged(Exception):
    pass


class Activator:
    """Begins and drives one runner's claimed launches."""

    def __init__(self, store: Store, book: LaunchBook, resolver: Resolver, reader: RunReader,
                 clock: Clock, *,
                 runs_dir: Path, lease_seconds: float, claims: Claims, keeper: LeaseKeeper,
                 engines: Engines, endings: Endings, faults: FaultHold, held: HeldInput,
                 scrub: InputScrub, crash: CrashPoints) -> None:
        self._store = store
        self._book = book
        self._resolver = resolver
        self._reader = reader
        self._clock = clock
        self._runs_dir = runs_dir
        # Each claim's fence keeps a third of the lease in hand (`LeaseFence.margin`).
        self._fence_margin = renew_every(lease_seconds)
        self._claims = claims
        self._keeper = keeper
        self._engines = engines
        self._endings = endings
        self._faults = faults
        self._held = held
        self._scrub = scrub
        self._crash = crash

    def execute(self, record: LaunchRecord, *, control: RunControl | None = None,
                on_start: Callable[[Activation], None] | None = None, force: bool = False,
                then_claim: NextClaim | None = None) -> RunOutcome | None:
        """`begin`, then `drive` (the coordinator's one `execute`)."""
        at = self._clock.monotonic()  # before the ending's commit, which takes `then_claim`
        act = self.begin(record, control=control, on_start=on_start, force=force)
        if act is None:
            return None
        act.then_claim = then_claim
        try:
            return self.drive(act)
        finally:
            if then_claim is not None:
                self._claims.sent(then_claim.record, at)

    def begin(self, record: LaunchRecord, *, control: RunControl | None = None,
              on_start: Callable[[Activation], None] | None = None,
              force: bool = False) -> Activation | None:
        """Up to `running` (a session does it at its idle boundary and drives the run
        on a worker thread). None: nothing to drive."""
        assert record.claim_token is not None, "execute needs a claimed launch"
        fence = LeaseFence(self._book, record.run_id, record.claim_token,
                           self._clock, self._fence_margin)
        sent, by_id = self._claims.taken(record)
        if sent is not None:  # claimed here: the claim's own committed lease
            fence.held(record, sent)
        act = Activation(record, record.claim_token, fence, control=control or RunControl(),
                         force=force, by_id=by_id)
        if on_start is not None:
            on_start(act)
        try:
            return act if self._begin(act) else None
        except Exception as exc:
            self._caught(act, exc)
            return None

    def drive(self, act: Activation) -> RunOutcome | None:
        """Run the nodes, record the ending."""
        try:
            return self._drive(act)
        except Exception as exc:
            self._caught(act, exc)
            return None
        finally:
            self._keeper.remove(act)
            if act.by_id:
                self._scrub.flush()  # no claim loop follows a run claimed by id
            else:
                self._scrub.tick()

    def _caught(self, act: Activation, exc: Exception) -> None:
        """The one boundary of the run path, for what `begin` or `drive` caught (only
        entered then): a lost claim lets go, and any unexpected exception fails the
        launch instead of leaving it `running` until its lease expires (and crashing
        again in the next runner)."""
        if isinstance(exc, ClaimLost):
            self._lost(act)
            return
        if isinstance(exc, StoreUnreachable):
            # The database went away (a restart, a network blip) under a read of the
            # launch or its bundle: let go as for a lost claim; the lease expires and a
            # runner that reaches the database takes the launch over. Nothing fails.
            log.warning("run %s: the store is unreachable; letting go (%s)",
                        act.record.run_id, exc)
            self._lost(act)
            return
        fault = exc if isinstance(exc, MachineFault) else machine_fault(
            exc, f"the run bundle of {act.record.run_id}")
        if fault is None and isinstance(exc, StoreError):
            # The store's own disk refused a transition (`mark_running` on a full disk):
            # the launch waits as for a bundle's, one line, no traceback.
            fault = store_fault(exc)
        if fault is not None:  # a full or read-only disk: the launch waits
            self._faults.hold(act, fault)
            return
        log.exception("run %s crashed in its runner", act.record.run_id)
        self._endings.crashed(act, exc)

    def _begin(self, act: Activation) -> bool:
        record = act.record
        if self._crash.hook is not None:
            self._crash.hook("after_claim")
        # The launch's transitions that ride its bundle's writes (`RunLink`, below).
        link = RunLink(act, self._book, self._endings, self._clock, self._ran,
                       apart=not self._reader.space.commits_with_store)
        engine = self._engines.fenced(record, act.fence, link=link)
        act.engine = engine
        if record.status == "starting" and record.crash_count >= MAX_ACTIVATION_CRASHES \
                and not self._ended(record.run_id):
            reason = (f"activation crashed {record.crash_count} times in a row; it is not "
                      "tried again. Check the host log, then start it again")
            if self._reader.started(record.run_id):
                engine.abandon(record.run_id, "failed", code="activation_failed",
                               reason=reason)  # the bundle ends as the launch does
            self._endings.fail_launch(record, act.token, "activation_failed", reason,
                                      fixed=True)
            return False
        first = self._reader.space.commits_with_store and record.status == "starting" \
            and record.epoch == 1
        if first or engine.space.unstarted(record.run_id, record.parent_run_id):
            # No bundle, or one whose creator died before `run_started` was durable
            # (discarded by `unstarted`): nothing ran, and the input is still in the row
            # (it is cleared at running). A bundle committed with the store's own
            # transitions exists only under a claim the store kept, so on the first
            # claim there is none to look for or discard (a read and a write less per
            # run). Not so for a folder: a claim commits without waiting for the disk,
            # and a power cut that loses it keeps the folder's fsync'd `run_started`
            # under a row back at epoch 0 (test_power_cut.py).
            if record.status != "starting":
                self._endings.fail_launch(record, act.token, "activation_failed",
                                          "the run bundle is missing; start the workflow "
                                          "again")
                return False
            return self._activate(act, engine)
        if record.status == "starting":
            sent = self._clock.monotonic()
            running = self._book.mark_running(record.run_id, act.token)
            if isinstance(running, LostRace):
                self._lost(act)
                return False
            act.running(running, sent)
        status = self._reader.status(record.run_id)
        if status is not None and status != "running":
            # The run ended but its runner died before the store recorded it.
            act.outcome = engine.settle(record.run_id)
        return True

    def _ended(self, run_id: str) -> bool:
        """The run ended in its bundle (written whole, its ending's commit lost): its
        ending is recorded below, however often its activations crashed."""
        return self._reader.started(run_id) and self._reader.status(run_id) in TERMINAL

    def _drive(self, act: Activation) -> RunOutcome | None:
        """Run the claimed launch's run (from its first node, a continuation's checkpoint,
        or resumed; only recorded when its bundle had ended) and record how it ended."""
        engine, driver = act.engine, act.driver
        assert engine is not None
        try:
            if act.outcome is not None:  # the bundle had ended before this claim
                self._endings.record(act, act.outcome)
                return act.outcome
            if driver is None:
                return self._resume(act, engine)
            if self._crash.hook is not None:
                self._crash.hook("before_executor_release")
            self._keeper.add(act)
            if not act.whole:
                # A run with effects honours a cancel asked while it was starting before
                # its first node. A pure run need not: it ends, or is cancelled, whole.
                self._keeper.asked_to_cancel(act)
            if act.checkpoint is not None:
                outcome = engine.drive_continuation(driver, act.checkpoint)
            else:
                assert act.definition is not None
                # A rerun begins at its node (engine/_rerun.py); every other run at the start.
                outcome = driver.drive(driver.state.start_at or act.definition.start)
            self._endings.record(act, outcome)
            return outcome
        except ClaimLost:
            return self._lost(act)  # a cancel's ending is still an outcome

    def _activate(self, act: Activation, engine: Engine) -> bool:
        """Take a claimed `starting` launch to `running`; False when it failed or lost."""
        record, token = act.record, act.token
        try:
            definition, _ = self._resolver.compile(record.workflow_ref)
            if definition.digest != record.definition_digest:
                raise _SourceChanged()
            # The row's input, decoded here (`record.input()` refuses one cleared).
            value = record.input() if record.input_json is None else json.loads(record.input_json)
            held = self._held.values.get(record.run_id)
            if held:  # writeOnly values this process kept for the run (held.py)
                value = restore_input(value, held)
            secrets = None
            if record.parent_run_id is None:
                # A missing secret or writeOnly value is a clear failure before the bundle.
                # From the engine's own source (`Engines.secret_source`), and `check_input`
                # only validates (its JSON round trip keeps JSON values): the run takes these.
                source = engine.secret_source
                secrets = resolve_secrets(definition, source, value) \
                    if definition.declares_secrets else source.plain
                value = check_input(definition, value)
        except _SourceChanged:
            self._endings.fail_launch(record, token, "source_changed", "the workflow source "
                                      "changed after it was queued; review the change, then "
                                      "start it again", fixed=True)
            return False
        except Exception as exc:
            code, reason = classify(exc)
            if code in ("workflow_invalid", "workflow_not_found") and _deleted(record):
                code, reason = "workflow_not_found", (
                    f"workflow '{workflow_name(record.workflow_ref)}' no longer exists (its "
                    "file was removed after the run was queued); restore it or start another")
            self._endings.fail_launch(record, token, code, relative(self._runs_dir, reason))
            return False
        act.definition = definition
        try:
            if record.parent_run_id is not None:
                # A continuation: the launch input is the answer to the parent's checkpoint.
                driver, act.checkpoint = engine.prepare_answer(
                    record.parent_run_id, value, lambda _m: definition, control=act.control,
                    run_id=record.run_id, definition=definition)
            elif record.options_json is not None and rerun_options(record) is not None:
                # A rerun's plan rides in the launch options (most launches have none:
                # their options are never parsed).
                driver = create_rerun(self._reader, engine, record, definition, value,
                                      act.control, item_rows(self._store.fanout))
            else:
                _, driver = engine.create(definition, value, workflow_ref=record.workflow_ref,
                                          run_id=record.run_id, control=act.control,
                                          secrets=secrets)
        except (ClaimLost, StoreError):
            raise  # the claim or the store, not the run: `_caught` lets go or holds
        except WfrunError as exc:
            code, reason = classify(exc)
            self._endings.fail_launch(record, token, code, reason)
            return False
        if self._crash.hook is not None:
            self._crash.hook("during_starting")
        act.driver = driver
        # The launch goes `running` now (a folder) or with the first node's start (a
        # database bundle, `RunLink`): a cancel that won meanwhile refuses it, and `_lost`
        # ends the launch and the bundle. A pure run written whole goes there with its
        # ending (ADR 0009, lever 3).
        act.whole = not driver.bundle.start_launch()
        return True

    def _resume(self, act: Activation, engine: Engine) -> RunOutcome | None:
        self._keeper.add(act)

        def resolve(manifest: dict[str, Any]) -> WorkflowDefinition:
            definition, _ = self._resolver.compile(str(manifest.get("workflow_ref")))
            act.definition = definition
            return definition

        try:
            outcome = engine.resume(act.record.run_id, resolve, control=act.control,
                                    force=act.force)
        except SecretMissing as exc:
            # Nothing ran and nothing is lost: park it until it is resumed with the value.
            log.warning("run %s not resumed: %s", act.record.run_id, exc.message)
            self._book.park(act.record.run_id, act.token, mode="explicit")
            return None
        self._endings.record(act, outcome)
        return outcome

    def _ran(self, act: Activation, record: LaunchRecord, sent: float) -> None:
        """The launch committed `running` (its input is cleared): with the run's first
        write on rows, just before the executor is released on a folder."""
        act.running(record, sent)
        self._scrub.cleared()
        if self._crash.hook is not None:  # with the first node's start; it has not run
            self._crash.hook("after_running")

    def _lost(self, act: Activation) -> RunOutcome | None:
        """A fence or renewal refused us: a cancel, or another runner took the claim."""
        try:
            current = self._book.get(act.record.run_id)
        except StoreError:
            current = None
        if act.driver is not None:
            act.driver.bundle.close()
        if current is None or (current.claim_token == act.token
                               and current.status in ("starting", "running")):
            # We let go but may still hold the claim (the store was unreachable): hand
            # the lease back so recovery takes the run now, not when the lease runs out.
            self._keeper.remove(act)  # no renewal may race the hand-back
            self._claims.give_back(act.record.run_id, act.token)
        if current is not None and current.status == "cancelled" and act.engine is not None:
            if act.engine.space.unstarted(act.record.run_id, act.record.parent_run_id):
                return None
            return self._endings.end_cancelled(act.record.run_id)
        session = act.record.origin_session_id
        if session is not None:
            intent = new_intent(session_id=session, run_id=act.record.run_id,
                                workflow=act.workflow, cause="claim_lost",
                                source="claim_lost", state="handed_off",
                                reason="another runner took over the run", eligible=False,
                                handoff=True)
            try:
                self._store.turn_intents.ensure(intent)
            except StoreError:
                log.warning("could not record the claim-lost intent for %s",
                            act.record.run_id)
        return None


# -- the link: a claimed launch joined to its run's bundle ---------------------------
#
# When run bundles live in the store's database, two of the launch's own commits go
# into the bundle's: the run's first write (its row, snapshot, manifest, `run_started`
# and the first node's start) commits in the launch's `running` transition, and the
# run's seal in the transition that records how it ended (`finish`, `fail` or the
# holder's `cancel`). The launch row and its bundle then never disagree at those two
# points, and a 3-node run costs 6 commits in all (docs/store.md). The transition's
# guard (claim token, status, lease, on the locked launch row) is the bundle write's
# fence: a refused guard writes nothing.
#
# A folder bundle has no transaction to share: its `running` step runs with no write
# (`run(None)`, by the bundle) just before the executor is released, and the ending
# told at the seal is kept on the activation (`sealed`) for `Endings.record` to make
# right after it (the engine does not call back for it), each committed as the store
# commits a transition without a bundle.


@dataclass(frozen=True)
class RunLink:
    """`LaunchLink` of one activation (engine/_runtypes.py): the `running` step for the
    run's first write, the ending's for its seal (None when parked: recorded apart).
    `apart`: the bundle shares no transaction with the store (a folder), so its ending
    is a commit of its own: kept for `Endings.record` to make once the engine hands
    the outcome back, right after the seal (the engine never calls back for it)."""

    act: Activation
    book: LaunchBook
    endings: Endings
    clock: Clock
    ran: Callable[[Activation, LaunchRecord, float], None]
    apart: bool = False

    def running(self) -> Step:
        """The launch's `running` transition carrying the run's first bundle write: it
        tells `ran` the committed row and when the statement was sent (the fence
        answers from that, activation.py)."""
        act, sent = self.act, self.clock.monotonic()
        run_id, token = act.record.run_id, act.token
        return Step(lambda bundle: self.book.mark_running(run_id, token, bundle=bundle),
                    lambda record: self.ran(act, record, sent))

    def ended(self, outcome: RunOutcome) -> Step | None:
        if outcome.parked:
            return None
        if self.apart:
            self.act.sealed = outcome  # for `Endings.record`, right after the seal
            return None
        return Step(partial(self.endings.end, self.act, outcome))  # marks `act.recorded`


def _deleted(record: LaunchRecord) -> bool:
    path = record.workflow_path
    return path is not None and not Path(path).exists()
