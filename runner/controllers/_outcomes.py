"""What a controller pass's outcome writes: a failure scheduled again as its exception
asks (kopf's convention, by type), a result applied as a status patch with compare-and-
swap, and the rarer passes that change finalizers or meet a deletion.

The common ends go to the manager's group commit (`submit`); a pass that changes
finalizers writes its steps one at a time here."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner._backoff import backoff_delay
from runner._safety import bound, one_line
from runner.clock import Clock, iso
from runner.errors import PermanentError, TemporaryError
from runner.store import LostRace
from runner.store._controller_interface import (
    ControllerStore,
    PassEnd,
    QueueItem,
    QueueOutcome,
    Resource,
)

from ._conditions import Result, apply_patch
from ._definitions import Controller

MAX_ERROR_BYTES = 2000


def bounded_error(text: str) -> str:
    """An error message as stored and shown: one line, at most MAX_ERROR_BYTES."""
    return bound(one_line(text), MAX_ERROR_BYTES)


@dataclass(frozen=True)
class Failure:
    """A failed pass: its message, and what user code raised (None for a timeout or a
    result of the wrong type), which decides when the key is tried again."""

    message: str
    raised: BaseException | None = None


def requested_delay(raised: BaseException | None) -> float | None:
    """The delay a TemporaryError asks for; None (use the backoff) for any other
    exception or a delay that is not a finite, non-negative number of seconds."""
    if not isinstance(raised, TemporaryError):
        return None
    delay = raised.delay
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        return None
    return float(delay) if math.isfinite(delay) and delay >= 0 else None


class PassOutcomes:
    """Records how each pass ended, for one manager."""

    def __init__(self, store: ControllerStore, *, clock: Clock, rng: random.Random,
                 backoff_base: float, backoff_cap: float,
                 submit: Callable[[PassEnd], None]) -> None:
        self.store = store
        self.clock = clock
        self.rng = rng
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self._submit = submit

    def failed(self, item: QueueItem, token: str, read: dict[str, Any], failure: Failure,
              rid: str) -> None:
        """Record a failed pass and schedule the next one as its exception asks."""
        message = bounded_error(failure.message)
        if isinstance(failure.raised, PermanentError):
            # Settled, not retried: retrying cannot help until the spec changes or
            # someone wakes the key (a wake-up during this pass still gets its pass).
            # The row goes away, so the event is where the error stays visible.
            self._submit(PassEnd(item.controller, item.key, token, outcome="settled",
                              error=message,
                              events=[("reconcile_failed", {**read, "error": message,
                                                            "retry": "never",
                                                            "retry_in": None}, rid)]))
            return
        delay = requested_delay(failure.raised)
        retry = "delay"
        if delay is None:
            retry = "backoff"
            delay = backoff_delay(item.consecutive_errors + 1, self.backoff_base,
                                  self.backoff_cap, self.rng)
        self._submit(PassEnd(item.controller, item.key, token, outcome="error", delay=delay,
                          error=message,
                          events=[("reconcile_failed", {**read, "error": message,
                                                        "retry": retry,
                                                        "retry_in": round(delay, 3)}, rid)]))

    def finished(self, item: QueueItem, token: str, ctl: Controller, resource: Resource,
                result: Result, rid: str) -> None:
        c, k = item.controller, item.key
        try:
            status = apply_patch(resource.status, result.patch,
                                 generation=resource.generation, now=iso(self.clock.now()))
        except ValueError as exc:
            self._invalid(item, token, exc, rid)
            return
        if result.patch.finalizers is not None or resource.deletion_timestamp is not None:
            self._finish_with_finalizers(item, token, ctl, resource, status, result, rid)
            return
        outcome: QueueOutcome = "settled"
        delay = 0.0
        if result.kind == "requeue":
            outcome = "requeue"
        elif result.kind == "requeue_after":
            outcome, delay = "requeue_after", result.delay
        elif ctl.resync:
            outcome, delay = "requeue_after", ctl.resync
        # Status CAS, queue completion and the finished record: one transaction, shared
        # with the passes other workers finish meanwhile.
        self._submit(PassEnd(
            c, k, token, outcome=outcome, delay=delay,
            events=[("reconcile_finished", {"result": result.kind, "delay": result.delay,
                                            "generation": resource.generation}, rid)],
            status=status, expected_version=resource.resource_version,
            # The resource changed while we worked: our status is stale; look again.
            conflict_events=[("reconcile_conflict",
                              {"read_version": resource.resource_version}, rid)]))

    def _invalid(self, item: QueueItem, token: str, exc: ValueError, rid: str) -> None:
        """A status that cannot be made (too big, not JSON): the pass fails, retried later."""
        message = bounded_error(str(exc))
        self.store.reconcile_queue.complete(
            item.controller, item.key, token, outcome="error", delay=self.backoff_base,
            error=message, events=[("reconcile_failed", {"error": message}, rid)])

    def _finish_with_finalizers(self, item: QueueItem, token: str, ctl: Controller,
                                resource: Resource,
                                status: dict[str, Any], result: Result, rid: str) -> None:
        """The rare pass that changes finalizers or meets a deletion: one write at a time."""
        q, events, resources = (self.store.reconcile_queue, self.store.controller_events,
                                self.store.resources)
        c, k = item.controller, item.key
        try:
            updated = resources.update_status(c, k, resource.resource_version, status)
        except ValueError as exc:
            self._invalid(item, token, exc, rid)
            return
        if isinstance(updated, LostRace):
            q.complete(c, k, token, outcome="requeue",
                       events=[("reconcile_conflict",
                                {"read_version": resource.resource_version}, rid)])
            return
        if result.patch.finalizers is not None:
            fin = resources.set_finalizers(c, k, updated.resource_version,
                                           result.patch.finalizers)
            if isinstance(fin, LostRace):
                q.complete(c, k, token, outcome="requeue",
                           events=[("reconcile_conflict", {"on": "finalizers"}, rid)])
                return
            updated = fin
        if (result.kind == "settled" and updated.deletion_timestamp is not None
                and not updated.finalizers):
            deleted = resources.delete(c, k, updated.resource_version)
            if deleted is True:
                events.append(c, k, "resource_deleted", {}, reconcile_id=rid)
                return
            q.complete(c, k, token, outcome="requeue",
                       events=[("reconcile_conflict", {"on": "delete"}, rid)])
            return
        finished = [("reconcile_finished", {"result": result.kind, "delay": result.delay,
                                            "generation": resource.generation}, rid)]
        if result.kind == "requeue":
            q.complete(c, k, token, outcome="requeue", events=finished)
        elif result.kind == "requeue_after":
            q.complete(c, k, token, outcome="requeue_after", delay=result.delay,
                       events=finished)
        elif ctl.resync:
            q.complete(c, k, token, outcome="requeue_after", delay=ctl.resync, events=finished)
        else:
            q.complete(c, k, token, outcome="settled", events=finished)
