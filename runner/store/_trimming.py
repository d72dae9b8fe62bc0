"""History retention, backend-neutral: the tables that only grow, and their cut-offs.

`wfrun prune` trims these with one cut-off (`--older-than`), or a table its own
where the project's `retention:` settings say so (`.wfrun/config.yaml`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# The tables a retention pass trims, in the order it reports them.
TRIMMED_TABLES = ("run_events", "controller_events", "effects", "workflow_requests",
                  "trigger_firings")


@dataclass(frozen=True)
class Trimmed:
    """How many rows one retention pass removed, per table."""

    run_events: int = 0
    controller_events: int = 0
    effects: int = 0
    workflow_requests: int = 0
    trigger_firings: int = 0

    def to_json(self) -> dict[str, int]:
        return {"run_events": self.run_events, "controller_events": self.controller_events,
                "effects": self.effects, "workflow_requests": self.workflow_requests,
                "trigger_firings": self.trigger_firings}


def cutoffs(before_ms: int, tables: Mapping[str, int] | None) -> dict[str, int]:
    """Each trimmed table's cut-off: its own from `tables`, else `before_ms`."""
    unknown = set(tables or ()) - set(TRIMMED_TABLES)
    if unknown:
        raise ValueError(f"no retention for table(s) {sorted(unknown)}; "
                         f"tables: {', '.join(TRIMMED_TABLES)}")
    return {name: int((tables or {}).get(name, before_ms)) for name in TRIMMED_TABLES}
