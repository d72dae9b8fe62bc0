"""An XSS corpus in run titles, outputs, switch cases, node ids, error messages and
resource specs: on every page it shows up as text and nothing executes (issue 14).

Each payload would set `window.__xss`; the checks are structural and do not lean on
the Content-Security-Policy alone: no injected element or event-handler attribute
exists in the DOM, and the payload's characters are in the page's text."""

from __future__ import annotations

import json
import re
import shutil
from typing import Any

import pytest
from uikit import REPO, Project, ui_server

# Chromium start-up and several CLI runs: generous under a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

PAYLOADS = (
    "<script>window.__xss=1</script>",
    '<img src=x onerror="window.__xss=2">',
    '"><svg onload="window.__xss=3">',
    "</pre></code><script>window.__xss=4</script>",
    "'--></title><iframe src=javascript:window.__xss=5>",
)
PAYLOAD = " ".join(PAYLOADS)
CASE = '<img src=x onerror="window.__xss=6">'

XSS = f"""\
name: xss
title: "{{{{ input.t }}}}"
description: {json.dumps(PAYLOADS[0])}
start: out
nodes:
  out:
    compute: "{{{{ {{'v': input.t}} }}}}"
  boom:
    action:
      shell: 'printf "%s" "$P" >&2; exit 1'
      use_shell: true
      env: {{P: "{{{{ input.t }}}}"}}
edges:
  - from: out
    switch:
      on: $.v
      cases: {{{json.dumps(CASE)}: boom}}
      default: boom
"""

# An invalid file whose node id is a payload: it reaches the page in a diagnostic.
EVIL = f"""\
name: evil
start: {json.dumps(PAYLOADS[1])}
nodes:
  {json.dumps(PAYLOADS[1])}:
    compute: "{{{{ 1 }}}}"
"""


def assert_inert(page: Any, *, expect_text: str | None = PAYLOADS[0]) -> None:
    assert page.evaluate("window.__xss") is None
    injected = page.evaluate("""() => ({
        handlers: document.querySelectorAll('[onerror],[onload]').length,
        images: document.querySelectorAll('img').length,
        frames: document.querySelectorAll('iframe').length,
        scripts: [...document.scripts].filter(s => !s.src.endsWith('/static/ui.js')
                                                  && !s.src.endsWith('/static/console.js')).length,
    })""")
    assert injected == {"handlers": 0, "images": 0, "frames": 0, "scripts": 0}
    if expect_text is not None:
        assert expect_text in page.inner_text("main")


def test_nothing_from_the_corpus_executes_on_any_page(project: Project, page: Any) -> None:
    project.workflow("xss", XSS)
    project.workflow("evil", EVIL)
    shutil.copytree(REPO / "fixtures" / "controllers" / "project" / "controllers",
                    project.root / ".wfrun" / "controllers")
    spec = project.root / "spec.json"
    spec.write_text(json.dumps({"value": {"html": PAYLOAD, PAYLOADS[2]: [PAYLOADS[3]]}}))
    assert project.wfrun("controller", "apply", "probe", "p1", str(spec)).returncode == 0
    value = json.dumps({"t": PAYLOAD})
    failed = project.wfrun("run", "xss", "--input", value)
    assert failed.returncode == 1, failed.stderr
    (run_id,) = project.run_ids()
    queued = project.json("start", "xss", "--input", value, "--json")["run_id"]

    with ui_server(project) as ui:
        page.goto(f"{ui.base}/runs")
        page.wait_for_selector(f'#runs tr[data-run-id="{run_id}"]')
        assert_inert(page)
        assert page.locator(f'#runs tr[data-run-id="{run_id}"] td.title').text_content() \
            == PAYLOAD

        page.goto(f"{ui.base}/runs/{run_id}")
        page.wait_for_selector('#run-status[data-status="failed"]')  # the live view drew
        assert_inert(page)
        assert page.text_content("#run-title") == PAYLOAD
        # The status and the outputs are drawn by separate steps of the live view. A
        # locator wait, not `wait_for_function`: that one polls by evaluating its string
        # in the page, which the page's CSP (no 'unsafe-eval') refuses whenever the
        # outputs are not drawn yet at its first look.
        page.locator("#outputs-json", has_text=re.compile(r"\S")).wait_for(state="attached")
        assert json.loads(page.text_content("#outputs-json"))["out"] == {"v": PAYLOAD}
        assert page.text_content('#outputs .output-card[data-node="out"] tr[data-key="v"] td') \
            == PAYLOAD  # rendered as a table of text
        assert PAYLOADS[1] in page.text_content("#run-error-message")
        assert CASE in page.text_content("#graph .edge-label") or \
            page.locator("#graph .edge-label").count() == 2
        assert CASE[:20] in " ".join(page.locator("#graph .edge-label").all_text_contents())
        page.click('#logs details[data-node="boom"] summary')
        assert PAYLOADS[4] in page.text_content('#logs details[data-node="boom"] pre')
        assert_inert(page)

        page.goto(f"{ui.base}/queue")
        page.wait_for_selector(f'#queue-queued article[data-run-id="{queued}"]')
        assert_inert(page, expect_text=None)

        page.goto(f"{ui.base}/runs/{queued}")
        page.wait_for_selector("#why")
        assert_inert(page, expect_text=None)

        page.goto(f"{ui.base}/workflows")
        page.wait_for_selector('tr[data-name="evil"]')
        page.click('tr[data-name="evil"] details summary')
        assert_inert(page, expect_text=PAYLOADS[1])

        page.goto(f"{ui.base}/workflows/xss")
        page.wait_for_selector("#graph")
        assert_inert(page)  # the description

        page.goto(f"{ui.base}/controllers/probe/p1")
        page.wait_for_selector("#spec")
        assert_inert(page, expect_text=PAYLOADS[3])
        assert json.loads(page.text_content("#spec"))["value"]["html"] == PAYLOAD
    assert not page.js_errors


def test_secret_values_are_masked_on_the_page(project: Project, page: Any) -> None:
    """A value of the UI process's secret-named variables never reaches the page, even
    where the run that recorded it did not know it was a secret."""
    project.workflow("xss", XSS)
    secret = "hunter2-swordfish-0042"
    failed = project.wfrun("run", "xss", "--input", json.dumps({"t": f"token {secret}"}))
    assert failed.returncode == 1
    (run_id,) = project.run_ids()
    assert secret in (project.runs_dir / run_id / "trace.jsonl").read_text()
    with ui_server(project, env={"DEPLOY_API_TOKEN": secret}) as ui:
        page.goto(f"{ui.base}/runs/{run_id}")
        page.wait_for_selector('#run-status[data-status="failed"]')
        page.click('#logs details[data-node="boom"] summary')
        html = page.content()
        assert secret not in html
        assert "token ***" in page.text_content("#run-title")
        assert json.loads(page.text_content("#outputs-json"))["out"] == {"v": "token ***"}
        page.goto(f"{ui.base}/runs")
        page.wait_for_selector("#runs")
        assert secret not in page.content()
