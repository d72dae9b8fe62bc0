"""What a run driver is given and gives back, named apart from the driver itself so the
layers above (launch, host) can name them without the run loop: how a run ended
(`RunOutcome`), the launch a run belongs to (`LaunchLink`), where `notify` messages go
(`NotificationSink`), the trace observer, the crash seam and the retry delay."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from runner._backoff import ENGINE_JITTER, backoff_delay

from ._control import ITEMS
from ._rows import LaunchStep
from ._state import RunState

Observer = Callable[[dict[str, Any], RunState], None]
# A test seam: the engine calls it at named points (see CRASH_POINTS); the host may
# pass one that kills the process there. The engine never reads the environment.
CrashPoint = Callable[[str], None]
CRASH_POINTS = ("after_bundle_created", "after_manifest_written", "after_trace_append",
                "after_state_replace", "after_routing", "between_nodes", "before_seal",
                # a pure run written whole (bundle.py): its files written, the ending's
                # transaction not committed
                "after_whole_written",
                # a fan-out node (fanout.py): its items opened; items claimed (with the
                # ends written in that commit) and running; items ended, not yet written
                "after_items_opened", "after_items_claimed", "before_items_settled")


class NotificationSink(Protocol):
    def emit(self, run_id: str, node: str, attempt: str, notification_id: str, kind: str,
             message: str, channels: tuple[str, ...] = ()) -> None:
        """A `notify` message: to the run's session (if any) and to the configured
        `channels` it names (webhooks, Slack: the store's channel outbox)."""
        ...


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    status: str  # running (parked/paused) | waiting | completed | failed | timed_out | cancelled
    parked: bool
    final_output: Any
    error: dict[str, Any] | None
    state: RunState
    park_reason: str | None = None  # why a parked run stopped (RunControl.park)

    @property
    def waits_for_items(self) -> bool:
        """Parked while hosts run its fan-out items: it goes on when they end."""
        return self.parked and self.park_reason == ITEMS


def retry_delay(run_id: str, node: str, attempt: int, backoff: float,
                max_delay: float | None) -> float:
    """Exponential backoff with jitter that is deterministic per (run, node, attempt)
    (`runner._backoff`, 80-120 % of the step)."""
    return backoff_delay(attempt, backoff, max_delay, jitter=ENGINE_JITTER,
                         seed=f"{run_id}|{node}|{attempt}")


class LaunchLink(Protocol):
    """The claimed launch a run belongs to (the launch layer makes it,
    runner/launch/_activator.py, `RunLink`): its transitions commit in the bundle's writes, or right
    after them where the bundle shares no transaction with the store (a folder)."""

    def running(self) -> LaunchStep | None:
        """The step that takes the launch to `running`, with the first node's start."""
        ...

    def ended(self, outcome: RunOutcome) -> LaunchStep | None:
        """The step that records how the run ended, for its seal (None: recorded apart)."""
        ...
