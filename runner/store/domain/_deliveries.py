"""`notification_deliveries`: the channel outbox (webhooks, Slack), written once.

A `notify` node that names channels adds one row per channel, keyed by the
notification id (run, node, visit) and the channel: the node run again after a
crash adds nothing, so each notification reaches each channel at most once from
here. A deliverer claims due rows with a lease, posts, then marks the row
delivered (never sent again) or schedules the next attempt; a claim whose
deliverer died expires and the row is due again.
"""

from __future__ import annotations

from collections.abc import Mapping

from runner._leases import LEASE_SECONDS
from runner.store._connector import Connector, Row, named
from runner.store._records import Delivery, bounded_message, check_id, lease_ms, new_claim_token
from runner.store._states import DELIVERY_MESSAGE_MAX_BYTES, NOTIFICATION_KINDS

SQL: Mapping[str, str] = {
    "insert": "INSERT INTO notification_deliveries (notification_id, channel, run_id, node_id,"
    " kind, message, status, attempts, next_attempt_at, created_at) VALUES (:notification_id,"
    " :channel, :run_id, :node_id, :kind, :message, 'pending', 0, :now, :now)"
    " ON CONFLICT DO NOTHING",
    "due": "SELECT notification_id, channel FROM notification_deliveries"
    " WHERE status = 'pending' AND next_attempt_at <= :now"
    " AND (claim_expires_at IS NULL OR claim_expires_at <= :now)"
    " ORDER BY next_attempt_at, created_at LIMIT :limit",
    "claim": "UPDATE notification_deliveries SET claim_token = :token,"
    " claim_expires_at = :expires, attempts = attempts + 1"
    " WHERE notification_id = :notification_id AND channel = :channel"
    " AND status = 'pending' AND (claim_expires_at IS NULL OR claim_expires_at <= :now)"
    " RETURNING *",
    "delivered": "UPDATE notification_deliveries SET status = 'delivered', delivered_at = :now,"
    " claim_token = NULL, claim_expires_at = NULL, last_error = NULL"
    " WHERE notification_id = :notification_id AND channel = :channel"
    " AND status = 'pending' AND claim_token = :token RETURNING *",
    "retry": "UPDATE notification_deliveries SET next_attempt_at = :next, last_error = :error,"
    " claim_token = NULL, claim_expires_at = NULL"
    " WHERE notification_id = :notification_id AND channel = :channel"
    " AND status = 'pending' AND claim_token = :token RETURNING *",
    "give_up": "UPDATE notification_deliveries SET status = 'failed', last_error = :error,"
    " claim_token = NULL, claim_expires_at = NULL"
    " WHERE notification_id = :notification_id AND channel = :channel"
    " AND status = 'pending' AND claim_token = :token RETURNING *",
    "list": "SELECT * FROM notification_deliveries ORDER BY created_at DESC,"
    " notification_id, channel LIMIT :limit",
    "of_run": "SELECT * FROM notification_deliveries WHERE run_id = :run_id"
    " ORDER BY created_at, notification_id, channel",
}


def delivery_from_row(row: Row) -> Delivery:
    return Delivery(**{name: row[name] for name in Delivery.__slots__})


class NotificationDeliveries:
    """`notification_deliveries` over a connector."""

    def __init__(self, connector: Connector, overrides: Mapping[str, str] | None = None) -> None:
        self._connector = connector
        self._sql = named(SQL, overrides)

    def enqueue(self, *, notification_id: str, channel: str, run_id: str, node_id: str,
                kind: str, message: str) -> bool:
        """Add the row, due now; False when it was there already (a node run again)."""
        for value, what in ((notification_id, "notification_id"), (channel, "channel"),
                            (run_id, "run_id"), (node_id, "node_id")):
            check_id(value, what)
        if kind not in NOTIFICATION_KINDS:
            raise ValueError(f"unknown notification kind {kind!r}")
        size = len(message.encode("utf-8"))
        if size > DELIVERY_MESSAGE_MAX_BYTES:
            raise ValueError(f"a channel notification is {size} bytes; the limit is "
                             f"{DELIVERY_MESSAGE_MAX_BYTES}")
        with self._connector.write() as tx:
            added = tx.run(self._sql["insert"], {
                "notification_id": notification_id, "channel": channel, "run_id": run_id,
                "node_id": node_id, "kind": kind, "message": message, "now": tx.now_ms()})
        return added > 0

    def claim_due(self, *, limit: int = 20, lease_seconds: float = LEASE_SECONDS) -> list[Delivery]:
        """Claim up to `limit` rows that are due (pending, their time come, no live
        claim), oldest first; each claim counts as an attempt."""
        lease = lease_ms(lease_seconds)
        claimed: list[Delivery] = []
        with self._connector.write() as tx:
            now = tx.now_ms()
            for row in tx.all(self._sql["due"], {"now": now, "limit": limit}):
                got = tx.one(self._sql["claim"], {
                    "token": new_claim_token(), "expires": now + lease, "now": now,
                    "notification_id": row["notification_id"], "channel": row["channel"]})
                if got is not None:
                    claimed.append(delivery_from_row(got))
        return claimed

    def mark_delivered(self, delivery: Delivery) -> bool:
        """Delivered: never sent again. False when the claim was lost meanwhile."""
        with self._connector.write() as tx:
            row = tx.one(self._sql["delivered"], self._key(delivery, now=tx.now_ms()))
        return row is not None

    def retry_at(self, delivery: Delivery, next_attempt_ms: int, error: str) -> bool:
        with self._connector.write() as tx:
            row = tx.one(self._sql["retry"], self._key(delivery, next=next_attempt_ms,
                                                      error=bounded_message(error)))
        return row is not None

    def give_up(self, delivery: Delivery, error: str) -> bool:
        with self._connector.write() as tx:
            row = tx.one(self._sql["give_up"], self._key(delivery,
                                                        error=bounded_message(error)))
        return row is not None

    def recent(self, *, limit: int = 100) -> list[Delivery]:
        with self._connector.read() as tx:
            rows = tx.all(self._sql["list"], {"limit": limit})
        return [delivery_from_row(row) for row in rows]

    def of_run(self, run_id: str) -> list[Delivery]:
        with self._connector.read() as tx:
            rows = tx.all(self._sql["of_run"], {"run_id": run_id})
        return [delivery_from_row(row) for row in rows]

    @staticmethod
    def _key(delivery: Delivery, **extra: object) -> dict[str, object]:
        return {"notification_id": delivery.notification_id, "channel": delivery.channel,
                "token": delivery.claim_token, **extra}
