"""The launch side of notification channels: a `notify` node's message, for each
channel it names, becomes a row of the store's channel outbox before the node ends.

The engine hands every `notify` message to its `NotificationSink`; the coordinator
wraps whatever sink the run has (a session's, or none) in `ChannelSink`, which adds
one `notification_deliveries` row per named channel, keyed by the notification id,
then passes the message on. The row is written while the node runs: a crash before
the node's end runs it again with the same notification id, and the second insert
adds nothing. The host delivers the rows (runner/host/runtime/_channels.py).
"""

from __future__ import annotations

from runner._safety import bound
from runner.engine._runtypes import NotificationSink
from runner.store import Store
from runner.store._states import DELIVERY_MESSAGE_MAX_BYTES


class ChannelSink:
    def __init__(self, store: Store, inner: NotificationSink | None) -> None:
        self.store = store
        self.inner = inner

    def emit(self, run_id: str, node: str, attempt: str, notification_id: str, kind: str,
             message: str, channels: tuple[str, ...] = ()) -> None:
        text = bound(message, DELIVERY_MESSAGE_MAX_BYTES, mark=False)
        for channel in channels:
            self.store.deliveries.enqueue(notification_id=notification_id, channel=channel,
                                          run_id=run_id, node_id=node,
                                          kind="final" if kind == "final" else "progress",
                                          message=text)
        if self.inner is not None:
            self.inner.emit(run_id, node, attempt, notification_id, kind, message, channels)
