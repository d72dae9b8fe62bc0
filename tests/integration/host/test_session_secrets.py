"""Secrets in an agent session: the model sees `***`, never a value, in any message.

The session's own process queues and activates the launch, so a writeOnly input
field works there; the step prompt, a notify report, the failure follow-up and every
tool reply wfrun writes into the session log hold masks only. The model's own tool
call (it typed the password) is the one place the value may appear.
"""

# ruff: noqa: E501  (the workflow embedded as YAML keeps its long lines)
from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import pytest
from harness import Scripted, Session, on_user, start_call, submit_steps

from runner.engine._secrets import SecretSource
from runner.launch._intents import DEFERRED_TURN_TYPE, NOTIFICATION_TYPE

pytestmark = pytest.mark.timeout(30)
TOKEN = "session-token-canary-2b7d"
PASSWORD = "session-password-canary-9e1a"
DEPLOY = """
    secrets: [DEPLOY_TOKEN]
    input:
      type: object
      properties: {task: {type: string}, password: {type: string, writeOnly: true}}
    start: plan
    nodes:
      plan:
        agent:
          prompt: "Deploy {{ input.task }} with {{ secrets.DEPLOY_TOKEN }} and {{ input.password }}."
          output: {type: object, required: [summary], properties: {summary: {type: string}}}
      tell: {notify: {kind: progress, message: "deploying with {{ secrets.DEPLOY_TOKEN }}"}}
      push:
        action:
          shell: [sh, -c, 'echo "rejected $T $P" >&2; exit 2']
          env: {T: "{{ secrets.DEPLOY_TOKEN }}", P: "{{ input.password }}"}
    edges: [{from: plan, to: tell}, {from: tell, to: push}]
"""


def test_no_model_visible_message_holds_a_secret(session: Callable[..., Session]) -> None:
    model = Scripted(on_user("deploy it", start_call("deploy", {"task": "ship",
                                                                 "password": PASSWORD})),
                     submit_steps())
    s = session(model, {"deploy": DEPLOY}, start=False)
    s.options.secret_source = SecretSource(given={"DEPLOY_TOKEN": TOKEN})
    s.host.start("startup")
    s.host.prompt("please deploy it")
    s.settle()
    s.settle()

    (record,) = s.launches()
    assert record.status == "failed"
    assert record.error_code == "run_failed"
    assert "rejected *** ***" in str(record.error_message)
    prompts = [v.last_user_text for v in model.views if "Deploy ship" in v.last_user_text]
    assert prompts
    assert all("Deploy ship with *** and ***." in p for p in prompts)
    assert [m.content for m in s.messages(NOTIFICATION_TYPE)] == ["deploying with ***"]
    assert s.messages(DEFERRED_TURN_TYPE)  # the failure follow-up was delivered
    for entry in s.host.read_session_entries():
        if getattr(entry, "role", None) == "assistant":
            continue  # the model's own words (its start call carries the password it chose)
        text = json.dumps(entry.__dict__, default=str)
        assert TOKEN not in text, text[:300]
        assert PASSWORD not in text, text[:300]
    for view in model.views:
        assert TOKEN not in view.last_user_text
    # Every file, read by another process: closing a descriptor of the store file in
    # this one would drop the locks SQLite holds on it.
    files = [str(p) for p in (s.root / ".wfrun").rglob("*") if p.is_file()]
    assert any(f.endswith("trace.jsonl") for f in files)
    for path in files:
        data = subprocess.run(["cat", path], capture_output=True, check=True,
                              timeout=30).stdout
        assert TOKEN.encode() not in data, path
        assert PASSWORD.encode() not in data, path
