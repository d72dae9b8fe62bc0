"""`wfrun run --agent openai` end to end against the fake OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.openai_server import FakeOpenAI, submit_valid
from fakes.openai_server import openai_server as openai_server

WORKFLOW = """\
start: plan
nodes:
  plan:
    agent:
      prompt: "Plan {{ input.task }}"
      output: {type: object, required: [steps], properties: {steps: {type: array}}}
"""
KEY = "sk-test-0123456789abcdef"


def _project(tmp_path: Path) -> Path:
    (tmp_path / ".wfrun" / "workflows").mkdir(parents=True)
    (tmp_path / ".wfrun" / "workflows" / "plan.yaml").write_text(WORKFLOW)
    return tmp_path


def _wfrun(project: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "runner", "--project", str(project), *args],
                          capture_output=True, text=True, timeout=60, env=full, check=False)


@pytest.mark.timeout(90)
def test_openai_agent_from_flags_with_the_key_from_the_environment(
        tmp_path: Path, openai_server: FakeOpenAI) -> None:
    project = _project(tmp_path)
    openai_server.script = submit_valid({"steps": ["a", "b"]})
    res = _wfrun(project, "--openai-base-url", openai_server.base_url, "--openai-model",
                 "tiny-model", "run", "plan", "-i", "task=ship", "--agent", "openai", "--json",
                 env={"WFRUN_OPENAI_API_KEY": KEY})
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["status"] == "completed"
    assert out["final_output"] == {"steps": ["a", "b"]}
    first = openai_server.requests[0]
    assert first.body["model"] == "tiny-model"
    assert first.headers.get("authorization") == f"Bearer {KEY}"
    # The key reaches the provider and nothing else: not the bundle, not the output.
    for path in (project / ".wfrun").rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    assert KEY not in res.stdout + res.stderr


def test_openai_agent_without_settings_is_a_one_line_usage_error(tmp_path: Path) -> None:
    project = _project(tmp_path)
    res = _wfrun(project, "run", "plan", "-i", "task=x", "--agent", "openai", env={})
    assert res.returncode == 2
    assert "WFRUN_OPENAI_BASE_URL" in res.stderr
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
