"""Webhook ingress: `wfrun host --listen ADDR:PORT` (DESIGN §10).

A POST to a webhook trigger's path starts its workflow once per delivery:

- the body is read whole, bounded (MAX_BODY; 413 past it, 411 without a length);
- with `secret: NAME` the HMAC-SHA256 of the raw body under $NAME must be in the
  signature header (`X-Hub-Signature-256: sha256=<hex>`, compared in constant
  time); a missing or wrong signature is 401 and nothing is recorded or queued;
- the delivery id header (`X-GitHub-Delivery`) is the firing's idempotency key: a
  replayed delivery queues nothing new and is answered with the first one's run;
- the answer is JSON naming the run id (202 queued, 200 a replay or a skip), sent
  once the run is durably queued; deliveries that arrive together are claimed and
  queued in one commit, one fsync for all (group commit: `_groupcommit.py`).

Only a loopback address serves triggers without a secret: `--listen` on any other
address is refused unless every webhook trigger of the project is signed.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import threading
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from runner import _jsonin as jsonin
from runner._safety import is_secret_name
from runner.errors import InputError, WfrunError
from runner.launch._triggers import Delivery, Scheduled, TriggerLoop
from runner.store import StoreError

from ._groupcommit import GroupCommit

if TYPE_CHECKING:
    from runner.store.domain._triggers import Firing

log = logging.getLogger("wfrun.webhooks")

#: The largest body a delivery may have (GitHub's payloads are capped at 25 MB; most
#: are far below 1 MiB): larger ones are refused before they are read.
MAX_BODY = 1 << 20
_DELIVERY_MAX = 200
#: Batches of deliveries committed at once on a store whose writers work side by
#: side (Postgres; the default pool has 8 connections, the host needs the rest).
PARALLEL_ROUNDS = 4
#: Batches committed at once where the writers take turns (SQLite). One: a second
#: batch committing during the first one's fsync (its sync is outside the writers'
#: turn) made more, smaller batches and two fsyncs queued on one file, slower on
#: the disk measured (bench/RESULTS.md, 2026-12-05).
SERIAL_ROUNDS = 1


def parse_listen(text: str) -> tuple[str, int]:
    """`ADDR:PORT` (`[::1]:8080` for IPv6; port 0 picks a free one)."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InputError(f"--listen '{text}' must be ADDR:PORT, like 127.0.0.1:8080")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def unsigned(triggers: list[Scheduled], environ: Mapping[str, str]) -> list[str]:
    """The webhook triggers a request could start without a valid signature."""
    return [f"{t.workflow}/{t.spec.name}" for t in triggers
            if t.spec.webhook is not None
            and (t.spec.webhook.secret is None or not environ.get(t.spec.webhook.secret))]


class Signatures:
    """HMAC-SHA256 checks, one keyed hash object made per secret and copied per
    request: the key's padding and the two inner and outer blocks are hashed once,
    not on every delivery."""

    def __init__(self) -> None:
        self._keyed: dict[str, Any] = {}

    def ok(self, secret: str, body: bytes, header: str | None) -> bool:
        if not header or not header.startswith("sha256="):
            return False
        keyed = self._keyed.get(secret)
        if keyed is None:
            keyed = self._keyed[secret] = hmac.new(secret.encode(), digestmod=hashlib.sha256)
        mac = keyed.copy()
        mac.update(body)
        return hmac.compare_digest(mac.hexdigest(), header[len("sha256="):].strip().lower())


class WebhookServer:
    """A threaded HTTP server in the host's process; each delivery is a firing of
    `loop` (the host's trigger loop)."""

    def __init__(self, listen: str, loop: TriggerLoop, triggers: Callable[[], list[Scheduled]],
                 environ: Mapping[str, str], *,
                 counted: Callable[[str, str], None] | None = None) -> None:
        """`counted(trigger, outcome)`: each request's fate (`delivery_outcome`), for the
        host's metrics."""
        host, port = parse_listen(listen)
        self.loop = loop
        self.counted = counted
        self.triggers = triggers
        self.environ = dict(environ)
        if not is_loopback(host):
            open_ = unsigned(triggers(), self.environ)
            if open_:
                raise InputError(f"--listen {listen} is not a loopback address, and "
                                 f"webhook trigger(s) {', '.join(open_)} would accept "
                                 "unsigned deliveries; give each `secret: NAME` and set "
                                 "$NAME, or listen on 127.0.0.1")
        self.loopback = is_loopback(host)
        self.signatures = Signatures()
        # Deliveries that arrive together are queued in one commit (one fsync).
        self.commits: GroupCommit[Delivery, tuple[Firing, bool] | WfrunError | StoreError] = \
            GroupCommit(loop.deliver_many, rounds=PARALLEL_ROUNDS
                        if loop.ledger.parallel_writes else SERIAL_ROUNDS)
        server = self
        handler = type("Handler", (_Handler,), {"server_ref": server})
        try:
            self.httpd = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise InputError(f"--listen {listen}: {exc.strerror or exc}") from None
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"{host!s}:{port}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="webhooks",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- one request -----------------------------------------------------------------
    def count(self, trigger: str, status: int, answer: Mapping[str, Any]) -> None:
        if self.counted is not None:
            self.counted(trigger, delivery_outcome(status, answer))

    def handle(self, path: str, headers: Mapping[str, str], body: bytes
               ) -> tuple[int, dict[str, Any]]:
        """(status, JSON answer) for a POST of `body` to `path`."""
        trigger, status, answer = self._handle(path, headers, body)
        self.count(trigger, status, answer)
        return status, answer

    def _handle(self, path: str, headers: Mapping[str, str], body: bytes
                ) -> tuple[str, int, dict[str, Any]]:
        matches = [t for t in self.triggers()
                   if t.spec.webhook is not None and t.spec.webhook.path == path]
        if not matches:
            return "", HTTPStatus.NOT_FOUND, {"error": f"no webhook trigger at {path}"}
        item = matches[0]
        name = f"{item.workflow}/{item.spec.name}"
        hook = item.spec.webhook
        assert hook is not None
        lower = {k.lower(): v for k, v in headers.items()}
        secret = self.environ.get(hook.secret) if hook.secret else None
        signed = hook.secret is not None or not self.loopback
        if signed and not (secret and self.signatures.ok(
                secret, body, lower.get(hook.signature_header.lower()))):
            return name, HTTPStatus.UNAUTHORIZED, {"error": "bad or missing signature "
                                                 f"({hook.signature_header})"}
        delivery = lower.get(hook.delivery_header.lower(), "").strip()
        if not delivery or len(delivery) > _DELIVERY_MAX or not delivery.isprintable():
            return name, HTTPStatus.BAD_REQUEST, {
                "error": f"a delivery needs a {hook.delivery_header} header "
                         f"(1-{_DELIVERY_MAX} characters)"}
        # Credentials (authorization, cookies) are not facts: never in a run's input.
        event = {"body": _body(body, lower.get("content-type", "")), "delivery": delivery,
                 "headers": {k: v for k, v in lower.items() if not is_secret_name(k)}}
        # Its checks here, in this thread, while the commit ahead waits for the disk.
        prepared = self.loop.prepare(item, delivery, event)
        found = self.commits.submit((item, delivery, event, prepared))
        if isinstance(found, (WfrunError, StoreError)):  # refused: the sender retries
            return name, HTTPStatus.SERVICE_UNAVAILABLE, {"error": found.message}
        firing, fresh = found
        debounced = bool(hook.debounce) and firing.outcome == "pending"
        answer: dict[str, Any] = {"trigger": name,
                                  "delivery": delivery, "outcome": firing.outcome,
                                  "run_id": firing.run_id if item.controller is None
                                  and not debounced
                                  and firing.outcome in ("launched", "pending") else None}
        if debounced:
            answer["debounced"] = hook.debounce
        if firing.reason:
            answer["reason"] = firing.reason
        answer["replayed"] = not fresh
        if firing.outcome == "failed":
            return name, HTTPStatus.UNPROCESSABLE_ENTITY, answer
        return name, (HTTPStatus.ACCEPTED if fresh and firing.outcome in ("launched", "pending")
                else HTTPStatus.OK), answer


def delivery_outcome(status: int, answer: Mapping[str, Any]) -> str:
    """What became of one request, as the metrics count it: `accepted` (a new delivery
    recorded: queued, kept for a debounce, or skipped or failed by its trigger's
    policy, which the slot counts say), `replayed` (a delivery id seen before: nothing
    new), `refused` (a bad signature, no delivery id, no such path, a body too large
    or without a length: nothing recorded), `error` (the store refused: try again)."""
    if status == HTTPStatus.SERVICE_UNAVAILABLE or status >= 500:
        return "error"
    if "replayed" not in answer:
        return "refused"
    return "replayed" if answer["replayed"] else "accepted"


def _body(raw: bytes, content_type: str) -> Any:
    text = raw.decode("utf-8", "replace")
    if "json" in content_type:
        try:
            return jsonin.loads(text)  # from outside: depth and number bounds
        except ValueError:
            return text
    return text


class _Handler(BaseHTTPRequestHandler):
    server_ref: WebhookServer
    protocol_version = "HTTP/1.1"  # keep-alive: a client's deliveries share a connection
    # An answer is one write (`_answer`); without TCP_NODELAY a write may still wait
    # for the client's delayed ACK of the one before (~40 ms).
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._refuse(HTTPStatus.LENGTH_REQUIRED, {"error": "Content-Length required"})
            return
        if int(length) > MAX_BODY:
            self._refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                         {"error": f"the body is over {MAX_BODY} bytes"}, close=True)
            return
        body = self.rfile.read(int(length))
        path = self.path.split("?", 1)[0]
        try:
            status, answer = self.server_ref.handle(path, dict(self.headers.items()), body)
        except Exception as exc:  # one bad request never stops the server
            log.exception("webhook %s failed", path)
            status, answer = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": type(exc).__name__}
            self.server_ref.count("", status, answer)
        self._answer(status, answer)

    def do_GET(self) -> None:
        self._refuse(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "deliveries are POSTs"})

    def _refuse(self, status: int, answer: dict[str, Any], close: bool = False) -> None:
        self.server_ref.count("", status, answer)  # before any trigger was matched
        self._answer(status, answer, close)

    def _answer(self, status: int, answer: dict[str, Any], close: bool = False) -> None:
        """The whole answer in one write: the headers and the body went out as two
        sends, each waking the client (its process, its read) and, on a loaded
        machine, each giving this thread's CPU away; one send is one wake-up."""
        data = json.dumps(answer).encode()
        self.log_request(status)
        head = [f"{self.protocol_version} {status} {HTTPStatus(status).phrase}",
                f"Server: {self.version_string()}", f"Date: {self.date_time_string()}",
                "Content-Type: application/json", f"Content-Length: {len(data)}"]
        if close:
            head.append("Connection: close")
            self.close_connection = True
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("webhook: " + format, *args)
