"""The web console in headless Chromium against a real `wfrun ui`, runs made by the
real CLI and `wfrun host`: start from the form built from the input JSON Schema,
cancel, pause and unpause, answer a checkpoint and rerun from a node (each after a
confirmation), the
rendered input and outputs, the Gantt timeline, graph nodes that open their logs,
the live run list, and an XSS corpus through inputs, the schema and outputs."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from test_ui_api import APPROVE, FLAKY, bearer
from test_ui_xss import PAYLOADS, assert_inert
from uikit import Project, UiServer, ui_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

FORM = """\
name: form
title: "form {{ input.n }}"
input:
  type: object
  required: [n, note]
  properties:
    n: {type: integer, description: "how many"}
    note: {type: string}
    color: {enum: [red, green], default: green}
    loud: {type: boolean}
    extra: {type: object}
start: one
nodes:
  one:
    compute: "{{ input }}"
  two:
    action: {shell: [sh, -c, "echo logged-by-two"]}
edges:
  - {from: one, to: two}
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


def with_cookie(page: Any, ui: UiServer) -> None:
    """Open the printed URL: the token becomes the console's cookie."""
    page.goto(ui.url)
    page.wait_for_selector('meta[name="wfrun-csrf"]', state="attached")


def confirm(page: Any) -> None:
    page.wait_for_selector("#confirm[open]")
    page.click("#confirm-yes")


def run_host(project: Project) -> None:
    done = project.wfrun("host", "--once", "--no-controllers", timeout=90)
    assert done.returncode == 0, done.stderr


def test_start_from_the_form_then_see_input_outputs_gantt_and_logs(
        project: Project, page: Any) -> None:
    project.workflow("form", FORM)
    with ui_server(project) as ui:
        with_cookie(page, ui)
        page.goto(f"{ui.base}/workflows/form")
        page.wait_for_selector("#start:not([hidden])")
        assert page.text_content('[data-field="n"] .hint') == "how many"
        assert page.input_value('[data-field="color"] select') == '"green"'
        page.click("#start-submit")  # n and note are required
        assert page.text_content("#start-error") == "n is required"
        page.fill('[data-field="n"] input', "42")
        page.fill('[data-field="note"] input', "hello there")
        page.check('[data-field="loud"] input')
        page.fill('[data-field="extra"] textarea', "{oops")
        page.click("#start-submit")
        assert page.text_content("#start-error").startswith("extra must be JSON")
        page.fill('[data-field="extra"] textarea', '{"k": [1, 2]}')
        page.click("#start-submit")
        page.wait_for_selector("#confirm[open]")
        page.click("#confirm-no")  # declined: nothing is started
        assert httpx.get(f"{ui.base}/api/runs").json()["rows"] == []
        page.click("#start-submit")
        confirm(page)
        page.wait_for_url(re.compile(r"/runs/form-"))
        run_id = page.url.rsplit("/", 1)[1]
        run_host(project)
        page.goto(f"{ui.base}/runs/{run_id}")
        page.wait_for_selector('#run-status[data-status="completed"]')
        assert page.text_content('#input tr[data-key="n"] td') == "42"
        assert page.text_content('#input tr[data-key="note"] td') == "hello there"
        assert page.text_content('#input tr[data-key="loud"] td') == "true"
        assert page.text_content('#input tr[data-key="color"] td') == "green"
        assert page.locator('#input tr[data-key="extra"] ol li').all_text_contents() == \
            ["1", "2"]
        card = '#outputs .output-card[data-node="one"]'
        page.wait_for_selector(card)
        assert page.text_content(f'{card} tr[data-key="note"] td') == "hello there"
        assert json.loads(page.text_content("#outputs-json"))["one"]["n"] == 42
        rows = page.locator("#gantt .gantt-row").evaluate_all(
            "rows => rows.map(r => [r.dataset.node, r.dataset.outcome,"
            " r.querySelector('.gantt-bar').style.width !== ''])")
        assert rows == [["one", "ok", True], ["two", "ok", True]]
        assert page.locator('#logs details[data-node="two"]').get_attribute("open") is None
        page.click('#graph g.node[data-node="two"]')
        page.wait_for_selector('#logs details[data-node="two"][open]')
        assert "logged-by-two" in page.text_content('#logs details[data-node="two"] pre')
        assert page.js_errors == []
    rows = project.json("audit", "--json")["actions"]
    assert [(r["action"], r["outcome"], r["run_id"]) for r in rows] == [("start", "ok", run_id)]


def test_cancel_with_confirmation_and_the_live_run_list(project: Project, page: Any) -> None:
    project.workflow("hold", HOLD)
    with ui_server(project) as ui:
        with_cookie(page, ui)
        page.goto(f"{ui.base}/runs")
        page.wait_for_selector("#no-runs")
        run_id = httpx.post(f"{ui.base}/api/workflows/hold/start", json={},
                            headers=bearer(ui)).json()["run_id"]
        # The list picks the new run up without a reload.
        page.wait_for_selector(f'#runs tr[data-run-id="{run_id}"][data-status="queued"]')
        page.goto(f"{ui.base}/runs/{run_id}")
        page.wait_for_selector("#action-cancel:not([disabled])")
        assert page.is_disabled("#action-unpause")
        page.click("#action-cancel")
        page.wait_for_selector("#confirm[open]")
        page.click("#confirm-no")
        assert project.json("status", run_id, "--json")["status"] == "queued"
        page.click("#action-cancel")
        confirm(page)
        page.wait_for_selector('#action-result[data-outcome="ok"]')
        assert page.text_content("#action-result") == "cancel: cancelled"
        assert project.json("status", run_id, "--json")["status"] == "cancelled"
        page.goto(f"{ui.base}/runs/{run_id}")
        page.wait_for_selector('#run-status[data-status="cancelled"]')
        assert page.is_disabled("#action-cancel")


def test_answer_a_checkpoint_from_the_run_page(project: Project, page: Any) -> None:
    project.workflow("approve", APPROVE)
    assert project.wfrun("run", "approve").returncode == 4
    (waiting,) = project.run_ids()
    with ui_server(project) as ui:
        with_cookie(page, ui)
        page.goto(f"{ui.base}/runs/{waiting}")
        page.wait_for_selector("#answer-box:not([hidden])")
        page.fill("#answer-text", '{"ok": true}')
        page.click("#action-answer")
        confirm(page)
        page.wait_for_selector("#action-result a.new-run")
        child = page.text_content("#action-result a.new-run")
        run_host(project)
        page.click("#action-result a.new-run")
        page.wait_for_selector('#run-status[data-status="completed"]')
        assert page.url.endswith(f"/runs/{child}")
        card = '#outputs .output-card[data-node="after"]'
        page.wait_for_selector(card)
        assert page.text_content(f'{card} tr[data-key="answer"] tr[data-key="ok"] td') == "true"


def test_rerun_from_a_node_from_the_run_page(project: Project, page: Any) -> None:
    project.workflow("flaky", FLAKY)
    assert project.wfrun("run", "flaky").returncode == 1
    (failed,) = project.run_ids()
    (project.root / "fixed").write_text("")
    with ui_server(project) as ui:
        with_cookie(page, ui)
        page.goto(f"{ui.base}/runs/{failed}")
        page.wait_for_selector("#action-rerun:not([disabled])")
        assert page.locator("#rerun-from option").all_text_contents() == [
            "the failed node", "one", "two", "three"]
        page.select_option("#rerun-from", "one")  # one runs again too
        page.click("#action-rerun")
        confirm(page)
        page.wait_for_selector("#action-result a.new-run")
        rerun = page.text_content("#action-result a.new-run")
        run_host(project)
        page.goto(f"{ui.base}/runs/{rerun}")
        page.wait_for_selector('#run-status[data-status="completed"]')
        assert page.locator("#rerun-of-link").text_content() == failed
    assert (project.root / "count.txt").read_text() == "once\nonce\n"  # from one: again
    rows = project.json("audit", "--json")["actions"]
    assert rows[0]["action"] == "rerun"
    assert rows[0]["detail"]["from"] == "one"


def test_without_the_cookie_the_console_is_read_only(project: Project, page: Any) -> None:
    project.workflow("flaky", FLAKY)
    assert project.wfrun("run", "flaky").returncode == 1
    (failed,) = project.run_ids()
    with ui_server(project) as ui:
        page.goto(f"{ui.base}/runs/{failed}")
        page.wait_for_selector("#actions-off")
        assert page.locator("#actions button").count() == 0
        page.goto(f"{ui.base}/workflows/flaky")
        page.wait_for_selector("#start-off")


XSS_FORM = f"""\
name: xssform
title: "{{{{ input.t }}}}"
input:
  type: object
  required: [t]
  properties:
    t: {{type: string, description: {json.dumps(PAYLOADS[1])}}}
    pick: {{enum: {json.dumps(list(PAYLOADS[2:4]))}}}
    {json.dumps(PAYLOADS[4])}: {{type: string}}
start: out
nodes:
  out:
    compute: "{{{{ {{'v': input.t, 'pick': input.pick, 'keys': input | list}} }}}}"
"""


def test_an_xss_corpus_through_the_form_inputs_and_outputs_executes_nothing(
        project: Project, page: Any) -> None:
    project.workflow("xssform", XSS_FORM)
    with ui_server(project) as ui:
        with_cookie(page, ui)
        page.goto(f"{ui.base}/workflows/xssform")
        page.wait_for_selector("#start:not([hidden])")
        assert_inert(page, expect_text=PAYLOADS[1])  # the description, as text
        page.fill('[data-field="t"] input', PAYLOADS[0])
        page.select_option('[data-field="pick"] select', json.dumps(PAYLOADS[3]))
        page.locator(".field input").nth(1).fill(PAYLOADS[4])
        page.click("#start-submit")
        confirm(page)
        page.wait_for_url(re.compile(r"/runs/xssform-"))
        run_id = page.url.rsplit("/", 1)[1]
        assert_inert(page, expect_text=None)
        run_host(project)
        page.goto(f"{ui.base}/runs/{run_id}")
        page.wait_for_selector('#run-status[data-status="completed"]')
        card = '#outputs .output-card[data-node="out"]'
        page.wait_for_selector(card)
        assert page.text_content(f'{card} tr[data-key="v"] td') == PAYLOADS[0]
        assert page.text_content(f'{card} tr[data-key="pick"] td') == PAYLOADS[3]
        assert page.text_content('#input tr[data-key="t"] td') == PAYLOADS[0]
        assert sorted(page.locator("#input tr").evaluate_all(
            "rs => rs.map(r => r.dataset.key)")) == sorted(["t", "pick", PAYLOADS[4]])
        assert_inert(page)
        page.goto(f"{ui.base}/runs")
        page.wait_for_selector("#runs")
        assert_inert(page)
        assert page.js_errors == []


def test_pause_and_unpause_from_the_run_page(project: Project, page: Any) -> None:
    project.workflow("hold", HOLD)
    with ui_server(project) as ui:
        with_cookie(page, ui)
        run_id = httpx.post(f"{ui.base}/api/workflows/hold/start", json={},
                            headers=bearer(ui)).json()["run_id"]
        page.goto(f"{ui.base}/runs/{run_id}")
        page.wait_for_selector("#action-pause:not([disabled])")
        page.click("#action-pause")
        confirm(page)
        page.wait_for_selector('#action-result[data-outcome="ok"]')
        assert page.text_content("#action-result") == "pause: pausing"
        page.wait_for_selector("#action-unpause:not([disabled])")  # the pause can be withdrawn
        page.click("#action-unpause")
        confirm(page)
        # The button shows `unpause…` while the request is in flight; wait for the answer.
        page.wait_for_selector("#action-result:has-text('unpause:')")
        assert page.text_content("#action-result") == "unpause: unpaused"
    actions = [r["action"] for r in project.json("audit", "--json")["actions"]]
    assert actions == ["unpause", "pause", "start"]
