"""Notification channels: `.wfrun/config.yaml`'s `notify: channels:` and the deliverer
that empties the store's channel outbox into them (a generic signed webhook, and
Slack-compatible incoming webhooks).

    notify:
      channels:
        ops:  {type: webhook, url: "https://ops.example/hooks/wfrun", secret_env: OPS_HOOK_KEY}
        team: {type: slack, url_env: SLACK_WEBHOOK_URL}

A webhook gets the notification as JSON (`notification_id`, `run_id`, `node`,
`kind`, `message`, `channel`), signed GitHub-style: `X-Wfrun-Signature-256:
sha256=<hex HMAC-SHA256 of the raw body>` with the key in the environment variable
`secret_env` names; `X-Wfrun-Delivery` carries the notification id. Slack gets
`{"text": message}`. URLs and keys may come from the environment (`url_env`,
`secret_env`): a Slack URL is a credential and stays out of the project's files.

Delivery (`ChannelDeliverer.deliver_due`, run by `wfrun host` in its loop): due rows
are claimed with a lease, posted once each, then marked delivered (never sent again)
or, on a refused connection, a timeout, a 5xx, 408 or 429, tried again after an
exponential backoff on the injected clock (1 s doubling, at most 5 min, for at most
MAX_ATTEMPTS tries); another 4xx, an unknown channel or a bad URL gives up at once.
The error kept on the row never carries the URL or the key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from runner._backoff import backoff_delay
from runner._canonical import canonical_bytes
from runner.clock import Clock
from runner.compiler._discovery import PROJECT_DIR
from runner.errors import InputError
from runner.store import Store
from runner.store._records import Delivery

from ._storeconfig import CONFIG_FILE, load_config

ChannelType = Literal["webhook", "slack"]
CHANNEL_TYPES: tuple[ChannelType, ...] = ("webhook", "slack")
MAX_ATTEMPTS = 20
BASE_DELAY = 1.0
MAX_DELAY = 300.0
TIMEOUT = 10.0
RETRY_STATUSES = frozenset({408, 425, 429})
SIGNATURE_HEADER = "X-Wfrun-Signature-256"
DELIVERY_HEADER = "X-Wfrun-Delivery"


@dataclass(frozen=True)
class Channel:
    name: str
    type: ChannelType
    url: str | None = None
    url_env: str | None = None
    secret_env: str | None = None


@dataclass(frozen=True)
class Sent:
    """One post's result: delivered, or why not and whether trying again may help."""

    ok: bool
    error: str = ""
    retry: bool = False


Send = Callable[[str, bytes, Mapping[str, str]], Sent]


def load_channels(project_root: Path | None) -> dict[str, Channel]:
    """The project's channels; one line naming the key for a mistake."""
    if project_root is None:
        return {}
    where = f"{PROJECT_DIR}/{CONFIG_FILE}"
    notify = load_config(project_root).get("notify")
    if notify is None:
        return {}
    if not isinstance(notify, Mapping) or set(notify) - {"channels"}:
        raise InputError(f"{where}: notify must be a mapping with `channels:` (name -> "
                         "{type: webhook|slack, url or url_env, secret_env})")
    raw = notify.get("channels") or {}
    if not isinstance(raw, Mapping):
        raise InputError(f"{where}: notify.channels must map channel names to settings")
    return {str(name): _channel(str(name), spec, f"{where}: notify.channels.{name}")
            for name, spec in raw.items()}


def _channel(name: str, spec: Any, where: str) -> Channel:
    if not isinstance(spec, Mapping):
        raise InputError(f"{where} must be a mapping such as {{type: slack, url_env: "
                         "SLACK_WEBHOOK_URL}")
    unknown = sorted(set(map(str, spec)) - {"type", "url", "url_env", "secret_env"})
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(unknown)}; the keys are type, "
                         "url, url_env and secret_env")
    kind = spec.get("type")
    if kind not in CHANNEL_TYPES:
        raise InputError(f"{where}: type must be webhook or slack, got {kind!r}")
    url, url_env = spec.get("url"), spec.get("url_env")
    if (url is None) == (url_env is None):
        raise InputError(f"{where}: give exactly one of url and url_env")
    if url is not None and not (isinstance(url, str) and _http(url)):
        raise InputError(f"{where}: url must be an http:// or https:// URL")
    secret_env = spec.get("secret_env")
    if kind == "webhook" and secret_env is None:
        raise InputError(f"{where}: a webhook is signed: name the environment variable "
                         "holding its key in secret_env")
    for key, value in (("url_env", url_env), ("secret_env", secret_env)):
        if value is not None and not (isinstance(value, str) and value.isidentifier()):
            raise InputError(f"{where}: {key} must name an environment variable")
    return Channel(name, kind, url, url_env, secret_env)


def _http(url: str) -> bool:
    return url.startswith(("http://", "https://")) and len(url) > 8


def post(url: str, body: bytes, headers: Mapping[str, str]) -> Sent:
    """POST once with a timeout, following no redirect; errors never show the URL."""
    import urllib.error  # here, not at import: every host makes a deliverer, few send
    import urllib.request

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None  # a 3xx is an error: a signed body is not sent on elsewhere

    request = urllib.request.Request(url, data=body, method="POST", headers=dict(headers))
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=TIMEOUT) as response:
            response.read(65536)
            return Sent(True)
    except urllib.error.HTTPError as exc:
        code = exc.code
        return Sent(False, f"HTTP {code}", retry=code >= 500 or code in RETRY_STATUSES)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        text = getattr(reason, "strerror", None) or type(reason).__name__
        return Sent(False, f"cannot connect: {text}", retry=True)


@dataclass
class DeliveryPass:
    delivered: int = 0
    retried: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


class ChannelDeliverer:
    def __init__(self, store: Store, channels: Mapping[str, Channel], clock: Clock, *,
                 send: Send = post, environ: Mapping[str, str] | None = None) -> None:
        self.store = store
        self.channels = channels
        self.clock = clock
        self.send = send
        self.environ = environ if environ is not None else os.environ

    def deliver_due(self, limit: int = 20) -> DeliveryPass:
        """Claim the due rows (up to `limit`) and post each once."""
        done = DeliveryPass()
        for delivery in self.store.deliveries.claim_due(limit=limit):
            self._one(delivery, done)
        return done

    def _one(self, delivery: Delivery, done: DeliveryPass) -> None:
        channel = self.channels.get(delivery.channel)
        if channel is None:
            self._give_up(delivery, f"no channel '{delivery.channel}' in "
                          f"{PROJECT_DIR}/{CONFIG_FILE} notify.channels", done)
            return
        url = channel.url or self.environ.get(channel.url_env or "", "")
        key = self.environ.get(channel.secret_env or "", "") if channel.secret_env else None
        if not _http(url):
            self._again(delivery, f"channel '{channel.name}': no http(s) URL in "
                        f"{channel.url_env or 'url'}", done)
            return
        if channel.secret_env and not key:
            self._again(delivery, f"channel '{channel.name}': {channel.secret_env} is not set",
                        done)
            return
        body, headers = render(channel, delivery, key)
        sent = self.send(url, body, headers)
        if sent.ok:
            if self.store.deliveries.mark_delivered(delivery):
                done.delivered += 1
        elif sent.retry:
            self._again(delivery, f"channel '{channel.name}': {sent.error}", done)
        else:
            self._give_up(delivery, f"channel '{channel.name}': {sent.error}", done)

    def _again(self, delivery: Delivery, error: str, done: DeliveryPass) -> None:
        done.errors.append(error)
        if delivery.attempts >= MAX_ATTEMPTS:
            self._give_up(delivery, f"{error} (gave up after {delivery.attempts} tries)", done)
            return
        delay = backoff_delay(delivery.attempts, BASE_DELAY, MAX_DELAY,
                              seed=f"{delivery.notification_id}/{delivery.channel}/"
                                   f"{delivery.attempts}")
        if self.store.deliveries.retry_at(delivery, round((self.clock.now() + delay) * 1000),
                                          error):
            done.retried += 1

    def _give_up(self, delivery: Delivery, error: str, done: DeliveryPass) -> None:
        done.errors.append(error)
        if self.store.deliveries.give_up(delivery, error):
            done.failed += 1


def render(channel: Channel, delivery: Delivery, key: str | None
           ) -> tuple[bytes, dict[str, str]]:
    """The body and headers a channel gets for one notification."""
    headers = {"Content-Type": "application/json", "User-Agent": "wfrun",
               DELIVERY_HEADER: delivery.notification_id}
    if channel.type == "slack":
        body = json.dumps({"text": delivery.message}).encode()
    else:
        body = canonical_bytes({"notification_id": delivery.notification_id,
                                "run_id": delivery.run_id, "node": delivery.node_id,
                                "kind": delivery.kind, "message": delivery.message,
                                "channel": delivery.channel})
    if key:
        digest = hmac.new(key.encode(), body, hashlib.sha256).hexdigest()
        headers[SIGNATURE_HEADER] = f"sha256={digest}"
    return body, headers
