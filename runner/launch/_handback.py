"""A session's run outside its session: agent steps go back to the session.

When a session ends, its launches are handed over (`Launches.hand_over`) and a
`wfrun host` may run them. Everything but an agent step runs there as it would in
the session. An agent step's prompt is part of the session's conversation, so
the host never gives it to an agent of its own: it hands the launch back (only
the session claims it again) and parks the run at that step, and the session
delivers the step when it starts again (as a `resume` turn). A runner whose
`EngineOptions.hand_back` is set gives a session's launch one (engines.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from runner.store import LaunchBook, StoreError

if TYPE_CHECKING:
    from runner.engine._agent import AgentStep, TurnKind

log = logging.getLogger(__name__)


class HandBack:
    """The agent-step executor of a session's run taken by a host."""

    name = "session"

    def __init__(self, book: LaunchBook, run_id: str) -> None:
        self.book = book
        self.run_id = run_id

    def run_turn(self, step: AgentStep, message: str, kind: TurnKind) -> None:
        try:
            # First: should the park below not get through, only the session takes it.
            self.book.hand_back(self.run_id)
        except StoreError as exc:
            log.warning("run %s not handed back to its session yet: %s", self.run_id,
                        exc.message)
        step.control.park(f"step '{step.contract.step}' waits for its agent session",
                          auto_resume=True)
