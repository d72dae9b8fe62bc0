"""`ProjectStore`: both sides of a project's store in one protocol.

Its own module so the launch side's protocols (`runner.store._interface`, which every
launch command loads) do not build the controller side's (issue 34 item 11, cold start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from runner.store._controller_interface import ControllerStore
from runner.store._interface import Store

if TYPE_CHECKING:
    from runner.store.domain._retention import Retention


class ProjectStore(Store, ControllerStore, Protocol):
    """A project's whole store, both sides: what `open_store` gives (SQLite or
    Postgres). Code that needs one side takes that side's protocol."""

    @property
    def retention(self) -> Retention:
        """Forgetting pruned runs and trimming history (`wfrun prune`)."""
        ...
