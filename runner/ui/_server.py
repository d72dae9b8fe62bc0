"""`wfrun ui`: a Starlette app served by uvicorn on a socket bound here (ADR 0005).

Reads are GET (HEAD); actions are POSTs under /api/ (actions.py). The guard keeps
the page local: it answers only for the host names it was bound to (a
DNS-rebinding page cannot reach it). Every UI has a token (auth.py): reads need it
only when asked for or off loopback, actions always, with the CSRF rule on
cookie-authenticated posts. Every response carries a Content-Security-Policy that
allows only this server's own scripts and styles, a second wall behind the
escaping of user text.
"""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from runner.errors import InputError, NotFoundError, OperationFailed
from runner.host.runtime._audit import Actor
from runner.host.runtime._errors import translate

from . import _data as data
from ._actions import BODY_MAX_BYTES, Actions, error_status, parse_body
from ._auth import (
    COOKIE,
    CSRF_HEADER,
    Credential,
    actor_of,
    credential,
    csrf_refusal,
    csrf_value,
    load_or_make_token,
    same,
)
from ._data import Site
from ._fanoutview import live_items, running_fanout
from ._live import RunTail, run_events
from ._pages import render
from ._runview import run_live

STATIC = Path(__file__).parent / "static"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass(frozen=True)
class UiConfig:
    host: str = "127.0.0.1"
    port: int = 0
    #: Needed for every action, and for reads too when `reads_locked`. None: actions
    #: are refused (an app built without one, in tests).
    token: str | None = None
    reads_locked: bool = False


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str | None, token: str | None,
               token_dir: Path | None = None) -> UiConfig:
    """The address to bind and the token: loopback unless `--host` names another.
    A given token locks reads too; off loopback reads are always locked. Without a
    given token, the one kept in `token_dir` is used (made there the first time)."""
    def kept() -> str:
        return load_or_make_token(token_dir) if token_dir is not None \
            else secrets.token_urlsafe(24)

    if host is None or host == "":
        return UiConfig("127.0.0.1", 0, token or kept(), bool(token))
    if not is_loopback(host):
        try:
            ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            raise InputError(f"--host must be an IP address to bind (such as 0.0.0.0 or "
                             f"192.0.2.10), got {host!r}") from None
        return UiConfig(host.strip("[]"), 0, token or kept(), True)
    return UiConfig(host.strip("[]"), 0, token or kept(), bool(token))


def bind_socket(config: UiConfig, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.host, port))
    except OSError as exc:
        sock.close()
        if port:
            raise OperationFailed(f"cannot listen on {config.host}:{port}: {exc.strerror}; "
                                  "pick another --port or leave it out for a free one") \
                from None
        raise OperationFailed(f"cannot listen on {config.host}: {exc.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_of(config: UiConfig, port: int) -> str:
    host = f"[{config.host}]" if ":" in config.host else config.host
    suffix = f"?token={quote(config.token)}" if config.token else ""
    return f"http://{host}:{port}/{suffix}"


class Guard(BaseHTTPMiddleware):
    def __init__(self, app: ASGIApp, *, hosts: tuple[str, ...], token: str | None,
                 reads_locked: bool) -> None:
        super().__init__(app)
        self.hosts = hosts
        self.token = token
        self.reads_locked = reads_locked

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        host = request.headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if "*" not in self.hosts and name not in self.hosts:
            return PlainTextResponse(f"wfrun ui answers only for {', '.join(self.hosts)}",
                                     status_code=421)
        action = request.method == "POST" and request.url.path.startswith("/api/")
        if request.method not in ("GET", "HEAD") and not action:
            return _secure(PlainTextResponse("wfrun ui changes runs only through POST "
                                             "/api/... actions", status_code=405))
        held: Credential | None = None
        if self.token is not None:
            given = request.query_params.get("token")
            if given is not None and same(given, self.token) and not action:
                # Move the token from the URL to a cookie, then show the page without it.
                response: Response = RedirectResponse(request.url.path, status_code=303)
                response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
                return _secure(response)
            held = credential(cookie=request.cookies.get(COOKIE, ""),
                              authorization=request.headers.get("authorization", ""),
                              token=self.token)
        request.state.credential = held
        if held is None and (self.reads_locked or action):
            text = "this wfrun ui needs its token: open the URL it printed" if not action \
                else "an action needs the token wfrun ui printed (Authorization: Bearer " \
                "TOKEN, or open its URL); nothing was changed"
            return _secure(_refusal(request, text, 401))
        if action and held is not None and self.token is not None:
            refusal = csrf_refusal(via=held.via, token=self.token,
                                   header=request.headers.get(CSRF_HEADER, ""),
                                   origin=request.headers.get("origin"),
                                   own_origins=(f"http://{host}",))
            if refusal is not None:
                return _secure(_refusal(request, refusal + "; nothing was changed", 403))
        return _secure(await call_next(request))


def _refusal(request: Request, text: str, code: int) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": text}, status_code=code)
    return PlainTextResponse(text, status_code=code)


def _secure(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers.setdefault("Cache-Control", "no-store")
    return response


def _error(request: Request, exc: Exception) -> Response:
    error = translate(exc)
    if error is None:
        raise exc
    code = error_status(error)
    message = " ".join(error.message.split())
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message}, status_code=code)
    return HTMLResponse(render("error.html", message=message, code=code), status_code=code)


Handler = Callable[[Request], Awaitable[Response]]


async def _bounded_body(request: Request) -> bytes:
    """The request body, refused once it passes BODY_MAX_BYTES (never read whole first:
    a client could send gigabytes)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > BODY_MAX_BYTES:
        raise InputError(f"the request body is {declared} bytes; the limit is "
                         f"{BODY_MAX_BYTES}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > BODY_MAX_BYTES:
            raise InputError(f"the request body is over {BODY_MAX_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def build_app(site: Site, config: UiConfig | None = None, *,
              poll: float | None = None) -> Starlette:
    config = config or UiConfig()
    # A wildcard bind answers under any of the machine's names: the token guards it.
    hosts = ("*",) if config.host in ("0.0.0.0", "::") else (
        tuple(dict.fromkeys((config.host, *LOOPBACK_NAMES))))

    def page(name: str, gather: Callable[[Request], dict[str, Any]]) -> Handler:
        async def endpoint(request: Request) -> Response:
            try:
                # Off the event loop: bundle and store reads block, live streams must not.
                view = await run_in_threadpool(gather, request)
            except Exception as exc:
                return _error(request, exc)
            if request.url.path.startswith("/api/"):
                return JSONResponse(view)
            return HTMLResponse(render(name, view=view, path=request.url.path,
                                       csrf=_csrf_for(request)))
        return endpoint

    def _csrf_for(request: Request) -> str:
        """The CSRF value, for a page whose request carried the token's cookie: only
        such a page can act (its script sends the value back with each action)."""
        held = getattr(request.state, "credential", None)
        if held is None or config.token is None:
            return ""
        return csrf_value(config.token)

    actions = Actions(site)

    def action(do: Callable[[Actions, Actor, Request, dict[str, Any]], dict[str, Any]]
               ) -> Handler:
        async def endpoint(request: Request) -> Response:
            client = request.client.host if request.client is not None else None
            actor = Actor(actor_of(config.token or ""), client)
            try:
                body = parse_body(await _bounded_body(request))
                result = await run_in_threadpool(do, actions, actor, request, body)
            except Exception as exc:
                return _error(request, exc)
            return JSONResponse(result, status_code=202 if result.get("status") == "queued"
                                else 200)
        return endpoint

    def start(a: Actions, who: Actor, request: Request, body: dict[str, Any]
              ) -> dict[str, Any]:
        return a.start(who, request.path_params["name"], body)

    def cancel(a: Actions, who: Actor, request: Request, body: dict[str, Any]
               ) -> dict[str, Any]:
        return a.cancel(who, request.path_params["run_id"])

    def answer(a: Actions, who: Actor, request: Request, body: dict[str, Any]
               ) -> dict[str, Any]:
        return a.answer(who, request.path_params["run_id"], body)

    def pause(a: Actions, who: Actor, request: Request, body: dict[str, Any]
              ) -> dict[str, Any]:
        return a.pause(who, request.path_params["run_id"])

    def unpause(a: Actions, who: Actor, request: Request, body: dict[str, Any]
                ) -> dict[str, Any]:
        return a.unpause(who, request.path_params["run_id"])

    def rerun(a: Actions, who: Actor, request: Request, body: dict[str, Any]
              ) -> dict[str, Any]:
        return a.rerun(who, request.path_params["run_id"], body)

    def trigger_pause(a: Actions, who: Actor, request: Request, body: dict[str, Any]
                      ) -> dict[str, Any]:
        return a.trigger(who, request.path_params["name"], True)

    def trigger_resume(a: Actions, who: Actor, request: Request, body: dict[str, Any]
                       ) -> dict[str, Any]:
        return a.trigger(who, request.path_params["name"], False)

    def triggers(request: Request) -> dict[str, Any]:
        return data.triggers_page(site)

    def audit(request: Request) -> dict[str, Any]:
        return data.audit_page(site, run_id=q(request, "run"), before=q(request, "before"),
                               limit=q(request, "limit"))

    def q(request: Request, key: str) -> str | None:
        return request.query_params.get(key)

    def queue(request: Request) -> dict[str, Any]:
        return data.queue_page(site)

    def workflows(request: Request) -> dict[str, Any]:
        return data.workflows_page(site)

    def workflow(request: Request) -> dict[str, Any]:
        return data.workflow_page(site, request.path_params["name"])

    def controllers(request: Request) -> dict[str, Any]:
        return data.controllers_page(site)

    def runs(request: Request) -> dict[str, Any]:
        return data.runs_page(site, status=q(request, "status"), workflow=q(request, "workflow"),
                              order=q(request, "order"), page=q(request, "page"),
                              per_page=q(request, "per_page"), search=q(request, "q"),
                              since=q(request, "since"), until=q(request, "until"))

    def run(request: Request) -> dict[str, Any]:
        run_id = request.path_params["run_id"]
        view = data.run_page(site, run_id)
        view.pop("snapshot", None)
        return view

    def run_json(request: Request) -> dict[str, Any]:
        run_id = request.path_params["run_id"]
        view = data.run_page(site, run_id)
        snapshot = view.pop("snapshot", None)
        view.pop("graph", None)
        if snapshot is not None:
            tail = RunTail(site.reader, run_id)
            tail.poll()
            live = run_live(run_id, tail.events, snapshot, site.secrets,
                            launch=data.launch_of(site, run_id),
                            continued_by=tail.reader.continued_by(run_id),
                            fanout=live_items(site.store(), run_id,
                                              running_fanout(tail.events)))
            view["live"] = tail.reader.live(run_id, live)
        return view

    async def events(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            if not site.reader.exists(run_id):
                data.run_page(site, run_id)  # NotFoundError unless a launch row exists
        except Exception as exc:
            return _error(request, exc)
        options = {} if poll is None else {"poll": poll}
        stream = run_events(site, run_id, disconnected=request.is_disconnected, **options)
        return StreamingResponse(stream, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store",
                                          "X-Accel-Buffering": "no"})

    async def home(request: Request) -> Response:
        return RedirectResponse("/runs", status_code=303)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    def resource(request: Request) -> dict[str, Any]:
        return data.resource_page(site, request.path_params["controller"],
                                  request.path_params["key"])

    routes = [
        Route("/", home),
        Route("/healthz", healthz),
        Route("/runs", page("runs.html", runs)),
        Route("/api/runs", page("", runs)),
        Route("/runs/{run_id}", page("run.html", run)),
        Route("/api/runs/{run_id}", page("", run_json)),
        Route("/api/runs/{run_id}/events", events),
        Route("/api/runs/{run_id}/cancel", action(cancel), methods=["POST"]),
        Route("/api/runs/{run_id}/answer", action(answer), methods=["POST"]),
        Route("/api/runs/{run_id}/pause", action(pause), methods=["POST"]),
        Route("/api/runs/{run_id}/unpause", action(unpause), methods=["POST"]),
        Route("/api/runs/{run_id}/rerun", action(rerun), methods=["POST"]),
        Route("/api/workflows/{name}/start", action(start), methods=["POST"]),
        Route("/api/audit", page("", audit)),
        Route("/triggers", page("triggers.html", triggers)),
        Route("/api/triggers", page("", triggers)),
        # A trigger's name holds a slash (WORKFLOW/TRIGGER): the action is the last part.
        Route("/api/triggers/{name:path}/pause", action(trigger_pause), methods=["POST"]),
        Route("/api/triggers/{name:path}/resume", action(trigger_resume), methods=["POST"]),
        Route("/queue", page("queue.html", queue)),
        Route("/api/queue", page("", queue)),
        Route("/workflows", page("workflows.html", workflows)),
        Route("/api/workflows", page("", workflows)),
        Route("/workflows/{name}", page("workflow.html", workflow)),
        Route("/api/workflows/{name}", page("", workflow)),
        Route("/controllers", page("controllers.html", controllers)),
        Route("/api/controllers", page("", controllers)),
        Route("/controllers/{controller}/{key:path}", page("resource.html", resource)),
        Route("/api/controllers/{controller}/{key:path}", page("", resource)),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(request, NotFoundError(f"nothing at {request.url.path}"))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        site.close()

    return Starlette(routes=routes,
                     middleware=[Middleware(Guard, hosts=hosts, token=config.token,
                                            reads_locked=config.reads_locked)],
                     exception_handlers={404: not_found}, lifespan=lifespan)


def serve(site: Site, config: UiConfig, port: int, *,
          on_ready: Callable[[str], None]) -> None:
    """Bind, report the URL, then serve until interrupted (Ctrl-C, SIGTERM)."""
    import uvicorn

    sock = bind_socket(config, port)
    bound = sock.getsockname()[1]
    app = build_app(site, config)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                           lifespan="on", timeout_graceful_shutdown=1))
    on_ready(url_of(config, bound))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()

