"""`wfrun ui` in headless Chromium (issue 14): real runs made with the real CLI, a real
`wfrun ui` subprocess, the page driven by Playwright. Every wait is on a DOM
condition (Playwright's auto-waiting); screenshots are saved as artifacts and the
page is checked by its elements, never by pixels."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from uikit import REPO, Project, ui_server, wait_for_node
from waiting import wait_until

from runner.store import SqliteStore

# Chromium start-up and several CLI runs: generous under a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

HOLD = """\
name: hold
title: "hold {{ input.tag }}"
start: prepare
nodes:
  prepare:
    compute: "{{ {'ready': true} }}"
  hold:
    action:
      shell: "while [ ! -f release ]; do sleep 0.1; done; echo released"
      use_shell: true
  after:
    compute: "{{ {'done': outputs.hold.exit_code == 0} }}"
edges:
  - {from: prepare, to: hold}
  - {from: hold, to: after}
"""

BREAKS = """\
name: breaks
title: "breaks on purpose"
start: run
nodes:
  run:
    action:
      shell: "echo hello-out; echo bad-err >&2; exit 3"
      use_shell: true
  never:
    compute: "{{ {'x': 1} }}"
edges:
  - {from: run, to: never}
"""

QUICK = """\
name: quick
title: "quick {{ input.n }}"
start: one
nodes:
  one:
    compute: "{{ {'n': input.n} }}"
"""


def shot(page: Any, shots: Path, name: str) -> Path:
    path = shots / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path


def test_runs_page_counts_filters_sorts_and_pages(project: Project, page: Any,
                                                  shots: Path) -> None:
    project.workflow("quick", QUICK)
    project.workflow("breaks", BREAKS)
    for n in (1, 2, 3):
        assert project.wfrun("run", "quick", "-i", f"n={n}").returncode == 0
    assert project.wfrun("run", "breaks").returncode == 1
    with ui_server(project) as ui:
        page.goto(ui.url)
        page.wait_for_selector("#runs tbody tr")
        shot(page, shots, "runs")
        assert page.locator("#runs tbody tr").count() == 4
        assert page.locator('#counts [data-status="completed"] b').text_content() == "3"
        assert page.locator('#counts [data-status="failed"] b').text_content() == "1"
        titles = page.locator("#runs tbody td.title").all_text_contents()
        assert titles[0] == "breaks on purpose"  # newest first
        assert titles[1:] == ["quick 3", "quick 2", "quick 1"]

        page.select_option("#filter-status", "failed")  # submits the form by itself
        page.wait_for_url("**status=failed**")
        rows = page.locator("#runs tbody tr")
        assert rows.count() == 1
        assert rows.first.get_attribute("data-status") == "failed"

        page.goto(f"{ui.base}/runs?workflow=quick&order=oldest&per_page=2")
        assert page.locator("#runs tbody td.title").all_text_contents() == ["quick 1", "quick 2"]
        assert "page 1 of 2" in page.locator("#pager").text_content()
        page.click("#pager a[rel=next]")
        page.wait_for_url("**page=2**")
        assert page.locator("#runs tbody td.title").all_text_contents() == ["quick 3"]
        shot(page, shots, "runs-page-2")

        page.goto(f"{ui.base}/runs?status=nonsense")
        assert "status must be one of" in page.locator("#error-message").text_content()
    assert not page.js_errors


def test_a_running_node_turns_ok_without_a_reload(project: Project, page: Any,
                                                  shots: Path) -> None:
    project.workflow("hold", HOLD)
    runner = subprocess.Popen(project.argv("run", "hold", "-i", "tag=live"), cwd=project.root,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run_id = wait_until(lambda: (project.run_ids() or [None])[0], what="the run's bundle")
        wait_for_node(project, run_id, "hold")
        with ui_server(project) as ui:
            page.goto(f"{ui.base}/runs/{run_id}")
            page.wait_for_selector('#graph g.node[data-node="hold"][data-state="running"]')
            page.wait_for_selector('#graph g.node[data-node="prepare"][data-state="ok"]')
            assert page.get_attribute('#graph g.node[data-node="after"]',
                                      "data-state") == "pending"
            page.wait_for_selector('#run-status[data-status="running"]')
            shot(page, shots, "run-running")
            page.evaluate("window.__sameDocument = 'yes'")  # gone if the page reloads

            (project.root / "release").write_text("go")
            page.wait_for_selector('#graph g.node[data-node="hold"][data-state="ok"]')
            page.wait_for_selector('#graph g.node[data-node="after"][data-state="ok"]')
            page.wait_for_selector('#run-status[data-status="completed"]')
            page.wait_for_selector('body[data-live="ended"]')
            assert page.evaluate("window.__sameDocument") == "yes"
            nodes = page.locator("#timeline tbody tr").evaluate_all(
                "rows => rows.map(r => [r.dataset.node, r.dataset.outcome])")
            assert nodes == [["prepare", "ok"], ["hold", "ok"], ["after", "ok"]]
            assert json.loads(page.text_content("#outputs-json"))["after"] == {"done": True}
            page.click('#logs details[data-node="hold"] summary')
            assert "released" in page.text_content('#logs details[data-node="hold"] pre')
            shot(page, shots, "run-completed")
        assert runner.wait(timeout=30) == 0
    finally:
        (project.root / "release").write_text("go")
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert not page.js_errors


def test_a_failed_run_shows_its_error_logs_and_skipped_nodes(project: Project, page: Any,
                                                             shots: Path) -> None:
    project.workflow("breaks", BREAKS)
    assert project.wfrun("run", "breaks").returncode == 1
    (run_id,) = project.run_ids()
    with ui_server(project) as ui:
        page.goto(f"{ui.base}/runs/{run_id}")
        page.wait_for_selector('#run-status[data-status="failed"]')
        message = page.text_content("#run-error-message")
        assert "nonzero_exit" in message
        assert "exited with 3" in message
        assert page.get_attribute('#graph g.node[data-node="run"]', "data-state") == "failed"
        assert page.get_attribute('#graph g.node[data-node="never"]', "data-state") == "skipped"
        row = page.locator('#timeline tbody tr[data-node="run"]')
        assert row.get_attribute("data-outcome") == "failed"
        assert "bad-err" in row.text_content()
        page.click('#logs details[data-node="run"] summary')
        log = page.text_content('#logs details[data-node="run"] pre')
        assert "--- stdout ---" in log
        assert "hello-out" in log
        assert "--- stderr ---" in log
        assert "bad-err" in log
        assert "exit status 3" in log
        shot(page, shots, "run-failed")
    assert not page.js_errors


def test_the_queue_says_why_a_queued_launch_is_not_running(project: Project, page: Any,
                                                           shots: Path) -> None:
    project.workflow("hold", HOLD)
    started = project.json("start", "hold", "-i", "tag=queued", "--json")
    run_id = started["run_id"]
    with ui_server(project) as ui:
        page.goto(f"{ui.base}/queue")
        launch = page.locator(f'#queue-queued article[data-run-id="{run_id}"]')
        launch.wait_for()
        assert "queued as a detached launch" in launch.locator(".why").text_content()
        assert page.locator("#queue-running article").count() == 0
        shot(page, shots, "queue")
        launch.locator("a").first.click()
        page.wait_for_url(f"**/runs/{run_id}")
        assert "queued as a detached launch" in page.text_content("#why")
        page.wait_for_selector('#run-status[data-status="queued"]')
    assert not page.js_errors


def test_a_controller_resource_shows_its_conditions(project: Project, page: Any,
                                                    shots: Path) -> None:
    fixture = REPO / "fixtures" / "controllers" / "project"
    shutil.copytree(fixture / "controllers", project.root / ".wfrun" / "controllers")
    spec = project.root / "probe.json"
    spec.write_text(json.dumps({"value": "v1"}))
    assert project.wfrun("controller", "apply", "probe", "p1", str(spec)).returncode == 0
    done = project.wfrun("controller", "run", "--once")
    assert done.returncode == 0, done.stderr
    # Two effects as a provider call leaves them: one applied, one whose outcome is unknown.
    store = SqliteStore(project.root / ".wfrun" / "state" / "store.sqlite3")
    resource = store.resources.get("probe", "p1")
    assert resource is not None
    for key, state in (("comment", "applied"), ("merge", "indeterminate")):
        store.effects.reserve(resource.uid, key, generation=1, kind=key,
                              request_fingerprint=f"fp-{key}")
        store.effects.complete(resource.uid, key, state=state,  # type: ignore[arg-type]
                               error="timed out reading the reply" if key == "merge" else None)
    store.close()
    with ui_server(project) as ui:
        page.goto(f"{ui.base}/controllers")
        page.click('section[data-controller="probe"] tr[data-key="p1"] a')
        page.wait_for_url("**/controllers/probe/p1")
        ready = page.locator('#conditions tr[data-type="Ready"]')
        assert ready.get_attribute("data-status") == "True"
        assert page.text_content("#generation") == "1"
        assert page.text_content("#observed-generation") == "1"
        assert "redacted" not in page.text_content("#metadata")
        assert json.loads(page.text_content("#spec")) == {"value": "v1"}
        assert page.locator("#events tbody tr").count() >= 1
        assert page.text_content("#indeterminate-count") == "1 indeterminate"
        flagged = page.locator("#effects tr.indeterminate")
        assert flagged.count() == 1
        assert "timed out reading the reply" in flagged.text_content()
        assert page.locator('#effects tr[data-state="applied"]').count() == 1
        shot(page, shots, "resource")
    assert not page.js_errors


def test_workflows_page_lists_sources_and_draws_each_graph(project: Project, page: Any,
                                                           shots: Path) -> None:
    project.workflow("breaks", BREAKS)
    project.workflow("broken", "name: broken\nstart: nowhere\nnodes: {}\n")
    project.workflow("shell-check", QUICK.replace("name: quick", "name: shell-check"))
    with ui_server(project) as ui:
        page.goto(f"{ui.base}/workflows")
        page.wait_for_selector("#workflows")
        shot(page, shots, "workflows")
        assert page.get_attribute('tr[data-name="broken"]', "data-valid") == "no"
        assert "broken" in page.text_content('tr[data-name="broken"] details pre')
        shadowed = page.locator('tr.shadowed[data-name="shell-check"]')
        assert shadowed.get_attribute("data-source") == "builtin"
        assert "shadowed by project" in shadowed.text_content()
        page.click('tr[data-name="breaks"] a')
        page.wait_for_url("**/workflows/breaks")
        ids = page.locator("#graph g.node").evaluate_all("gs => gs.map(g => g.dataset.node)")
        assert sorted(ids) == ["never", "run"]
        assert page.locator("#graph path.edge").count() == 1
    assert not page.js_errors


ASK = """\
name: ask
start: ask
nodes:
  ask: {checkpoint: {summary: "Ship it?"}}
"""


def test_the_page_names_a_run_as_the_cli_does_parked_and_waiting(
        project: Project, page: Any, shots: Path) -> None:
    """Issue 34: a parked run is `parked` on its page (live too: its bundle still says
    running), and a waiting run is counted as waiting, never as done."""
    import signal

    project.workflow("hold", HOLD)
    project.workflow("ask", ASK)
    assert project.wfrun("run", "ask").returncode == 4  # waiting at its checkpoint
    runner = subprocess.Popen(project.argv("run", "hold", "-i", "tag=parked"),
                              cwd=project.root, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    resumed = None
    try:
        run_id = wait_until(lambda: next((r for r in project.run_ids()
                                          if r.startswith("hold-")), None), what="the bundle")
        wait_for_node(project, run_id, "hold")
        runner.send_signal(signal.SIGINT)  # Ctrl-C parks it
        assert runner.wait(timeout=60) == 130
        assert project.json("status", run_id, "--json")["status"] == "parked"
        with ui_server(project) as ui:
            page.goto(f"{ui.base}/runs")
            page.wait_for_selector("#runs tbody tr")
            chips = {s: page.locator(f'#counts [data-status="{s}"] b').text_content()
                     for s in ("parked", "waiting", "completed", "running")}
            assert chips == {"parked": "1", "waiting": "1", "completed": "0", "running": "0"}
            assert page.locator('#counts [data-status="done"]').count() == 0
            assert page.get_attribute(f'#runs tr[data-run-id="{run_id}"]',
                                      "data-status") == "parked"

            page.goto(f"{ui.base}/runs/{run_id}")
            page.wait_for_selector('body[data-live="open"]')
            page.wait_for_selector("body[data-seq]")  # the live view has been drawn
            assert page.text_content("#run-status") == "parked"
            shot(page, shots, "run-parked")
            # Resumed elsewhere: the page follows the launch without a reload.
            resumed = subprocess.Popen(project.argv("resume", run_id), cwd=project.root,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            page.wait_for_selector('#run-status[data-status="running"]')
            (project.root / "release").write_text("go")
            page.wait_for_selector('#run-status[data-status="completed"]')
            assert resumed.wait(timeout=60) == 0
    finally:
        (project.root / "release").write_text("go")
        for proc in (runner, resumed):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert not page.js_errors
