"""A claimed launch joined to its run's database bundle (engine/_rows.py, `LaunchLink`).

When run bundles live in the store's database, two of the launch's own commits
go into the bundle's: the run's first write (its row, snapshot, manifest,
`run_started` and the first node's start) commits in the launch's `running`
transition, and the run's seal in the transition that records how it ended
(`finish`, `fail` or the holder's `cancel`). The launch row and its bundle then
never disagree at those two points, and a 3-node run costs 6 commits in all
(docs/store.md). The transition's guard (claim token, status, lease, on the
locked launch row) is the bundle write's fence: a refused guard writes nothing.

A folder bundle has no transaction to share: the same steps run with no write
(`run(None)`), the `running` one (by the bundle) just before the executor is released
and the ending's (by `Endings.record`, the engine does not call back for it) right
after the seal, each committed as the store commits a transition without a bundle.
The link of one activation is `activator.RunLink`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runner.store import (
    BundleRefused,
    BundleWrite,
    LaunchBook,
    LaunchRecord,
    LostRace,
    StoreUnreachable,
)

Transition = Callable[[BundleWrite | None], LaunchRecord | LostRace]


class Step:
    """One launch transition that carries a bundle write (`LaunchStep`)."""

    def __init__(self, transition: Transition,
                 then: Callable[[LaunchRecord], None] | None = None) -> None:
        self._transition = transition
        self._then = then

    def run(self, write: Callable[[Any], str] | None) -> str:
        try:
            result = self._transition(write)
        except BundleRefused as refused:
            return refused.word
        except StoreUnreachable:  # a full or read-only database is a machine fault: raised
            return "unavailable"  # the bundle retries (it may have committed)
        if isinstance(result, LostRace):
            return "fenced"
        if self._then is not None:
            self._then(result)
        return "ok"


class RunningStep:
    """The launch's `running` transition carrying the run's first bundle write: it
    tells `ran` the committed row and when the statement was sent (the fence answers
    from that, activation.py)."""

    def __init__(self, book: LaunchBook, run_id: str, token: str, sent: float,
                 ran: Callable[[LaunchRecord, float], None]) -> None:
        self._book = book
        self._run_id = run_id
        self._token = token
        self._sent = sent
        self._ran = ran

    def __call__(self, bundle: BundleWrite | None) -> LaunchRecord | LostRace:
        return self._book.mark_running(self._run_id, self._token, bundle=bundle)

    def step(self) -> Step:
        return Step(self, self._then)

    def _then(self, record: LaunchRecord) -> None:
        self._ran(record, self._sent)
