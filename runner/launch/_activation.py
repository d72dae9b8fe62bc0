"""One claimed launch on its way to running (or already running): its state.

An `Activation` is what the run path knows of one claim: the row, the claim token,
the fence that guards the bundle's writes, and what activation has built so far
(the definition, the engine, the driver). The run path itself is `activator.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from runner.compiler import WorkflowDefinition
from runner.engine import Engine, RunControl, RunOutcome
from runner.engine._runner import RunDriver
from runner.store import LaunchRecord, LeaseFence, NextClaim

from ._intents import workflow_name


def _no_crash(_point: str) -> None:
    pass


class CrashPoints:
    """The run path's crash seam (tests): at each named point, `hook` is called when
    set. One object the collaborators share, so a test may set the coordinator's
    `crash` before a run and no collaborator calls the coordinator back for it. Each
    point asks `if crash.hook is not None` itself: production calls nothing."""

    __slots__ = ("hook",)

    def __init__(self, hook: Callable[[str], None] | None = None) -> None:
        self.hook: Callable[[str], None] | None = hook


@dataclass(eq=False)
class Activation:
    """One claimed launch on its way to running (or already running)."""

    record: LaunchRecord
    token: str
    fence: LeaseFence
    definition: WorkflowDefinition | None = None
    control: RunControl = field(default_factory=RunControl)
    claim_lost: bool = False
    driver: RunDriver | None = None
    engine: Engine | None = None
    checkpoint: str | None = None  # a continuation's first boundary: the parent's checkpoint
    force: bool = False  # resume although the workflow changed (an explicit, recorded choice)
    outcome: RunOutcome | None = None  # set when the bundle had ended before this claim
    by_id: bool = False  # claimed by id (foreground, resume): no claim loop follows it
    recorded: bool = False  # the ending committed (with the bundle's seal: RunLink)
    # How a run in a folder bundle ended, told at its seal (RunLink): `Endings.record`
    # commits it right after, or `Endings.crashed` if the run path raised meanwhile.
    sealed: RunOutcome | None = None
    then_claim: NextClaim | None = None  # the next launch, claimed with this one's ending
    # A pure run written whole with its ending (engine/_bundle.py, `write_whole`): no
    # `running` commit of its own, its ending takes the row through `running`.
    whole: bool = False
    # What the lease keeper has read of the run's events (keeper.py): the last one's
    # seq, and whether a pause request is pending (`pause_pending` over them).
    events_seen: int = 0
    pausing: bool = False

    def running(self, record: LaunchRecord, sent: float) -> None:
        """The row is `running` under this claim (mark_running's committed answer, to
        a statement sent at `sent`): the fence answers from it."""
        self.record = record
        self.fence.running(record, sent)

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def workflow(self) -> str:
        if self.definition is not None and self.definition.name:
            return self.definition.name
        return workflow_name(self.record.workflow_ref)
