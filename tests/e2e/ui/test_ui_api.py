"""The HTTP API's actions and new reads against a real `wfrun ui` subprocess and runs
made by the real CLI and `wfrun host`: the token (Bearer or cookie), the CSRF rule,
401/403 with nothing changed, the audit trail (`wfrun audit`), the token file, and
the run list's search and date filters."""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from uikit import Project, UiServer, ui_server

QUICK = """\
name: quick
title: "quick {{ input.n }}"
input:
  type: object
  required: [n]
  properties:
    n: {type: integer}
    note: {type: string}
start: one
nodes:
  one:
    compute: "{{ {'n': input.n} }}"
"""

APPROVE = """\
name: approve
start: ask
nodes:
  ask: {checkpoint: {summary: "Ship it?"}}
  after: {compute: "{{ {'answer': outputs.ask.answer} }}"}
edges:
  - {from: ask, to: after}
"""


def token_of(ui: UiServer) -> str:
    found = re.search(r"[?&]token=([^&\s]+)", ui.url)
    assert found is not None, ui.url
    return found[1]


def bearer(ui: UiServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_of(ui)}"}


def runs(ui: UiServer, **params: str) -> dict[str, Any]:
    done = httpx.get(f"{ui.base}/api/runs", params=params)
    assert done.status_code == 200, done.text
    body: dict[str, Any] = done.json()
    return body


def audit(project: Project) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = project.json("audit", "--json")["actions"]
    return rows


def test_reads_are_open_on_loopback_and_an_action_without_the_token_changes_nothing(
        project: Project) -> None:
    project.workflow("quick", QUICK)
    with ui_server(project) as ui:
        assert runs(ui)["rows"] == []
        for headers in ({}, {"Authorization": "Bearer wrong-token"},
                        {"Authorization": "Bearer \u00e9t\u00e9".encode()},
                        {"Cookie": "wfrun_ui_token=wrong"}):
            done = httpx.post(f"{ui.base}/api/workflows/quick/start",
                              json={"input": {"n": 1}}, headers=headers)
            assert done.status_code == 401, (headers, done.text)
            assert "nothing was changed" in done.json()["error"]
        # A token in the query string of a POST is not accepted either (it would be
        # logged, and a form could carry it).
        done = httpx.post(f"{ui.base}/api/workflows/quick/start?token={token_of(ui)}",
                          json={"input": {"n": 1}})
        assert done.status_code == 401
        assert runs(ui)["rows"] == []
    assert not (project.root / ".wfrun" / "state" / "store.sqlite3").exists()
    assert project.wfrun("audit").stderr.strip() == "no actions recorded"


def test_start_with_the_bearer_token_queues_a_run_a_host_runs_and_audits_it(
        project: Project) -> None:
    project.workflow("quick", QUICK)
    with ui_server(project) as ui:
        done = httpx.post(f"{ui.base}/api/workflows/quick/start",
                          json={"input": {"n": 7, "note": "hello"}}, headers=bearer(ui))
        assert done.status_code == 202, done.text
        run_id = done.json()["run_id"]
        assert done.json() == {"action": "start", "workflow": "quick", "run_id": run_id,
                               "status": "queued"}
        assert [r["run_id"] for r in runs(ui)["rows"]] == [run_id]
        bad = httpx.post(f"{ui.base}/api/workflows/quick/start",
                         json={"input": {"n": "seven"}}, headers=bearer(ui))
        assert bad.status_code == 400
        assert "\n" not in bad.json()["error"]
        assert "n" in bad.json()["error"]
        unknown = httpx.post(f"{ui.base}/api/workflows/nope/start", json={},
                             headers=bearer(ui))
        assert unknown.status_code == 404
        notjson = httpx.post(f"{ui.base}/api/workflows/quick/start", content=b"{oops",
                             headers=bearer(ui))
        assert notjson.status_code == 400
        assert "JSON object" in notjson.json()["error"]
        assert len(runs(ui)["rows"]) == 1  # the refused starts queued nothing
    host = project.wfrun("host", "--once", "--no-controllers", timeout=60)
    assert host.returncode == 0, host.stderr
    assert project.json("status", run_id, "--json")["status"] == "completed"
    rows = audit(project)
    assert [(r["action"], r["outcome"], r["workflow"]) for r in rows[::-1]] == [
        ("start", "ok", "quick"), ("start", "failed", "quick"), ("start", "failed", "nope")]
    first = rows[-1]
    assert first["run_id"] == run_id
    assert first["origin"] == "127.0.0.1"
    assert re.fullmatch(r"token:[0-9a-f]{12} \(.+\)", first["actor"])
    assert first["detail"] == {"input": True}
    assert "hello" not in json.dumps(rows)
    assert "seven" not in json.dumps(rows)
    text = project.wfrun("audit").stdout
    assert f"start    ok      {run_id}" in text
    assert "from 127.0.0.1" in text


def test_a_cookie_post_needs_the_csrf_value_of_its_page_and_its_own_origin(
        project: Project) -> None:
    project.workflow("quick", QUICK)
    with ui_server(project) as ui, httpx.Client(follow_redirects=True) as client:
        page = client.get(ui.url)  # the printed URL: the token becomes a cookie
        assert page.status_code == 200
        assert page.url.params.get("token") is None
        found = re.search(r'<meta name="wfrun-csrf" content="([0-9a-f]{64})">', page.text)
        assert found is not None, "a page opened with the cookie carries the CSRF value"
        csrf = found[1]
        assert 'name="wfrun-csrf"' not in httpx.get(f"{ui.base}/runs").text  # no cookie
        url = f"{ui.base}/api/workflows/quick/start"
        body = {"input": {"n": 1}}
        for headers in ({}, {"X-Wfrun-Csrf": "0" * 64},
                        {"X-Wfrun-Csrf": csrf, "Origin": "http://evil.example"}):
            done = client.post(url, json=body, headers=headers)
            assert done.status_code == 403, (headers, done.text)
            assert "nothing was changed" in done.json()["error"]
        assert runs(ui)["rows"] == []
        own = ui.base  # http://127.0.0.1:PORT
        done = client.post(url, json=body, headers={"X-Wfrun-Csrf": csrf, "Origin": own})
        assert done.status_code == 202, done.text
        assert len(runs(ui)["rows"]) == 1
    assert [r["action"] for r in audit(project)] == ["start"]


def test_cancel_and_answer_through_the_api(project: Project) -> None:
    project.workflow("quick", QUICK)
    project.workflow("approve", APPROVE)
    assert project.wfrun("run", "approve").returncode == 4  # waiting at its checkpoint
    (waiting,) = project.run_ids()
    with ui_server(project) as ui:
        queued = httpx.post(f"{ui.base}/api/workflows/quick/start",
                            json={"input": {"n": 1}}, headers=bearer(ui)).json()["run_id"]
        no = httpx.post(f"{ui.base}/api/runs/{queued}/cancel")
        assert no.status_code == 401
        assert project.json("status", queued, "--json")["status"] == "queued"
        done = httpx.post(f"{ui.base}/api/runs/{queued}/cancel", headers=bearer(ui))
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "cancelled"
        again = httpx.post(f"{ui.base}/api/runs/{queued}/cancel", headers=bearer(ui))
        assert again.status_code in (404, 409), again.text
        assert httpx.get(f"{ui.base}/api/runs/{queued}").json()["status"] == "cancelled"

        missing = httpx.post(f"{ui.base}/api/runs/{waiting}/answer", json={},
                             headers=bearer(ui))
        assert missing.status_code == 400
        assert "answer" in missing.json()["error"]
        answered = httpx.post(f"{ui.base}/api/runs/{waiting}/answer",
                              json={"answer": "ship"}, headers=bearer(ui))
        assert answered.status_code == 202, answered.text
        child = answered.json()["run_id"]
        assert answered.json()["continues"] == waiting
        twice = httpx.post(f"{ui.base}/api/runs/{waiting}/answer", json={"answer": "x"},
                           headers=bearer(ui))
        assert twice.status_code == 400
        assert "already" in twice.json()["error"]
    host = project.wfrun("host", "--once", "--no-controllers", timeout=60)
    assert host.returncode == 0, host.stderr
    shown = project.json("show", child, "--json")
    assert shown["status"] == "completed"
    assert shown["outputs"]["after"] == {"answer": "ship"}
    rows = audit(project)
    assert [(r["action"], r["outcome"], r["run_id"]) for r in rows[::-1]] == [
        ("start", "ok", queued), ("cancel", "ok", queued), ("cancel", "failed", queued),
        ("answer", "ok", waiting), ("answer", "failed", waiting)]  # a malformed body: none
    assert rows[1]["detail"] == {"new_run_id": child}
    assert "ship" not in json.dumps(rows)  # answers are not recorded
    assert [r["action"] for r in project.json("audit", "--json", "--run", queued)
            ["actions"]] == ["cancel", "cancel", "start"]


def test_the_token_file_is_private_and_kept_across_restarts(project: Project) -> None:
    with ui_server(project) as first:
        token = token_of(first)
    path = project.root / ".wfrun" / "state" / "ui-token"
    assert path.read_text().strip() == token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with ui_server(project) as second:
        assert token_of(second) == token
    given = "given-token-value-123"
    with ui_server(project, "--token", given) as third:
        assert token_of(third) == given
        assert httpx.get(f"{third.base}/api/runs").status_code == 401  # reads locked too
    assert path.read_text().strip() == token  # a given token is not written


def test_the_audit_api_lists_actions_newest_first_paged(project: Project) -> None:
    project.workflow("quick", QUICK)
    with ui_server(project) as ui:
        for n in range(3):
            assert httpx.post(f"{ui.base}/api/workflows/quick/start",
                              json={"input": {"n": n}}, headers=bearer(ui)).status_code == 202
        first = httpx.get(f"{ui.base}/api/audit", params={"limit": "2"}).json()
        assert len(first["rows"]) == 2
        assert first["next_before"] is not None
        rest = httpx.get(f"{ui.base}/api/audit",
                         params={"limit": "2", "before": str(first["next_before"])}).json()
        assert len(rest["rows"]) == 1
        assert rest["next_before"] is None
        assert httpx.get(f"{ui.base}/api/audit", params={"limit": "x"}).status_code == 400


@pytest.fixture(scope="module")
def searchable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[UiServer,
                                                                          dict[str, str]]]:
    """Three finished runs and a server, shared by the three search tests (one xdist
    group, so one worker builds them once): a search only reads, and the six CLI
    processes and the server were most of each test's CPU."""
    project = Project(tmp_path_factory.mktemp("search") / "proj")
    project.workflow("quick", QUICK)
    for n, note in ((11, "alpha"), (22, "Bravo-Delta"), (33, "charlie")):
        assert project.wfrun("run", "quick", "--input",
                             json.dumps({"n": n, "note": note})).returncode == 0
    ids = {project.json("show", r, "--json")["title"]: r for r in project.run_ids()}
    with ui_server(project) as ui:
        yield ui, ids


@pytest.mark.xdist_group("ui-api-search")
@pytest.mark.parametrize("field", ["title", "input", "id"])
def test_runs_are_found_by_id_title_or_input_text(
        searchable: tuple[UiServer, dict[str, str]], field: str) -> None:
    ui, ids = searchable
    needle = {"title": "quick 22", "input": "bravo-delta", "id": ids["quick 22"][-10:]}
    found = runs(ui, q=needle[field])
    assert [r["run_id"] for r in found["rows"]] == [ids["quick 22"]]
    assert found["total"] == 1
    assert found["searched"] == 3
    assert runs(ui, q="nothing-like-it")["rows"] == []


def test_runs_filter_by_creation_date(project: Project) -> None:
    project.workflow("quick", QUICK)
    assert project.wfrun("run", "quick", "-i", "n=1").returncode == 0
    with ui_server(project) as ui:
        assert len(runs(ui, since="2000-01-01")["rows"]) == 1
        assert runs(ui, until="2000-01-01")["rows"] == []
        assert runs(ui, since="2999-01-01")["counts"]["completed"] == 0
        today = runs(ui)["rows"][0]["created_at"]
        from datetime import UTC, datetime

        day = datetime.fromtimestamp(today / 1000, UTC).strftime("%Y-%m-%d")
        assert len(runs(ui, since=day, until=day)["rows"]) == 1  # until: the whole day
        bad = httpx.get(f"{ui.base}/api/runs", params={"since": "yesterday"})
        assert bad.status_code == 400
        assert "since must be a date such as 2026-01-31" in bad.json()["error"]


def test_other_methods_are_still_refused(project: Project) -> None:
    with ui_server(project) as ui:
        for method in ("PUT", "DELETE", "PATCH"):
            done = httpx.request(method, f"{ui.base}/api/runs/x/cancel", headers=bearer(ui))
            assert done.status_code == 405, method
        assert httpx.post(f"{ui.base}/runs", headers=bearer(ui)).status_code == 405


def test_a_workflow_read_carries_its_input_schema(project: Project) -> None:
    project.workflow("quick", QUICK)
    with ui_server(project) as ui:
        view = httpx.get(f"{ui.base}/api/workflows/quick").json()
        assert view["input_schema"]["required"] == ["n"]
        assert view["input_schema"]["properties"]["n"] == {"type": "integer"}


FLAKY = """\
name: flaky
start: one
nodes:
  one:
    action: {shell: [sh, -c, "echo once >> count.txt; echo one"]}
  two:
    action: {shell: [sh, -c, "test -f fixed && echo two"]}
  three:
    action: {shell: [sh, -c, "echo three >> three.txt; echo three"]}
edges:
  - {from: one, to: two}
  - {from: two, to: three}
"""


def test_rerun_through_the_api_reuses_what_ran_before_the_failed_node(
        project: Project) -> None:
    project.workflow("flaky", FLAKY)
    assert project.wfrun("run", "flaky").returncode == 1  # two fails: no `fixed` yet
    (failed,) = project.run_ids()
    (project.root / "fixed").write_text("")
    with ui_server(project) as ui:
        assert httpx.post(f"{ui.base}/api/runs/{failed}/rerun", json={}).status_code == 401
        for body, message in (({"from": 3}, "from must be a node id"),
                              ({"force": "yes"}, "force must be true or false"),
                              ({"when": 1}, "unknown rerun field(s) when")):
            bad = httpx.post(f"{ui.base}/api/runs/{failed}/rerun", json=body,
                             headers=bearer(ui))
            assert bad.status_code == 400, bad.text
            assert message in bad.json()["error"]
        unknown_node = httpx.post(f"{ui.base}/api/runs/{failed}/rerun",
                                  json={"from": "nope"}, headers=bearer(ui))
        assert unknown_node.status_code == 400, unknown_node.text
        done = httpx.post(f"{ui.base}/api/runs/{failed}/rerun", json={}, headers=bearer(ui))
        assert done.status_code == 202, done.text
        rerun = done.json()["run_id"]
        assert done.json()["rerun_of"] == failed
    host = project.wfrun("host", "--once", "--no-controllers", timeout=60)
    assert host.returncode == 0, host.stderr
    shown = project.json("show", rerun, "--json")
    assert shown["status"] == "completed"
    assert (project.root / "count.txt").read_text() == "once\n"  # one reused, not re-run
    assert (project.root / "three.txt").read_text() == "three\n"
    rows = audit(project)
    assert [(r["action"], r["outcome"]) for r in rows[:2]] == [("rerun", "ok"),
                                                              ("rerun", "failed")]
    assert rows[0]["run_id"] == failed
    assert rows[0]["detail"]["new_run_id"] == rerun


def test_pause_and_unpause_through_the_api(project: Project) -> None:
    project.workflow("quick", QUICK)
    with ui_server(project) as ui:
        run_id = httpx.post(f"{ui.base}/api/workflows/quick/start", json={"input": {"n": 1}},
                            headers=bearer(ui)).json()["run_id"]
        assert httpx.post(f"{ui.base}/api/runs/{run_id}/pause").status_code == 401
        paused = httpx.post(f"{ui.base}/api/runs/{run_id}/pause", headers=bearer(ui))
        assert paused.status_code == 200, paused.text
        assert paused.json()["state"] == "pausing"  # it stops at its first boundary
        unpaused = httpx.post(f"{ui.base}/api/runs/{run_id}/unpause", headers=bearer(ui))
        assert unpaused.status_code == 200, unpaused.text
        assert unpaused.json()["state"] == "unpaused"
        again = httpx.post(f"{ui.base}/api/runs/{run_id}/unpause", headers=bearer(ui))
        assert again.status_code == 400, again.text  # not paused
        missing = httpx.post(f"{ui.base}/api/runs/nope/pause", headers=bearer(ui))
        assert missing.status_code == 404
    assert [(r["action"], r["outcome"]) for r in audit(project)[:4]] == [
        ("pause", "failed"), ("unpause", "failed"), ("unpause", "ok"), ("pause", "ok")]


def test_an_oversized_body_is_refused_before_it_is_read_whole(project: Project) -> None:
    project.workflow("quick", QUICK)
    with ui_server(project) as ui:
        big = b'{"input": {"n": 1, "note": "' + b"x" * (1 << 20) + b'"}}'
        done = httpx.post(f"{ui.base}/api/workflows/quick/start", content=big,
                          headers=bearer(ui))
        assert done.status_code == 400
        assert "the limit is 1048576" in done.json()["error"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
            yield b'{"input": {"n": 1, "note": "'
            for _ in range(20):
                yield b"y" * 65536
            yield b'"}}'

        streamed = httpx.post(f"{ui.base}/api/workflows/quick/start", content=chunks(),
                              headers=bearer(ui))
        assert streamed.status_code == 400
        assert "over 1048576 bytes" in streamed.json()["error"]
        assert runs(ui)["rows"] == []


def test_a_run_shows_where_its_channel_notifications_stand(project: Project) -> None:
    project.workflow("told", """\
name: told
start: tell
nodes:
  tell: {notify: {message: "hi", channels: [ops]}}
""")
    (project.root / ".wfrun" / "config.yaml").write_text(
        "notify: {channels: {ops: {type: slack, url_env: OPS_SLACK_URL}}}\n")
    assert project.wfrun("run", "told").returncode == 0
    (run_id,) = project.run_ids()
    with ui_server(project) as ui:
        view = httpx.get(f"{ui.base}/api/runs/{run_id}").json()
        assert view["deliveries"] == [{
            "notification_id": f"{run_id}:tell:1", "channel": "ops", "node": "tell",
            "status": "pending", "attempts": 0, "last_error": None, "delivered_at": None}]
        page = httpx.get(f"{ui.base}/runs/{run_id}").text
        assert '<tr data-channel="ops" data-status="pending">' in page
        queued = httpx.post(f"{ui.base}/api/workflows/told/start", json={},
                            headers=bearer(ui)).json()["run_id"]  # no bundle yet
        assert httpx.get(f"{ui.base}/api/runs/{queued}").json()["deliveries"] == []
        assert httpx.get(f"{ui.base}/runs/{queued}").status_code == 200
