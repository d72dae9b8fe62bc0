"""Notification channels (issue 39.6): `notify` nodes name channels configured in
.wfrun/config.yaml (a signed generic webhook, a Slack-compatible incoming webhook);
the store's channel outbox delivers each notification once, with retries, to a real
HTTP server on 127.0.0.1 that is down for a while and then up. Time is a FakeClock
handed to the deliverer and the store: no test sleeps."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from everyday import Project
from waiting import wait_for_line, wait_until

from runner.clock import FakeClock
from runner.host.runtime._channels import ChannelDeliverer, load_channels
from runner.store import SqliteStore

KEY = "ops-hook-key"

FLOW = """\
    name: flow
    start: hello
    nodes:
      hello:
        notify: {message: "deploy {{ input.what }} started", channels: [ops, team]}
      done:
        notify: {message: "deploy {{ input.what }} done", kind: final, channels: [ops]}
    edges:
      - {from: hello, to: done}
    """


class Receiver:
    """A real HTTP server on 127.0.0.1 recording every POST; `answers` are the status
    codes of the next requests (then 200)."""

    def __init__(self, port: int) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: list[int] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                code = outer.answers.pop(0) if outer.answers else 200
                outer.requests.append({"path": self.path, "headers": dict(self.headers),
                                       "body": body, "code": code})
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def delivered(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["code"] == 200]


@contextmanager
def receiver(port: int) -> Iterator[Receiver]:
    server = Receiver(port)
    try:
        yield server
    finally:
        server.stop()


def free_port() -> int:
    """A port nothing listens on (the receiver is down until it binds it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def configure(project: Project, port: int) -> None:
    project.file(".wfrun/config.yaml", f"""\
        notify:
          channels:
            ops: {{type: webhook, url: "http://127.0.0.1:{port}/hook", secret_env: OPS_KEY}}
            team: {{type: slack, url_env: TEAM_SLACK_URL}}
        """)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    p = Project(tmp_path / "proj")
    p.workflow("flow", FLOW)
    return p


def store_of(project: Project, clock: FakeClock) -> SqliteStore:
    return SqliteStore(project.root / ".wfrun" / "state" / "store.sqlite3", clock=clock)


def test_each_notification_reaches_its_channels_once_after_the_receiver_was_down(
        project: Project) -> None:
    port = free_port()
    configure(project, port)
    done = project.wfrun("run", "flow", "-i", "what=v2")
    assert done.returncode == 0, done.stderr
    clock = FakeClock(start=time.time() + 1)  # after the rows the run wrote
    environ = {"OPS_KEY": KEY, "TEAM_SLACK_URL": f"http://127.0.0.1:{port}/slack"}
    store = store_of(project, clock)
    try:
        deliverer = ChannelDeliverer(store, load_channels(project.root), clock, environ=environ)
        first = deliverer.deliver_due()  # down: connection refused, each tried again later
        assert (first.delivered, first.retried, first.failed) == (0, 3, 0)
        assert "cannot connect" in first.errors[0]
        assert f"{port}" not in " ".join(first.errors)  # no URL in what is kept or logged
        assert deliverer.deliver_due().retried == 0  # not due again yet
        waited = 0.0
        while waited < 10:  # down for 10 s: every due retry fails again
            clock.advance(1)
            waited += 1
            assert deliverer.deliver_due().delivered == 0
        rows = store.deliveries.recent()
        assert {r.status for r in rows} == {"pending"}
        assert min(r.attempts for r in rows) >= 2
        with receiver(port) as server:
            clock.advance(MAX_WAIT)
            assert deliverer.deliver_due().delivered == 3
            for _ in range(5):  # nothing is sent twice, however often the host looks
                clock.advance(MAX_WAIT)
                assert deliverer.deliver_due().delivered == 0
        got = server.delivered()
        assert len(got) == 3
        ids = [r["headers"]["X-Wfrun-Delivery"] for r in got]
        hooks = sorted((r for r in got if r["path"] == "/hook"),
                       key=lambda r: json.loads(r["body"])["node"])
        assert [json.loads(r["body"])["message"] for r in hooks] == \
            ["deploy v2 done", "deploy v2 started"]
        for request in hooks:
            expected = hmac.new(KEY.encode(), request["body"], hashlib.sha256).hexdigest()
            assert request["headers"]["X-Wfrun-Signature-256"] == f"sha256={expected}"
            assert json.loads(request["body"])["kind"] in ("progress", "final")
        (slack,) = [r for r in got if r["path"] == "/slack"]
        assert json.loads(slack["body"]) == {"text": "deploy v2 started"}
        assert len(set(zip(ids, (r["path"] for r in got), strict=True))) == 3
        assert {r.status for r in store.deliveries.recent()} == {"delivered"}
    finally:
        store.close()


MAX_WAIT = 400.0  # more than the longest backoff (5 min): every pending row is due


def test_a_notify_node_run_again_adds_no_second_delivery(project: Project) -> None:
    port = free_port()
    configure(project, port)
    assert project.wfrun("run", "flow", "-i", "what=x").returncode == 0
    clock = FakeClock(start=time.time() + 1)
    store = store_of(project, clock)
    try:
        (row, *_) = store.deliveries.recent()
        again = store.deliveries.enqueue(notification_id=row.notification_id,
                                         channel=row.channel, run_id=row.run_id,
                                         node_id=row.node_id, kind=row.kind,
                                         message=row.message)
        assert again is False
        assert len(store.deliveries.recent()) == 3
    finally:
        store.close()


def test_server_errors_are_retried_and_refusals_give_up(project: Project) -> None:
    port = free_port()
    configure(project, port)
    assert project.wfrun("run", "flow", "-i", "what=y").returncode == 0
    clock = FakeClock(start=time.time() + 1)
    store = store_of(project, clock)
    try:
        with receiver(port) as server:
            server.answers = [503, 503, 503]
            deliverer = ChannelDeliverer(store, load_channels(project.root), clock,
                                         environ={"OPS_KEY": KEY})  # no TEAM_SLACK_URL
            first = deliverer.deliver_due()
            assert first.delivered == 0
            assert any("TEAM_SLACK_URL" in e for e in first.errors)
            clock.advance(MAX_WAIT)
            deliverer.environ = {"OPS_KEY": KEY,
                                 "TEAM_SLACK_URL": f"http://127.0.0.1:{port}/slack"}
            server.answers = [404]  # the first one now is refused for good
            second = deliverer.deliver_due()
            assert (second.delivered, second.failed) == (2, 1)
            clock.advance(MAX_WAIT)
            assert deliverer.deliver_due().delivered == 0
        statuses = sorted(r.status for r in store.deliveries.recent())
        assert statuses == ["delivered", "delivered", "failed"]
        (failed,) = [r for r in store.deliveries.recent() if r.status == "failed"]
        assert failed.last_error is not None
        assert "HTTP 404" in failed.last_error
    finally:
        store.close()


def test_the_host_delivers_what_its_runs_notify(project: Project) -> None:
    port = free_port()
    configure(project, port)
    with receiver(port) as server:
        assert project.wfrun("start", "flow", "-i", "what=z").returncode == 0
        env = {"OPS_KEY": KEY, "TEAM_SLACK_URL": f"http://127.0.0.1:{port}/slack"}
        host = project.wfrun("host", "--once", "--no-controllers", env=env, timeout=90)
        assert host.returncode == 0, host.stderr
        assert sorted(r["path"] for r in server.delivered()) == ["/hook", "/hook", "/slack"]


@pytest.mark.parametrize(("config", "message"), [
    ("notify: {channels: {ops: {type: email, url: 'http://x.example'}}}",
     "notify.channels.ops: type must be webhook or slack"),
    ("notify: {channels: {ops: {type: webhook, url: 'http://x.example'}}}",
     "a webhook is signed"),
    ("notify: {channels: {ops: {type: slack, url: 'ftp://x.example'}}}",
     "url must be an http:// or https:// URL"),
    ("notify: {channels: {ops: {type: slack, url_env: A, url: 'http://x.example'}}}",
     "give exactly one of url and url_env"),
    ("notify: {channel: {}}", "notify must be a mapping with `channels:`"),
])
def test_a_bad_channel_config_stops_the_host_in_one_line(project: Project, config: str,
                                                         message: str) -> None:
    project.file(".wfrun/config.yaml", config + "\n")
    done = project.wfrun("host", "--once", "--no-controllers")
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_notify_channels_are_checked_by_the_compiler(project: Project) -> None:
    project.workflow("bad", """\
        name: bad
        start: n
        nodes:
          n: {notify: {message: hi, channels: ops}}
        """)
    done = project.wfrun("validate", "bad")
    assert done.returncode != 0
    assert "notify channels must be a list" in done.stdout + done.stderr
    project.workflow("twice", """\
        name: twice
        start: n
        nodes:
          n: {notify: {message: hi, channels: [ops, ops]}}
        """)
    assert "channel 'ops' is named twice" in "".join(
        (lambda d: d.stdout + d.stderr)(project.wfrun("validate", "twice")))


def test_a_running_host_delivers_from_its_delivery_thread(project: Project) -> None:
    port = free_port()
    configure(project, port)
    env = {**os.environ, "OPS_KEY": KEY, "TEAM_SLACK_URL": f"http://127.0.0.1:{port}/slack"}
    with receiver(port) as server:
        host = subprocess.Popen(project.argv("host", "--no-controllers"), cwd=project.root,
                                stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                env=env)
        try:
            assert host.stderr is not None
            wait_for_line(host.stderr, "wfrun host running for")
            assert project.wfrun("start", "flow", "-i", "what=w").returncode == 0
            wait_until(lambda: len(server.delivered()) == 3, what="3 deliveries")
        finally:
            host.send_signal(signal.SIGINT)
            host.wait(timeout=60)
            if host.stderr is not None:
                host.stderr.close()
        assert sorted(r["path"] for r in server.delivered()) == ["/hook", "/hook", "/slack"]


def test_a_channel_the_config_does_not_configure_is_refused_at_validate(
        project: Project) -> None:
    configure(project, 9)
    project.workflow("typo", """\
        name: typo
        start: n
        nodes:
          n: {notify: {message: hi, channels: [ops, teem]}}
        """)
    done = project.wfrun("validate", "typo")
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert text.splitlines()[0].endswith(
        "typo.yaml:4:45: error[unknown-channel]: notify channel 'teem' is not configured in "
        ".wfrun/config.yaml (notify: channels:); configured: ops, team")
    assert "^ did you mean 'team'?" in text
    assert "Traceback" not in done.stderr
    run = project.wfrun("run", "typo")  # refused before anything runs
    assert run.returncode != 0
    assert "notify channel 'teem' is not configured" in run.stderr
    assert not (project.runs_dir.exists() and any(project.runs_dir.iterdir()))
    # Without the config file no channel is configured: each name is refused.
    (project.root / ".wfrun" / "config.yaml").unlink()
    bare = project.wfrun("validate", "typo")
    assert "configured: none" in bare.stdout + bare.stderr
