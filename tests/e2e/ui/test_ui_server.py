"""`wfrun ui` as an HTTP server (no browser): bind rules, the Host and token guard,
read-only methods, one-line errors, the SSE stream, JSON views. A real `wfrun ui`
subprocess and a real HTTP client on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from uikit import Project, UiServer, ui_server, wait_for_node
from waiting import wait_until

QUICK = """\
name: quick
title: "quick {{ input.n }}"
start: one
nodes:
  one:
    compute: "{{ {'n': input.n} }}"
"""

HOLD = """\
name: hold
start: hold
nodes:
  hold:
    action:
      shell: "while [ ! -f release ]; do sleep 0.1; done"
      use_shell: true
"""


@pytest.fixture(scope="module")
def five_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    """One server on five finished `quick` runs, shared by the tests that only read
    (one xdist group, so one worker makes it once): the runs and the server's start
    were most of their CPU, and none of them writes."""
    project = Project(tmp_path_factory.mktemp("five") / "proj")
    project.workflow("quick", QUICK)
    for n in range(5):
        assert project.wfrun("run", "quick", "-i", f"n={n}").returncode == 0
    with ui_server(project) as ui:
        yield ui


@pytest.mark.xdist_group("ui-server-five-runs")
def test_it_listens_on_loopback_on_a_free_port_and_prints_the_url(five_runs: UiServer) -> None:
    ui = five_runs
    assert ui.url.startswith("http://127.0.0.1:")
    assert "/?token=" in ui.url  # actions need it; reads on loopback do not
    assert httpx.get(f"{ui.base}/healthz").text == "ok"
    page = httpx.get(f"{ui.base}/runs")
    assert page.status_code == 200
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"


@pytest.mark.xdist_group("ui-server-five-runs")
def test_it_is_read_only_and_answers_only_for_its_own_host_names(five_runs: UiServer) -> None:
    ui = five_runs
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        done = httpx.request(method, f"{ui.base}/runs")
        assert done.status_code == 405, method
    rebound = httpx.get(f"{ui.base}/runs", headers={"Host": "evil.example:80"})
    assert rebound.status_code == 421
    assert httpx.get(f"{ui.base}/runs", headers={"Host": "localhost"}).status_code == 200


def test_a_token_is_required_when_given(project: Project) -> None:
    with ui_server(project, "--token", "s3cret-token-value") as ui:
        assert ui.url.endswith("/?token=s3cret-token-value")
        assert httpx.get(f"{ui.base}/runs").status_code == 401
        assert httpx.get(f"{ui.base}/runs", headers={"Authorization": "Bearer nope"}) \
            .status_code == 401
        with httpx.Client(follow_redirects=True) as client:
            first = client.get(ui.url)  # token in the URL -> HttpOnly cookie, then the page
            assert first.status_code == 200
            assert first.url.params.get("token") is None
            assert client.get(f"{ui.base}/api/runs").status_code == 200
        ok = httpx.get(f"{ui.base}/api/runs",
                       headers={"Authorization": "Bearer s3cret-token-value"})
        assert ok.status_code == 200


def test_another_bind_address_needs_a_token_and_gets_one(project: Project) -> None:
    with ui_server(project, "--host", "0.0.0.0") as ui:
        assert "?token=" in ui.url
        port = ui.base.rsplit(":", 1)[1]
        assert httpx.get(f"http://127.0.0.1:{port}/runs").status_code == 401
        with httpx.Client(follow_redirects=True) as client:
            assert client.get(ui.url.replace("0.0.0.0", "127.0.0.1")).status_code == 200


@pytest.mark.parametrize(("args", "message"), [
    (("--host", "example.com"), "wfrun: error: --host must be an IP address to bind"),
    (("--port", "70000"), "wfrun: error: --port must be a port number from 0 to 65535"),
    (("--port", "x"), "wfrun: error: --port must be a port number from 0 to 65535"),
])
def test_bad_options_are_one_line_errors(project: Project, args: tuple[str, ...],
                                         message: str) -> None:
    done = project.wfrun("ui", *args)
    assert done.returncode == 2
    assert done.stderr.startswith(message)
    assert "Traceback" not in done.stderr


def test_a_port_in_use_is_a_one_line_error(project: Project) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = project.wfrun("ui", "--port", str(port))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"wfrun: error: cannot listen on 127.0.0.1:{port}")


@pytest.mark.xdist_group("ui-server-five-runs")
def test_unknown_things_are_404_pages_and_bad_filters_400(five_runs: UiServer) -> None:
    ui = five_runs
    missing = httpx.get(f"{ui.base}/runs/quick-nope")
    assert missing.status_code == 404
    assert "no run &#39;quick-nope&#39;" in missing.text
    assert httpx.get(f"{ui.base}/api/runs/.hidden").status_code in (400, 404)
    assert httpx.get(f"{ui.base}/nowhere").status_code == 404
    assert httpx.get(f"{ui.base}/api/runs?page=0").json() == {
        "error": "page must be a whole number from 1 to 1000000000, got '0'"}
    assert httpx.get(f"{ui.base}/api/runs?per_page=x").status_code == 400
    assert httpx.get(f"{ui.base}/workflows/nope").status_code == 404
    assert httpx.get(f"{ui.base}/controllers/probe/nope").status_code == 404


@pytest.mark.xdist_group("ui-server-five-runs")
def test_the_json_runs_view_pages_in_the_store(five_runs: UiServer) -> None:
    view = httpx.get(f"{five_runs.base}/api/runs?per_page=2&page=2").json()
    assert view["total"] == 5
    assert view["pages"] == 3
    assert [r["title"] for r in view["rows"]] == ["quick 2", "quick 1"]
    assert view["counts"]["completed"] == 5
    assert "done" not in view["counts"]  # run states, as `wfrun runs` names them
    assert {r["status"] for r in view["rows"]} == {"completed"}


def test_a_project_without_a_store_shows_nothing_and_creates_nothing(
        project: Project) -> None:
    with ui_server(project) as ui:
        assert httpx.get(f"{ui.base}/api/runs").json()["rows"] == []
        assert httpx.get(f"{ui.base}/api/queue").json()["groups"]["queued"] == []
    assert not (project.root / ".wfrun" / "state" / "store.sqlite3").exists()


def test_the_event_stream_follows_the_trace_until_the_run_ends(project: Project) -> None:
    project.workflow("hold", HOLD)
    runner = subprocess.Popen(project.argv("run", "hold"), cwd=project.root,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        from waiting import wait_until

        run_id = wait_until(lambda: (project.run_ids() or [None])[0], what="the bundle")
        wait_for_node(project, run_id, "hold")
        with ui_server(project) as ui, httpx.stream(
                "GET", f"{ui.base}/api/runs/{run_id}/events", timeout=30) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            events: list[tuple[str, dict[str, object]]] = []
            kind = ""
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    events.append((kind, json.loads(line[6:])))
                    if kind == "run" and len(events) == 1:
                        assert events[0][1]["nodes"] == {"hold": "running"}
                        (project.root / "release").write_text("go")
                    if kind == "end":
                        break
        runs = [data for kind, data in events if kind == "run"]
        assert runs[-1]["status"] == "completed"
        assert runs[-1]["nodes"] == {"hold": "ok"}
        assert events[-1] == ("end", {"status": "completed"})
        assert runner.wait(timeout=30) == 0
    finally:
        (project.root / "release").write_text("go")
        if runner.poll() is None:
            runner.kill()
            runner.wait()


APPROVE = """\
name: approve
start: ask
nodes:
  ask: {checkpoint: {summary: "Ship {{ input.what }}?"}}
  after: {compute: "{{ {'answer': outputs.ask.answer} }}"}
edges:
  - {from: ask, to: after}
"""


def test_a_waiting_run_links_to_its_continuation_and_back(project: Project) -> None:
    project.workflow("approve", APPROVE)
    assert project.wfrun("run", "approve", "-i", "what=it").returncode == 4  # waiting
    (parent,) = project.run_ids()
    assert project.wfrun("answer", parent, "yes").returncode == 0
    (child,) = [r for r in project.run_ids() if r != parent]
    with ui_server(project) as ui:
        parent_view = httpx.get(f"{ui.base}/api/runs/{parent}").json()
        assert parent_view["continued_by"] == child
        assert parent_view["live"]["status"] == "continued"  # answered, as `runs` says
        assert parent_view["status"] == "continued"
        assert parent_view["live"]["nodes"] == {"ask": "waiting", "after": "skipped"}
        assert f'id="continued-link" href="/runs/{child}"' in \
            httpx.get(f"{ui.base}/runs/{parent}").text
        child_view = httpx.get(f"{ui.base}/api/runs/{child}").json()
        assert child_view["parent_run_id"] == parent
        assert child_view["live"]["status"] == "completed"
        assert child_view["live"]["outputs"]["after"] == {"answer": "yes"}
        assert f'id="parent-link" href="/runs/{parent}"' in \
            httpx.get(f"{ui.base}/runs/{child}").text


def test_open_hands_the_printed_url_to_the_browser(project: Project, tmp_path: Path) -> None:
    # webbrowser honours $BROWSER: a real program that records the URL it is given.
    seen = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf "%s" "$1" > "{seen}.tmp" && mv "{seen}.tmp" "{seen}"\n')
    browser.chmod(0o755)
    with ui_server(project, "--open", env={"BROWSER": str(browser)}) as ui:
        wait_until(seen.exists, what="the browser program to be started")
        assert seen.read_text() == ui.url
        assert httpx.get(ui.url, follow_redirects=True).status_code == 200


def test_secret_named_variables_of_every_spelling_are_masked_in_the_views(
        project: Project) -> None:
    # Issue 34.4: the UI used its own list (TOKEN, SECRET, PASSWORD, API_KEY) and showed
    # these in clear. One policy (runner/_safety.py) decides for every part of wfrun.
    values = {"DB_PASSWD": "canary-passwd-8a1f", "GITHUB_AUTH": "canary-auth-7c2e",
              "SESSION_COOKIE": "canary-cookie-44d0"}
    project.workflow("said", "start: say\nnodes:\n  say: {compute: \"{{ '"
                     + " ".join(values.values()) + "' }}\"}\n")
    ran = project.json("run", "said", "--json", "-q")  # recorded in clear: not set here
    run_id = ran["run_id"]
    with ui_server(project, env=values) as ui:
        view = httpx.get(f"{ui.base}/api/runs/{run_id}").text
        page = httpx.get(f"{ui.base}/runs/{run_id}").text
    for value in values.values():
        assert value not in view
        assert value not in page
    assert "*** *** ***" in view


def test_every_built_in_workflow_has_a_page(project: Project) -> None:
    # A built-in's sources carry a name, not a path (issue 35 item 8: every one was a 500).
    from runner.compiler._discovery import builtin_folder

    names = sorted(p.stem for p in builtin_folder("workflows").glob("*.yaml"))
    assert names
    with ui_server(project) as ui:
        listed = httpx.get(f"{ui.base}/workflows")
        assert listed.status_code == 200
        for name in names:
            page = httpx.get(f"{ui.base}/workflows/{name}")
            assert page.status_code == 200, (name, page.text[:300])
            assert "(built in)" in page.text, name


def test_hostile_tokens_and_run_ids_are_401_and_404_never_500(project: Project) -> None:
    project.workflow("quick", QUICK)
    assert project.wfrun("run", "quick", "-i", "n=1").returncode == 0
    with ui_server(project, "--token", "s3cret-token-value") as ui:
        good = {"Authorization": "Bearer s3cret-token-value"}
        for token in ("s3cret-token-valu\u00e9", "\u2603" * 20):
            raw = f"Bearer {token}".encode()
            assert httpx.get(f"{ui.base}/runs", headers={"Authorization": raw}) \
                .status_code == 401, token
            cookie = b"wfrun_ui_token=" + token.encode()
            assert httpx.get(f"{ui.base}/runs", headers={"Cookie": cookie}).status_code == 401
            assert httpx.get(f"{ui.base}/runs", params={"token": token}).status_code == 401
        for run_id in ("quick-" + "x" * 5000, "q" * 5000, "\u00e9" * 300):
            for path in (f"/runs/{run_id}", f"/api/runs/{run_id}", f"/api/runs/{run_id}/events"):
                page = httpx.get(f"{ui.base}{path}", headers=good)
                assert page.status_code in (400, 404), (path[:40], page.status_code)


def test_a_workflow_the_compiler_failed_on_leaves_the_catalog_up(project: Project) -> None:
    # Issue 35 item 7: a 400-digit duration or a NUL in a hook path was a traceback in
    # the compiler, so the whole workflows page was a 500.
    project.workflow("quick", QUICK)
    (project.root / ".wfrun" / "workflows" / "endless.yaml").write_text(
        "start: a\nnodes:\n  a: {compute: '1', timeout: " + "9" * 400 + "s}\n")
    (project.root / ".wfrun" / "workflows" / "nul.yaml").write_text(
        'start: a\nnodes:\n  a: {compute: {call: "./ho\\0oks.py:f"}}\n')
    with ui_server(project) as ui:
        rows = {r["name"]: r for r in httpx.get(f"{ui.base}/api/workflows").json()["rows"]}
        assert rows["quick"]["valid"] is True
        assert rows["endless"]["valid"] is False
        assert rows["nul"]["valid"] is False
        assert httpx.get(f"{ui.base}/workflows").status_code == 200
        for name in ("endless", "nul"):
            assert httpx.get(f"{ui.base}/workflows/{name}").status_code == 200
