"""Controller `triggers:` (DESIGN §10, seed 004): a trigger enqueues the resource key it
renders instead of starting a run, so a GitHub-style webhook and a scheduled poll for
the same pull request converge on one reconcile queue entry and one child run."""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ctlkit import HEAD, PR_YAML, REPO_NAME, Harness, load, pr_spec
from fakes.github_server import FakeGitHub

from runner.engine.executors._scripted import ScriptedExecutor
from runner.host.runtime._webhooks import WebhookServer
from runner.launch._triggers import Scheduled, TriggerLoop

CTL = "pull-request"
SECRET = "gh-webhook-secret"
TRIGGERS = """
triggers:
  pushed:
    webhook: {path: /hooks/github, secret: GH_SECRET}
    key: "pr{{ event.body.pull_request.number }}"
  poll: {every: 60s, key: pr7, missed: last}
"""


@pytest.fixture
def triggered(project: Path) -> Iterator[Harness]:
    """The pull-request controller with the two triggers above."""
    folder = project / ".wfrun" / "controllers"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(PR_YAML.parent / "pull_request.py", folder / "pull_request.py")
    (folder / "pull-request.yaml").write_text(PR_YAML.read_text() + TRIGGERS)
    executor = ScriptedExecutor.from_file(project / "pr-repair.script.yaml")
    h = Harness(project, [load(folder / "pull-request.yaml")], executor=executor)
    yield h
    h.close()


def _deliver(client: httpx.Client, url: str, delivery: str, number: int) -> httpx.Response:
    body = json.dumps({"action": "synchronize", "pull_request": {"number": number}}).encode()
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return client.post(url, content=body, headers={
        "Content-Type": "application/json", "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": signature})


def test_a_webhook_and_a_poll_for_one_pull_request_converge_on_one_child_run(
        triggered: Harness, github: FakeGitHub) -> None:
    h = triggered
    github.add_pull(REPO_NAME, 7, HEAD, checks="failure")
    m = h.manager()
    (controller,) = h.controllers
    items = [Scheduled.of_controller(CTL, spec) for spec in controller.triggers]
    assert [i.spec.name for i in items] == ["pushed", "poll"]
    loop = TriggerLoop(h.store.triggers, h.clock, lambda *_: None, triggers=lambda: items,
                       enqueue=m.enqueue)
    server = WebhookServer("127.0.0.1:0", loop, lambda: items, {"GH_SECRET": SECRET})
    server.start()
    try:
        m.apply(CTL, "pr7", pr_spec(github.url, repair_workflow="pr-repair-compute",
                                    merge_approved=True))
        m.run_until_idle()  # the apply's own pass starts the repair child
        url = f"http://{server.address}/hooks/github"
        with httpx.Client(timeout=30) as client:
            answer = _deliver(client, url, "gh-1", 7)
            assert answer.status_code == 202, answer.text
            assert answer.json()["reason"] == f"reconcile {CTL}/pr7"
            assert answer.json()["run_id"] is None  # a key was enqueued, not a run
            loop.tick()  # the poll's first look: it starts from now
            h.clock.advance(61)
            loop.tick()  # a poll slot: the same key again
            assert _deliver(client, url, "gh-1", 7).json()["replayed"] is True
            assert _deliver(client, url, "gh-2", 7).status_code == 202
        fired = {f.reason for name in ("pushed", "poll")
                 for f in h.store.triggers.firings(f"controller:{CTL}", name)}
        assert fired == {f"reconcile {CTL}/pr7"}
        assert len(h.store.triggers.firings(f"controller:{CTL}", "poll")) == 1
        h.drain(m, lambda: not m.children.busy if m.children else True)
        requests = h.store.workflow_requests.list(h.resource(CTL, "pr7").uid)
        assert [(r.request_key, r.attempt) for r in requests] == [(f"repair:1:{HEAD}", 1)]
        assert len(h.run_ids()) == 1  # webhook, poll and apply: one child run
    finally:
        server.stop()
