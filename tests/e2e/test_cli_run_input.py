"""Issue 34 item 8: a run's input is shown (`wfrun show`, `show --json`, the run page,
`/api/runs/RUN`) with secrets masked: writeOnly fields, values of declared secrets,
values under secret-named keys and credential-shaped strings are `***`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
from waiting import wait_for_line

TOKEN = "tok-9f8e7d6c5b4a"
PASSWORD = "hunter2-correct-horse"
NESTED = "nested-value-31337"
WORKFLOW = """\
secrets: [DEPLOY_TOKEN]
input:
  type: object
  properties:
    target: {type: string}
    password: {type: string, writeOnly: true}
    note: {type: string}
    config: {type: object}
start: go
nodes:
  go: {compute: "{{ {'target': input.target} }}"}
"""
SHOWN = {"target": "prod", "password": "***", "note": "deploy with ***",
         "config": {"api_key": "***", "region": "eu"}}


def _wfrun(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", "--project", str(root), *args],
                          capture_output=True, text=True, timeout=60, cwd=root,
                          env={**os.environ, "DEPLOY_TOKEN": TOKEN})


def test_the_input_is_shown_masked_in_show_the_api_and_the_run_page(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "deploy.yaml").write_text(textwrap.dedent(WORKFLOW))
    given = {"target": "prod", "password": PASSWORD, "note": f"deploy with {TOKEN}",
             "config": {"api_key": NESTED, "region": "eu"}}
    ran = _wfrun(root, "run", "deploy", "--input", json.dumps(given), "--json", "-q")
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"]

    view = json.loads(_wfrun(root, "show", run_id, "--json").stdout)
    assert view["input"] == SHOWN
    text = _wfrun(root, "show", run_id).stdout
    (line,) = [x for x in text.splitlines() if x.startswith("  input ")]
    assert json.loads(line.removeprefix("  input ")) == SHOWN
    for secret in (TOKEN, PASSWORD, NESTED):
        assert secret not in text

    proc = subprocess.Popen([sys.executable, "-m", "runner", "--project", str(root), "ui"],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        found = re.search(r"(http://\S+)", wait_for_line(proc.stdout, r"^wfrun ui: http://"))
        assert found is not None
        base = found[1].split("?", 1)[0].rstrip("/")  # reads need no console token
        api = httpx.get(f"{base}/api/runs/{run_id}")
        assert api.json()["input"] == SHOWN
        page = httpx.get(f"{base}/runs/{run_id}").text
        shown = re.search(r'<pre id="input-json" class="json">(.*?)</pre>', page, re.S)
        assert shown is not None
        assert json.loads(shown[1].replace("&#34;", '"')) == SHOWN
        for secret in (TOKEN, PASSWORD, NESTED):
            assert secret not in api.text
            assert secret not in page
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=10)
