"""What a session controller sends into its session at a boundary: turn intents (a run's
follow-up turn, its presentation when it has one) and passive notifications. Each is
claimed in the store, looked for in the session log first (and, for a turn intent, in
wfrun's own record of the send), then appended, so nothing is sent twice."""

from __future__ import annotations

import logging
from functools import partial

from runner.compiler._templates import TemplateError, render_text
from runner.errors import WfrunError
from runner.launch import LaunchCoordinator, fallback_text, message_id
from runner.launch._intents import (
    AGENT_STEP_TYPE,
    DEFERRED_TURN_TYPE,
    MESSAGE_SCHEMA,
    NOTIFICATION_TYPE,
    PRESENTATION_TYPE,
)
from runner.store import LostRace, NewNotification, StoreError, TurnIntent, TurnResolution

from ._protocol import Host, SessionEntry
from ._replies import for_model

log = logging.getLogger(__name__)
RESOLUTION_BY_TYPE: dict[str, TurnResolution] = {
    AGENT_STEP_TYPE: "workflow_prompt", PRESENTATION_TYPE: "presentation",
    DEFERRED_TURN_TYPE: "fallback"}
#: The run event written just before a turn intent's message is appended.
SENDING_EVENT = "turn_intent.sending"


class Deliveries:
    """The session's mail: turn intents and notifications due to `session_id`."""

    def __init__(self, host: Host, coordinator: LaunchCoordinator, session_id: str) -> None:
        self.host = host
        self.coordinator = coordinator
        self.store = coordinator.store
        self.book = coordinator.book
        self.session_id = session_id

    def _presentation_text(self, intent: TurnIntent) -> str | None:
        """Render a run's closing presentation from its definition and bundle."""
        coordinator = self.coordinator
        try:
            record = self.book.get(intent.run_id)
            if record is None or record.status != "done":
                return None
            definition, _ = coordinator.resolver.compile(record.workflow_ref)
            if definition.digest != record.definition_digest or not definition.presentation:
                return None
            state = coordinator.reader.state(intent.run_id)
            live = partial(coordinator.reader.live, intent.run_id)
            ctx = {"input": live(state.input), "outputs": live(state.outputs),
                   "results": live(state.results),
                   "run": {"id": intent.run_id, "status": state.status}, "project": {}}
            return render_text(definition.presentation, ctx)[:50_000]
        except (WfrunError, TemplateError) as exc:
            log.warning("presentation of %s failed: %s", intent.run_id, exc)
            return None

    def _sent_ids(self, key: str) -> dict[str, SessionEntry]:
        out: dict[str, SessionEntry] = {}
        for entry in self.host.read_session_entries():
            details = entry.details or {}
            value = details.get(key)
            if isinstance(value, str):
                out[value] = entry
        return out

    def turn_intents(self) -> None:
        intents = self.store.turn_intents
        try:
            eligible = intents.list_eligible(self.session_id)
        except StoreError:
            return
        for intent in eligible:
            retry = intent.delivery_claim_token is not None  # a deliverer died holding it
            claimed = intents.claim_delivery(intent.intent_id)
            if isinstance(claimed, LostRace):
                continue
            token = claimed.delivery_claim_token or ""
            seen = self._sent_ids("turnIntentId").get(intent.intent_id)
            seen_as: TurnResolution | None = None
            if seen is not None:
                seen_as = RESOLUTION_BY_TYPE.get(seen.custom_type or "", "fallback")
            elif retry:
                seen_as = self._recorded_send(intent)
            if seen_as is not None:
                # Sent before a crash; resolve without sending it again.
                intents.resolve(intent.intent_id, token, resolution=seen_as,
                                message_id=message_id(intent.intent_id, seen_as))
                continue
            details = {"schema": MESSAGE_SCHEMA, "turnIntentId": intent.intent_id,
                       "runId": intent.run_id, "cause": intent.cause}
            kind = DEFERRED_TURN_TYPE
            resolution: TurnResolution = "fallback"
            text = None
            if intent.cause in ("presentation", "controller_interrupted", "claim_lost"):
                # A run that ended with a presentation: it resolves whatever intent of
                # the run is pending, instead of a second turn.
                text = self._presentation_text(intent)
                if text is not None:
                    kind, resolution = PRESENTATION_TYPE, "presentation"
                    details["presentationId"] = f"presentation:{intent.run_id}"
            if text is None:
                # The stored reason was written for any reader; the model has the tool.
                text = for_model(fallback_text(intent.fallback_facts))
            # wfrun's own durable record of the send, for a retry after a crash: the
            # session log may no longer hold the message (an adapter returning only
            # the compacted view). A crash between this line and the append loses the
            # message rather than risk sending it twice (at most one turn per intent).
            try:
                self.store.run_events.append(intent.run_id, SENDING_EVENT,
                                             {"turnIntentId": intent.intent_id,
                                              "resolution": resolution},
                                             runner_id=self.coordinator.runner_id)
                self.host.append_message(kind, text, details,
                                         deliver_as="follow_up", trigger_turn=True)
            except Exception:
                intents.release_delivery(intent.intent_id, token)
                raise
            self.coordinator.crash("after_session_append")
            intents.resolve(intent.intent_id, token,
                            resolution=resolution,
                            message_id=message_id(intent.intent_id, resolution))

    def _recorded_send(self, intent: TurnIntent) -> TurnResolution | None:
        """How the intent was sent, if a deliverer that died recorded sending it."""
        after = 0
        while True:
            page = self.store.run_events.read(run_id=intent.run_id, after_seq=after)
            for event in page:
                body = event.payload if isinstance(event.payload, dict) else {}
                if event.type == SENDING_EVENT and body.get("turnIntentId") == intent.intent_id:
                    known = [r for r in RESOLUTION_BY_TYPE.values()
                             if r == body.get("resolution")]
                    return known[0] if known else "fallback"
            if not page:
                return None
            after = page[-1].seq

    def notifications(self) -> None:
        notes = self.store.notifications
        try:
            pending = notes.list_pending(self.session_id)
        except StoreError:
            return
        if not pending:
            return
        sent = self._sent_ids("notificationId")
        for note in pending:
            try:
                claimed = notes.claim_delivery(note.notification_id)
                if isinstance(claimed, LostRace):
                    continue
                if note.notification_id not in sent:
                    self.host.append_message(NOTIFICATION_TYPE, note.content,
                                             {"notificationId": note.notification_id,
                                              "runId": note.run_id, "kind": note.kind},
                                             deliver_as="next_turn", trigger_turn=False)
                notes.mark_delivered(note.notification_id, claimed.delivery_claim_token or "")
            except StoreError as exc:
                # A passive report stays in the outbox; after the claim lease a later
                # boundary finds it in the session log (or sends it) and marks it. A
                # store hiccup here must not fail the notify node or the host's turn.
                log.warning("notification %s not delivered yet: %s", note.notification_id,
                            exc.message)


class NotificationOutbox:
    """`notify` nodes write to the store's outbox; the controller delivers them."""

    def __init__(self, deliveries: Deliveries, session_id: str, host: Host) -> None:
        self._deliveries = deliveries
        self._session_id = session_id
        self._host = host

    def emit(self, run_id: str, node: str, attempt: str, notification_id: str, kind: str,
             message: str, channels: tuple[str, ...] = ()) -> None:
        # `channels` are the launch's channel outbox (launch/_channels.py), which wraps this.
        visit = int(notification_id.rsplit(":", 1)[-1]) if ":" in notification_id else 1
        store = self._deliveries.store
        store.notifications.insert(NewNotification(
            notification_id=notification_id, run_id=run_id, node_id=node, attempt_id=attempt,
            notification_index=visit, target_session_id=self._session_id,
            kind="final" if kind == "final" else "progress", content=message))
        if self._host.is_idle():
            self._deliveries.notifications()
