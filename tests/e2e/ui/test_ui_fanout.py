"""Issue 37: the run page's graph draws a parallel node's branches and a map's body,
with the items' progress (done, running, failed of N) live: real runs of the real
CLI, a real `wfrun ui`, headless Chromium. Items wait on files the test writes, so
every wait is on a state the run reached, never on the clock."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from uikit import Project, ui_server, wait_for_node
from waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

FANOUT = """\
name: fan
start: reviews
nodes:
  reviews:
    parallel:
      fail_fast: false
      branches:
        style: {action: {shell: [echo, s]}}
        slow: {action: {shell: [sh, -c, "while [ ! -f release ]; do sleep 0.1; done"]}}
        broken: {action: {shell: [sh, -c, "exit 3"]}}
  files:
    map:
      over: "{{ [0, 1, 2, 3] }}"
      max_concurrency: 4
      do:
        action:
          shell: [sh, -c, "if [ {{ item }} = 3 ]; then while [ ! -f release2 ]; do sleep 0.1;
                  done; fi; test {{ item }} != 2"]
edges:
  - {from: reviews, switch: {on: $result.outcome, cases: {ok: files}, default: files}}
"""


def _items_text(page: Any, node: str) -> str:
    return str(page.text_content(f'#graph g.fanout[data-node="{node}"] .items-text'))


def _branch(node: str, name: str, state: str) -> str:
    return f'#graph g.fanout[data-node="{node}"] g.body[data-branch="{name}"][data-state="{state}"]'


def test_branches_and_items_progress_are_drawn_and_follow_the_run(
        project: Project, page: Any) -> None:
    project.workflow("fan", FANOUT)
    runner = subprocess.Popen(project.argv("run", "fan"), cwd=project.root,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run_id = wait_until(lambda: (project.run_ids() or [None])[0], what="the run's bundle")
        wait_for_node(project, run_id, "reviews")
        with ui_server(project) as ui:
            page.goto(f"{ui.base}/runs/{run_id}")
            # Branch rows in written order are named by it (the snapshot sorts them).
            for name, state in (("style", "ok"), ("broken", "failed"), ("slow", "running")):
                page.wait_for_selector(_branch("reviews", name, state))
            page.wait_for_function(
                "() => document.querySelector('#graph g.fanout[data-node=\"reviews\"] "
                ".items-text').textContent === '1 ok · 1 failed · 1 running of 3'")
            body = page.text_content('#graph g.fanout[data-node="files"] g.body')
            assert body is not None
            assert "each item" in body
            (project.root / "release").write_text("go")
            page.wait_for_selector(_branch("reviews", "slow", "ok"))
            assert _items_text(page, "reviews") == "2 ok · 1 failed · 0 running of 3"
            # The map: items 0 and 1 end ok, 2 fails, 3 waits for release2 (its row in
            # the store says running; the trace says nothing until the node ends).
            wait_for_node(project, run_id, "files")
            page.wait_for_function(
                "() => document.querySelector('#graph g.fanout[data-node=\"files\"] "
                ".items-text').textContent === '2 ok · 1 failed · 1 running of 4'")
            running = page.get_attribute(
                '#graph g.fanout[data-node="files"] rect[data-part="running"]', "width")
            assert running is not None
            assert int(running) > 0
            (project.root / "release2").write_text("go")
            page.wait_for_selector('body[data-live="ended"]')
            assert _items_text(page, "files") == "3 ok · 1 failed · 0 running of 4"
            assert page.get_attribute('#graph g.node[data-node="files"]',
                                      "data-state") == "failed"
        assert runner.wait(timeout=30) == 1
        assert not page.js_errors
    finally:
        for name in ("release", "release2"):
            (project.root / name).write_text("go")
        if runner.poll() is None:
            runner.kill()
            runner.wait()
