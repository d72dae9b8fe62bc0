"""Recovery and cancellation of launches whose runner may be gone.

`recover_expired`: `starting` rows whose lease expired are reconciled with their
bundles (seeds/000, "When recovery finds starting after a lease expires"). A
reclaim through `execute` reaches the same answers; this pass lets a session
settle its own abandoned starts at a boundary without claiming them first.

`cancel`: queued, starting and parked launches are cancelled at once (and a
parked bundle ends cancelled too); a running one is asked through a run event,
or, when its runner is gone, taken over and ended cancelled.
"""

from __future__ import annotations

from typing import Any

from runner._leases import renew_every
from runner.clock import Clock
from runner.engine import RunReader
from runner.errors import ConflictError, InputError, NotFoundError, WfrunError
from runner.store import (
    BundleRefused,
    BundleWrite,
    InputScrub,
    LaunchBook,
    LaunchRecord,
    LeaseFence,
    LostRace,
    Store,
    StoreError,
)

from ._activation import Activation
from ._endings import Endings
from ._engines import Engines
from ._intents import new_intent, workflow_name
from ._keeper import CANCEL_EVENT
from ._queue import Resolver

#: What a started bundle's status means for its `starting` row.
_BY_STATUS = {"running": "running", "waiting": "parked", "completed": "done",
              "cancelled": "cancelled"}
#: A run that has ended in its bundle: nothing of it runs again.
_ENDED = ("completed", "failed", "cancelled", "timed_out")


class Recovery:
    """Recovery and cancellation for one runner (see the module)."""

    def __init__(self, store: Store, book: LaunchBook, runner_id: str, clock: Clock,
                 lease_seconds: float, *,
                 reader: RunReader, resolver: Resolver, endings: Endings, engines: Engines,
                 scrub: InputScrub) -> None:
        self._store = store
        self._book = book
        self._runner_id = runner_id
        self._clock = clock
        self._lease_seconds = lease_seconds
        self._fence_margin = renew_every(lease_seconds)  # `LeaseFence.margin`
        self._reader = reader
        self._resolver = resolver
        self._endings = endings
        self._engines = engines
        self._scrub = scrub

    def recover_expired(self, session_id: str | None = None) -> list[LaunchRecord]:
        """Reconcile `starting` rows whose lease expired with what their bundles show."""
        store = self._store
        out: list[LaunchRecord] = []
        now = store.now_ms()
        for record in self._book.query(statuses=["starting"], session_id=session_id):
            if record.lease_live(now):
                continue
            outcome, code, message = self.bundle_outcome(record)
            intent = None
            if outcome == "failed" and record.origin_session_id is not None:
                intent = new_intent(session_id=record.origin_session_id,
                                    run_id=record.run_id,
                                    workflow=workflow_name(record.workflow_ref),
                                    cause="launch_failed", source="recovery",
                                    state="failed_to_start", reason=message or "",
                                    node="$launch")
            result = self._book.recover_expired_starting(
                record.run_id, epoch=record.epoch, outcome=outcome, code=code,
                message=message, turn_intent=intent)
            if not isinstance(result, LostRace):
                out.append(result)
        if any(r.status != "queued" for r in out):
            self._scrub.now()
        return out

    def bundle_outcome(self, record: LaunchRecord) -> tuple[Any, Any, str | None]:
        """What `record`'s bundle says its expired `starting` row should become."""
        reader = self._reader
        if not reader.started(record.run_id):
            # No bundle, or a half-made one (no `run_started`): nothing ran, so the launch
            # goes back to the queue with its input; the next activation starts afresh.
            return "queued", None, None
        try:
            manifest = reader.manifest(record.run_id)
            status = reader.status(record.run_id)
            if status == "running":  # the trace is the truth; the manifest never runs ahead
                status = manifest.get("status", status)
        except StoreError:
            raise  # the database, not the bundle: recovery tries again later
        except WfrunError:
            return "failed", "activation_failed", "the run bundle is unreadable"
        if manifest.get("definition_digest") != record.definition_digest:
            return "failed", "source_changed", "the run bundle does not match the launch"
        if status in ("completed", "cancelled"):
            # It ran to its end (a run written whole whose ending's commit was lost):
            # nothing of it runs again, whatever became of its source since.
            return _BY_STATUS[status], None, None
        try:
            current, _ = self._resolver.compile(record.workflow_ref)
        except WfrunError:
            current = None
        if current is None or current.digest != record.definition_digest:
            return "failed", "source_changed", ("the workflow source changed or disappeared "
                                                "while the run was starting")
        if status in _BY_STATUS:
            return _BY_STATUS[status], None, None
        return "failed", "activation_failed", f"the run ended {status} during startup"

    def cancel(self, run_id: str) -> LaunchRecord:
        """Cancel a launch now, or ask the live runner of a claimed one (`starting` or
        `running`: the record returned is not `cancelled`). A claimed launch whose
        runner died (its lease expired) is taken over (`running`) or cancelled."""
        store = self._store
        record = self._book.get(run_id)
        if record is None:
            raise NotFoundError(f"no queued or running launch '{run_id}'")
        if record.status in ("starting", "running") and record.lease_live(store.now_ms()):
            return self._request(record)
        if record.status == "running":
            return self._cancel_abandoned(record)
        try:
            result = self._book.cancel(run_id, bundle=self._unended(record))
        except BundleRefused:
            # Written whole, the run ended in its bundle, and its runner died before
            # its ending's commit (ADR 0009, lever 3): that ending is recorded, not a
            # cancel.
            return self._cancel_abandoned(record)
        if isinstance(result, LostRace):
            if result.reason == "lease_active":  # claimed since we looked: ask its runner
                return self._request(self._book.get(run_id) or record)
            if result.status in ("done", "failed", "cancelled"):
                raise ConflictError(f"run '{run_id}' already ended ({result.status})")
            raise ConflictError(f"run '{run_id}' changed state ({result.status}); try again")
        self._scrub.now()
        if self._reader.started(run_id):
            self._endings.end_cancelled(run_id)  # a parked run: its bundle ends cancelled too
        return result

    def _request(self, record: LaunchRecord) -> LaunchRecord:
        """Ask the live holder of a claimed launch to cancel it: its lease keeper reads
        the request and the run stops at its next boundary, or ends as it was going to
        (a run written whole may end first). The store refuses to cancel a `starting`
        row with a live lease without its token, so nothing but its holder ends it
        while that holder may be writing the run (ADR 0009, lever 3)."""
        self._store.run_events.append(record.run_id, CANCEL_EVENT, {},
                                      runner_id=self._runner_id)
        return record

    def _unended(self, record: LaunchRecord) -> BundleWrite | None:
        """For a `starting` row with its bundle in a folder and its lease expired: a
        check, made under the row's lock by the cancel's transition, that the bundle
        has not ended. A run written whole writes its files only while its fence holds
        (a live lease, so no token-less cancel), and a kill after them leaves an ended
        bundle this check finds: its ending is then recorded instead of a cancel."""
        if record.status != "starting" or self._reader.space.commits_with_store:
            return None
        reader, run_id = self._reader, record.run_id

        def unended(_tx: Any) -> str:
            return "ended" if reader.status(run_id) in _ENDED else "ok"
        return unended

    def _cancel_abandoned(self, record: LaunchRecord) -> LaunchRecord:
        launches = self._book
        claimed = launches.claim(record.run_id, runner_id=self._runner_id,
                                 lease_seconds=self._lease_seconds)
        if isinstance(claimed, LostRace):
            raise ConflictError(f"run '{record.run_id}' changed state ({claimed.status}); "
                                "try again")
        token = claimed.claim_token or ""
        fence = LeaseFence(launches, record.run_id, token, self._clock, self._fence_margin)
        engine = self._engines.fenced(claimed, fence)
        try:
            outcome = engine.abandon(record.run_id, "cancelled", code="cancelled",
                                     reason="cancelled while its runner was gone")
        except InputError:  # a waiting bundle: it ended before the cancel
            outcome = engine.settle(record.run_id)
        if outcome.status != "cancelled":
            # The run had ended before its runner died: record that, not a cancel.
            self._endings.record(Activation(claimed, token, fence, engine=engine), outcome)
            raise ConflictError(f"run '{record.run_id}' already ended ({outcome.status})")
        result = launches.cancel(record.run_id, claim_token=token)
        if isinstance(result, LostRace):
            raise ConflictError(f"run '{record.run_id}' changed state ({result.status}); "
                                "try again")
        return result
