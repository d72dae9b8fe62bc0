"""The project's triggers as a host runs them (`wfrun host`, DESIGN §10).

Only workflows of the project's own folder (.wfrun/workflows) start on their
triggers: a workflow in the user's folder or a built-in one is shared by every
project, and a schedule of its own would fire once per project host. A workflow
that does not compile keeps its triggers out (one log line) until it is fixed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runner.errors import WfrunError
from runner.launch.triggers import Scheduled, TriggerLoop

if TYPE_CHECKING:
    from runner.launch.coordinator import LaunchCoordinator
    from runner.store import Store

    from .local import Workspace

log = logging.getLogger("wfrun.triggers")

#: Seconds between two looks at the project's workflows for their triggers (a look
#: re-hashes each file; a new or edited schedule applies within this long).
REFRESH_EVERY = 2.0


def project_triggers(ws: Workspace, broken: dict[str, str] | None = None) -> list[Scheduled]:
    """Every trigger of the project's valid workflows; `broken` collects why a
    workflow with a problem was left out (name -> message)."""
    found: list[Scheduled] = []
    for entry in ws.definitions().active:
        if entry.origin != "project":
            continue
        try:
            definition, _ = ws.compile(entry.name)
        except WfrunError as exc:
            if broken is not None:
                broken[entry.name] = exc.message
            continue
        found.extend(Scheduled(definition.name, spec) for spec in definition.triggers)
    return found


@dataclass
class HostTriggers:
    """The trigger loop of one host: its workflows re-read every REFRESH_EVERY."""

    ws: Workspace
    store: Store
    coordinator: LaunchCoordinator
    loop: TriggerLoop = field(init=False)
    _triggers: list[Scheduled] = field(default_factory=list, init=False)
    _read_at: float | None = field(default=None, init=False)
    _broken: dict[str, str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.loop = TriggerLoop(self.store.triggers, self.ws.clock, self._launch,
                                triggers=self.current, cancel=self._cancel)

    def current(self) -> list[Scheduled]:
        now = self.ws.clock.monotonic()
        if self._read_at is None or now - self._read_at >= REFRESH_EVERY:
            broken: dict[str, str] = {}
            self._triggers = project_triggers(self.ws, broken)
            for name, why in broken.items():
                if self._broken.get(name) != why:
                    log.warning("wfrun host: workflow '%s' starts on no trigger: %s", name, why)
            self._broken = broken
            self._read_at = now
        return self._triggers

    def tick(self) -> float | None:
        """Fire what is due; seconds until the next slot (None: nothing scheduled)."""
        return self.loop.tick()

    def _launch(self, workflow: str, run_input: Any, run_id: str) -> None:
        self.coordinator.prepare(workflow, run_input, run_id=run_id)

    def _cancel(self, run_id: str) -> None:
        self.coordinator.cancel(run_id)
