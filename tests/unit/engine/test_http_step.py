"""The `http` step, a registered step called with `with:` parameters, against a real
HTTP server on 127.0.0.1 (tests/fakes/http_server.py)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from fakes.http_server import FakeHttp
from waiting import DEADLINE

from runner.engine._control import RunControl
from runner.engine._secrets import SecretSource

TOKEN = "tok-3f9a1c77e2b54d08"


@pytest.fixture
def http_server() -> Iterator[FakeHttp]:
    fake = FakeHttp().start()
    try:
        yield fake
    finally:
        fake.stop()


def _bytes_of_run(env: Any, run_id: str) -> bytes:
    return b"".join(p.read_bytes() for p in (env.runs / run_id).rglob("*") if p.is_file())


def test_post_renders_with_natively_and_masks_the_secret_everywhere(
        env: Any, http_server: FakeHttp) -> None:
    http_server.answer("/items/7", 201, {"id": 7, "echo": f"Bearer {TOKEN}"})
    d = env.workflow(f"""
        start: fetch
        secrets: [API_TOKEN]
        nodes:
          fetch:
            action:
              call: http
              with:
                url: "{http_server.url}/items/{{{{ input.id }}}}?key={{{{ secrets.API_TOKEN }}}}"
                method: POST
                headers: {{Authorization: "Bearer {{{{ secrets.API_TOKEN }}}}", X-Count: 3}}
                json: {{id: "{{{{ input.id }}}}", tags: "{{{{ ['a', 'b'] }}}}"}}
                expect: [200, 201]
    """)
    source = SecretSource(given={"API_TOKEN": TOKEN})
    out = env.engine(secret_source=source).start(d, {"id": 7})
    assert out.status == "completed", out.error
    (seen,) = http_server.requests
    assert (seen.method, seen.path) == ("POST", f"/items/7?key={TOKEN}")
    assert seen.headers["Authorization"] == f"Bearer {TOKEN}"  # the real value went out
    assert seen.headers["X-Count"] == "3"
    assert json.loads(seen.body) == {"id": 7, "tags": ["a", "b"]}  # native, not "7"
    assert out.final_output["status"] == 201
    # The whole Authorization value is masked, not only the secret inside it.
    assert out.final_output["json"] == {"id": 7, "echo": "***"}
    assert out.final_output["headers"]["content-type"] == "application/json"
    assert TOKEN.encode() not in _bytes_of_run(env, out.run_id)


def test_an_unexpected_status_fails_with_http_status_and_routes_by_result(
        env: Any, http_server: FakeHttp) -> None:
    http_server.answer("/down", 503, {"error": "maintenance"})
    d = env.workflow(f"""
        start: ping
        secrets: [API_TOKEN]
        nodes:
          ping:
            action:
              call: http
              with: {{url: "{http_server.url}/down?token={{{{ secrets.API_TOKEN }}}}"}}
          fallback: {{compute: "{{{{ results.ping.error.code }}}}"}}
        edges:
          - {{from: ping, switch: {{on: $result.outcome, cases: {{failed: fallback}}}}}}
    """)
    out = env.engine(secret_source=SecretSource(given={"API_TOKEN": TOKEN})).start(d, {})
    assert out.status == "completed"
    assert out.final_output == "http_status"
    error = out.state.results["ping"]["error"]
    assert error["message"].startswith(f"GET {http_server.url}/down answered 503 (expected 2xx)")
    assert "maintenance" in error["message"]
    assert "token" not in error["message"]  # a query may hold a credential: never shown


def test_a_server_that_does_not_answer_times_the_node_out(
        env: Any, http_server: FakeHttp) -> None:
    release = http_server.hang("/slow")
    http_server.answer("/slow", 200, {})
    d = env.workflow(f"""
        start: slow
        nodes:
          slow:
            action: {{call: http, with: {{url: "{http_server.url}/slow"}}}}
            timeout: 1s
    """)
    out = env.engine().start(d, {})
    release.set()
    assert out.status == "timed_out"
    assert out.error["code"] == "timed_out"


def test_cancel_during_a_request_ends_the_run_cancelled(
        env: Any, http_server: FakeHttp, when: Any) -> None:
    release = http_server.hang("/slow")
    http_server.answer("/slow", 200, {})
    d = env.workflow(f"""
        start: slow
        nodes:
          slow:
            action: {{call: http, with: {{url: "{http_server.url}/slow"}}}}
            timeout: null
    """)
    control = RunControl()
    when(http_server.arrived.is_set, lambda: control.cancel("user asked"))
    out = env.engine().start(d, {}, control=control)
    assert out.status == "cancelled"
    assert env.types(out.run_id)[-1] == "run_cancelled"
    # The request with no deadline lets its connection go once the run has stopped; it
    # does not sit in its read until the server answers.
    assert http_server.dropped.wait(DEADLINE)
    release.set()


def test_no_server_is_http_connect_and_a_bad_rendered_value_http_invalid(env: Any) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = env.workflow(f"""
        start: a
        nodes:
          a:
            action: {{call: http, with: {{url: "http://127.0.0.1:{port}/x"}}}}
          b:
            action:
              call: http
              with: {{url: "http://127.0.0.1:{port}/x", method: "{{{{ 'FETCH' }}}}"}}
        edges:
          - {{from: a, switch: {{on: $result.outcome, cases: {{failed: b}}}}}}
    """)
    out = env.engine().start(d, {})
    assert out.state.results["a"]["error"]["code"] == "http_connect"
    assert out.status == "failed"
    assert out.error["code"] == "http_invalid"
    assert "method must be one of GET" in out.error["message"]
