"""Endings: how a run's ending, a failed start or a crash is recorded on its launch.

An engine outcome maps onto the row (done | failed | cancelled | parked), with one
durable follow-up for the launch's session where one is due, so a launch's
terminal state always agrees with its bundle. When the bundles live in the store's
database the ending commits with the bundle's seal (`end`, `RunLink` in activator.py);
otherwise `record` writes it apart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from runner._safety import one_line
from runner.engine import RunOutcome, RunReader
from runner.engine._control import PAUSED
from runner.errors import (
    DefinitionInvalid,
    InputError,
    NotFoundError,
    TemporaryError,
    WfrunError,
)
from runner.store import (
    BundleRefused,
    BundleWrite,
    InputScrub,
    LaunchBook,
    LaunchErrorCode,
    LaunchRecord,
    LostRace,
    NewTurnIntent,
    ParkMode,
    Store,
    StoreError,
    StoreUnreachable,
    TurnCause,
)

from ._activation import Activation, CrashPoints
from ._engines import Engines
from ._held import HeldInput
from ._intents import new_intent, workflow_name
from ._pausing import settle_pause

log = logging.getLogger(__name__)
#: A launch transition that may carry a bundle write (`Step`, below).
Transition = Callable[[BundleWrite | None], LaunchRecord | LostRace]
#: How an engine ending maps onto the launch row's failure code.
FAILURE_CODES: dict[str, LaunchErrorCode] = {"failed": "run_failed",
                                             "timed_out": "run_timed_out"}
#: How many crash causes a runner keeps for its caller to show (a host logs them).
CRASH_CAUSES_KEPT = 16


@dataclass(frozen=True)
class Step:
    """One launch transition that carries a bundle write (`LaunchStep`, engine/_rows.py);
    `then` is told the committed row."""

    transition: Transition
    then: Callable[[LaunchRecord], None] | None = None

    def run(self, write: Callable[[Any], str] | None) -> str:
        try:
            result = self.transition(write)
        except BundleRefused as refused:
            return refused.word
        except StoreUnreachable:  # a full or read-only database is a machine fault: raised
            return "unavailable"  # the bundle retries (it may have committed)
        if isinstance(result, LostRace):
            return "fenced"
        if self.then is not None:
            self.then(result)
        return "ok"


def classify(exc: BaseException) -> tuple[LaunchErrorCode, str]:
    """A stable code and a safe, actionable reason for a startup failure."""
    if isinstance(exc, NotFoundError):
        return "workflow_not_found", exc.message
    if isinstance(exc, DefinitionInvalid):
        return "workflow_invalid", exc.message
    if isinstance(exc, InputError):
        return "input_invalid", exc.message
    if isinstance(exc, (StoreError, TemporaryError)):
        return "store_unavailable", "the workflow store is unavailable; try again shortly"
    if isinstance(exc, WfrunError):
        return "activation_failed", exc.message
    # Unexpected errors: the class name only; the text may hold secrets or input.
    return "activation_failed", f"activation failed ({type(exc).__name__}); see the host log"


class Endings:
    """Records endings on one store's launches, for one runner."""

    def __init__(self, store: Store, book: LaunchBook, runner_id: str, reader: RunReader,
                 engines: Engines, held: HeldInput, scrub: InputScrub, *,
                 crash: CrashPoints, for_sessions: bool = False) -> None:
        self._store = store
        self._book = book
        self._runner_id = runner_id
        self._reader = reader
        self._engines = engines
        self._held = held
        self._scrub = scrub
        self._crash = crash
        # A runner outside every session (a host, `wfrun resume`) that runs a session's
        # launch (handed over when the session ended): however the run ends, the
        # session hears it on its next turn. A session's own runs need no such word.
        self.for_sessions = for_sessions
        # Why a run crashed here, by run id (`crashed`): the newest few, in memory.
        self.crash_causes: dict[str, str] = {}

    def record(self, act: Activation, outcome: RunOutcome) -> None:
        """Map an engine outcome onto the launch row, with a follow-up when one is due."""
        sealed, act.sealed = act.sealed, None
        if sealed is not None:
            # A folder bundle was sealed: its ending is a commit of its own, made now (the
            # engine does not call back for it, RunLink). Refused (a cancel won), it
            # records nothing: the winner decided.
            self.end(act, sealed)
        if self._crash.hook is not None:
            self._crash.hook("before_outcome_recorded")
        if act.recorded or sealed is not None:
            return  # committed with the bundle's seal (`RunLink`, activator.py), or just now
        if outcome.parked:
            if act.claim_lost:
                return  # another runner owns the row now
            paused = act.control.reason == PAUSED
            mode: ParkMode = "paused" if paused else "auto" if act.control.auto_resume \
                else "explicit"
            self._book.park(act.record.run_id, act.token, mode=mode)
            if paused:
                settle_pause(self._store, act.record.run_id)  # an unpause that came meanwhile
            return
        self.end(act, outcome)

    def end(self, act: Activation, outcome: RunOutcome,
            bundle: BundleWrite | None = None) -> LaunchRecord | LostRace:
        """Record how a run ended (not parked) on its launch, taking the bundle's seal
        along when given one (`RunLink`, activator.py); once committed the activation is
        `recorded`. A run written whole (`act.whole`), or one whose row is still
        `starting` (its ending's commit was lost, and its bundle says how it ended),
        never went `running`: its ending takes the row there and clears the input,
        which the scrub then wipes from the WAL."""
        first = act.whole or act.record.status == "starting"
        launches, run_id, token = self._book, act.record.run_id, act.token
        then = act.then_claim
        if outcome.status == "cancelled":
            result = launches.cancel(run_id, claim_token=token, then_claim=then,
                                     from_starting=first, bundle=bundle)
        elif outcome.status in ("completed", "waiting"):
            session = act.record.origin_session_id  # only a session's run has one to tell
            intent = None if session is None else self._presentation(act, outcome, session)
            result = launches.finish(run_id, token, waiting=outcome.status == "waiting",
                                     turn_intent=intent, then_claim=then,
                                     from_starting=first, bundle=bundle)
        else:
            code, message, intent = self._failure(act, outcome)
            result = launches.fail(run_id, token, code=code, message=message,
                                   turn_intent=intent, then_claim=then, from_starting=first,
                                   bundle=bundle)
        if not isinstance(result, LostRace):
            act.recorded = True
            if first:
                self._scrub.cleared()
        return result

    def _presentation(self, act: Activation, outcome: RunOutcome,
                      session: str) -> NewTurnIntent | None:
        """The session's follow-up of a run that completed or waits, when one is due.
        Durable with the ending: a restarted session still delivers it, and refuses a
        new start until it has. A checkpoint without a presentation still tells the
        session that the run waits (the default notice)."""
        waiting = outcome.status == "waiting"
        presents = act.definition is not None and bool(act.definition.presentation)
        if not (presents or waiting or self.for_sessions):
            return None
        return new_intent(session_id=session, run_id=act.record.run_id,
                          workflow=act.workflow, cause="presentation",
                          source="run_presentation", state=outcome.status,
                          node=outcome.state.waiting_on if waiting else None,
                          reason=self._summary(outcome) if waiting else "")

    def _failure(self, act: Activation, outcome: RunOutcome
                 ) -> tuple[LaunchErrorCode, str, NewTurnIntent | None]:
        """A run that failed or timed out: the launch's failure code, its safe message,
        and the follow-up for its session (if it has one)."""
        error = outcome.error or {}
        code = FAILURE_CODES.get(outcome.status, "run_failed")
        if error.get("code") == "interrupted":
            code = "interrupted"
        node = error.get("node")
        reason = str(error.get("message") or f"the run ended {outcome.status}")
        message = self._held.safe(f"node '{node}': {reason}" if node else reason,
                                  outcome.state.input)
        intent = None
        session = act.record.origin_session_id
        if session is not None:
            cause: TurnCause = "timed_out" if outcome.status == "timed_out" else "failed"
            intent = new_intent(session_id=session, run_id=act.record.run_id,
                                workflow=act.workflow, cause=cause,
                                source=f"run_{outcome.status}", state=outcome.status,
                                reason=message, node=node)
        return code, message, intent

    def _summary(self, outcome: RunOutcome) -> str:
        """A waiting run's checkpoint summary, safe to show a model (bounded, redacted)."""
        output = outcome.final_output
        summary = output.get("summary") if isinstance(output, dict) else None
        return self._held.safe(str(summary), outcome.state.input) if summary else ""

    def fail_launch(self, record: LaunchRecord, token: str, code: LaunchErrorCode,
                    reason: str, *, fixed: bool = False) -> LaunchRecord | LostRace:
        """Fail a claimed launch with one eligible follow-up for its session. A `fixed`
        reason is wfrun's own text: it echoes no input, so none is redacted from it."""
        echoed = None if fixed or record.input_cleared else record.input()
        message = self._held.safe(reason, echoed)
        intent = None
        if record.origin_session_id is not None:
            intent = new_intent(session_id=record.origin_session_id, run_id=record.run_id,
                                workflow=workflow_name(record.workflow_ref),
                                cause="launch_failed", source="launch_failed",
                                state="failed_to_start", reason=message, node="$launch")
        result = self._book.fail(record.run_id, token, code=code, message=message,
                                 turn_intent=intent)
        if isinstance(result, LostRace):
            return result  # a stale handler: the winner (e.g. a cancel) decided
        self._scrub.now()
        try:
            self._store.run_events.append(record.run_id, "launch_failed",
                                          {"code": code, "message": message},
                                          workflow_ref=record.workflow_ref,
                                          runner_id=self._runner_id)
        except StoreError:
            log.warning("could not record the launch_failed event of %s", record.run_id)
        return result

    def end_cancelled(self, run_id: str) -> RunOutcome | None:
        """The row is `cancelled`: end the bundle the same way. The bundle's lock keeps
        out a runner still writing it (that runner records the cancel itself)."""
        try:
            return self._engines.bare().abandon(run_id, "cancelled", code="cancelled",
                                                reason="cancelled")
        except StoreError:
            raise  # the cancel's caller reports a store that failed
        except WfrunError as exc:
            log.info("run %s: cancel left to its runner (%s)", run_id, exc.message)
            return None

    def crashed(self, act: Activation, exc: BaseException) -> None:
        """An unexpected exception on the run path: end the bundle (if the run began)
        and the launch as failed, so neither waits for a lease to expire."""
        began = self.began(act.record.run_id)
        started = act.record.status == "running" or act.driver is not None or began
        reason = (f"the run crashed ({type(exc).__name__}); the runner that ran it logged "
                  "the cause" if started else classify(exc)[1])
        self.crash_causes[act.record.run_id] = self._crash_cause(act, exc)
        while len(self.crash_causes) > CRASH_CAUSES_KEPT:
            self.crash_causes.pop(next(iter(self.crash_causes)))
        if act.driver is not None:
            act.driver.bundle.close()  # let go of the lock so the ending can be written
        sealed, act.sealed = act.sealed, None
        if sealed is not None:
            # Raised after a folder bundle's seal: the run ended, and that ending is the
            # truth (made here as `record` would have made it; refused or unanswered, it
            # recorded nothing, and the crash is recorded below).
            Step(partial(self.end, act, sealed)).run(None)
            if act.recorded:
                return
        if began:
            # We still hold the claim; the engine may not exist (its factory failed).
            engine = act.engine or self._engines.bare()
            try:
                ended = engine.abandon(act.record.run_id, "failed", code="crashed",
                                       reason=reason)
            except Exception:
                log.exception("could not end the bundle of %s", act.record.run_id)
                ended = None
            if ended is not None and (ended.status, (ended.error or {}).get("code")) != (
                    "failed", "crashed"):
                # The run had ended before the exception: its ending is the truth.
                try:
                    self.record(act, ended)
                except Exception:
                    log.exception("could not record the ending of %s", act.record.run_id)
                return
        try:
            self.fail_launch(act.record, act.token,
                             "run_failed" if started else classify(exc)[0], reason)
        except Exception:
            # The store is down: the lease expires and the next runner settles the run
            # from its bundle (which says failed, if the write above got through).
            log.exception("could not record the failure of %s", act.record.run_id)

    def _crash_cause(self, act: Activation, exc: BaseException) -> str:
        """The exception's class and its text, masked like every run message (the
        secrets held for the run, the run input's secret-looking values) and bounded.
        Kept in memory only (`crash_causes`): the runner that ran the launch shows it
        (a foreground `wfrun run` prints it); what is persisted keeps the class alone,
        since an exception's text may hold input."""
        run_input = act.driver.state.input if act.driver is not None else None
        text = one_line(str(exc)) or "no message"
        return f"{type(exc).__name__}: {self._held.safe(text, run_input)}"

    def began(self, run_id: str) -> bool:
        """Whether the run's bundle began; False when it cannot be read (then there is
        no bundle this runner can end either)."""
        try:
            return self._reader.started(run_id)
        except WfrunError:
            return False
