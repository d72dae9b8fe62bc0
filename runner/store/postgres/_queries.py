"""The named statements Postgres writes differently from the portable ones
(runner/store/domain/): only where the SQL really differs."""

from __future__ import annotations

from collections.abc import Mapping

#: The launch side's overrides, per domain module (`domain.launch_side.LaunchSide`).
LAUNCH_SIDE: Mapping[str, Mapping[str, str]] = {
    # Text order follows the database's collation, so a prefix is not a key range.
    "pages": {"prefix": "starts_with(run_id, :prefix)"},
    # Appends take turns until commit so `seq` order is commit order (domain/_events.py):
    # one transaction-scoped advisory lock per schema.
    "events": {"order_appends":
               "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.run_events'))"},
    # Every Postgres open creates the tables added within v1: the audit trail is there.
    "audit": {"has_table": "SELECT 1 AS n"},
}
