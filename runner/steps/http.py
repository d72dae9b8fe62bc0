"""The `http` step: one HTTP request, registered under `wfrun.steps` like any plugin.

    fetch:
      action:
        call: http
        with:
          url: "https://api.example.com/items/{{ input.id }}"
          method: POST                  # default GET
          headers: {Authorization: "Bearer {{ secrets.API_TOKEN }}"}
          json: {note: "{{ outputs.plan.summary }}"}
          expect: [200, 201]            # default: any 2xx
      timeout: 30s

The node's output is `{status, headers, truncated}` and `json` or `text`: the response
body as JSON when the server says it is JSON, else as text, cut at 1 MiB.
What goes wrong ends the node with a code a `$result` switch or a `retry` can
act on: `http_status` (an answer outside `expect`), `http_connect` (no
connection), `http_error` (the exchange broke), `http_invalid` (the rendered
`with:` is not a request), and `timed_out` (the node's deadline, which bounds
every wait of the request).

Secrets: the run's secrets are masked by the engine in everything it records;
this step also masks the values of request headers whose names say they hold a
secret (`runner._safety.is_secret_name`: Authorization, Cookie, X-Api-Key...) in
the output and every message, never echoes request headers, shows URLs without
their query or credentials, and drops `Set-Cookie` from the response headers.
A cancel ends the node at once; the request's own thread then lets its connection
go within a tenth of a second (it is shut down, even with no deadline). With tracing
on, the request carries a W3C `traceparent` header naming the node attempt's span
(a `traceparent` in `headers:` wins).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from runner._jsonin import loads
from runner._safety import is_secret_name, mask, mask_values

from . import HookContext, StepFailed, StepTimedOut

BODY_CAP = 1_048_576
NO_DEADLINE_TIMEOUT = None  # a node with `timeout: null` opted out of deadlines
STOP_POLL = 0.1  # seconds between looks at the run's stop request during a request
_DROPPED_HEADERS = frozenset({"set-cookie", "set-cookie2"})
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
_STATUS = {"type": "integer", "minimum": 100, "maximum": 599}

with_schema: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["url"],
    "properties": {
        "url": {"type": "string", "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://[^/?#]+"},
        "method": {"enum": list(METHODS)},
        "headers": {"type": "object",
                    "additionalProperties": {"type": ["string", "number", "boolean"]}},
        "json": {},
        "expect": {"anyOf": [_STATUS, {"type": "array", "minItems": 1, "items": _STATUS}]},
    },
}


def http(ctx: HookContext) -> dict[str, Any]:
    import httpx  # loaded when a run calls the step, not when a workflow is compiled

    params = _checked(ctx.params)
    url, method = params["url"], params.get("method", "GET")
    headers = {str(k): _header_value(v) for k, v in (params.get("headers") or {}).items()}
    if ctx.traceparent and not any(k.lower() == "traceparent" for k in headers):
        headers["traceparent"] = ctx.traceparent  # the server joins this attempt's trace
    hidden = mask_values([v for k, v in headers.items() if is_secret_name(k)]
                         + list(ctx.secrets.values()))
    shown = f"{method} {_shown_url(url)}"
    expect = params.get("expect")
    wanted = [expect] if isinstance(expect, int) else expect
    send: dict[str, Any] = {}
    if "json" in params:
        send["content"] = _encoded(params["json"], hidden)
        headers.setdefault("Content-Type", "application/json")
    remaining = ctx.remaining()
    if remaining is not None and remaining <= 0:
        raise StepTimedOut(f"{shown}: no time left before the node's deadline")
    timeout = httpx.Timeout(remaining if remaining is not None else NO_DEADLINE_TIMEOUT)
    hangup = _Hangup(ctx.stopping)
    try:
        with hangup, httpx.Client(timeout=timeout, follow_redirects=False,
                                  trust_env=False) as client, \
                client.stream(method, url, headers=headers, extensions={"trace": hangup.saw},
                              **send) as response:
            body, truncated = _read(response.iter_bytes(), ctx, shown)
            status, reply_headers = response.status_code, response.headers
            charset = response.charset_encoding or "utf-8"
    except httpx.TimeoutException:
        raise StepTimedOut(f"{shown} did not answer before the node's deadline") from None
    except httpx.ConnectError as exc:
        raise StepFailed("http_connect", mask(f"{shown}: cannot connect: {exc}", hidden)
                         [:500]) from None
    except httpx.HTTPError as exc:
        if hangup.hung_up:  # the read ended because the run stopped
            raise StepFailed("cancelled", f"{shown}: the run stopped") from None
        raise StepFailed("http_error", mask(f"{shown}: {type(exc).__name__}: {exc}", hidden)
                         [:500]) from None
    text = mask(body.decode(charset, errors="replace"), hidden)
    ok = status in wanted if wanted else 200 <= status < 300
    if not ok:
        detail = " ".join(text.split())[:300]
        expected = ", ".join(str(s) for s in wanted) if wanted else "2xx"
        raise StepFailed("http_status", f"{shown} answered {status} (expected {expected})"
                         + (f": {detail}" if detail else ""))
    out: dict[str, Any] = {
        "status": status,
        "headers": {k.lower(): mask(v, hidden) for k, v in reply_headers.items()
                    if k.lower() not in _DROPPED_HEADERS},
        "truncated": truncated,
    }
    if _is_json(reply_headers.get("content-type", "")) and not truncated:
        try:
            out["json"] = loads(text)  # bounded depth, finite numbers (runner/_jsonin.py)
            return out
        except ValueError:
            pass  # a server that says JSON and sends something else: give the text
    out["text"] = text
    return out


http.with_schema = with_schema  # type: ignore[attr-defined]


def _checked(params: dict[str, Any]) -> dict[str, Any]:
    """The rendered `with:` (templates are only values now): the compiler checked its
    constant parts; a rendered value that is not a request is `http_invalid`."""
    from jsonschema import Draft202012Validator

    errors = sorted(Draft202012Validator(with_schema).iter_errors(params),
                    key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        err = errors[0]
        where = ".".join(str(p) for p in err.absolute_path) or "with"
        value = err.instance if isinstance(err.instance, (int, float, bool)) else None
        what = f" (got {value})" if value is not None else ""
        raise StepFailed("http_invalid", f"http step: '{where}' is not valid: "
                         f"{_short_reason(err.validator)}{what}")
    return params


def _short_reason(validator: Any) -> str:
    return {"required": "url is required", "enum": "method must be one of "
            + ", ".join(METHODS), "pattern": "url must start with http:// or https://",
            "type": "wrong type", "additionalProperties": "unknown key (url, method, "
            "headers, json, expect)"}.get(str(validator), f"fails {validator}")


def _header_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _encoded(value: Any, hidden: tuple[str, ...]) -> bytes:
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise StepFailed("http_invalid", mask(f"http step: json is not JSON: {exc}", hidden)
                         [:300]) from None


class _Hangup:
    """Lets a stopped run's request go. Its thread may sit in a read with no deadline
    (`timeout: null`) after the engine has moved on; closing a socket from another
    thread does not wake that read on Linux, shutting it down does. The connection's
    streams are caught through httpcore's `trace` extension."""

    def __init__(self, stopping: Callable[[], bool]) -> None:
        self._stopping = stopping
        self._streams: list[Any] = []
        self._done = threading.Event()
        self.hung_up = False

    def saw(self, event: str, info: dict[str, Any]) -> None:
        if event.endswith((".connect_tcp.complete", ".start_tls.complete")):
            self._streams.append(info.get("return_value"))

    def __enter__(self) -> _Hangup:
        threading.Thread(target=self._watch, name="http-hangup", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def _watch(self) -> None:
        while not self._done.wait(STOP_POLL):
            if self._stopping():
                self.hung_up = True
                for stream in self._streams:
                    sock = stream.get_extra_info("socket") if stream is not None else None
                    with contextlib.suppress(OSError):
                        if sock is not None:
                            sock.shutdown(socket.SHUT_RDWR)
                return


def _read(chunks: Iterable[bytes], ctx: HookContext, shown: str) -> tuple[bytes, bool]:
    parts: list[bytes] = []
    size = 0
    for chunk in chunks:
        if ctx.stopping():  # cancelled or parked: the engine has moved on already
            raise StepFailed("cancelled", f"{shown}: the run stopped")
        take = chunk[:BODY_CAP - size]
        parts.append(take)
        size += len(take)
        if size >= BODY_CAP:
            return b"".join(parts), True
    return b"".join(parts), False


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _shown_url(url: str) -> str:
    """scheme://host[:port]/path: a query or user:password may hold a credential."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an invalid url)"
    return f"{parts.scheme}://{host}{port}{parts.path}"
