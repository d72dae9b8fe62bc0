"""Issue 39 item 3: node `cache: {ttl, key}`, `--no-cache`, `wfrun cache list|clear`.

The agent step runs on the real openai executor against the fake model server: a
second run with the same prompt makes no model request; a changed prompt (another
input) misses; the TTL runs out on the injected clock (WFRUN_CLOCK_FILE); a failed
node is never kept.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakes.openai_server import FakeOpenAI, submit_valid
from fakes.openai_server import openai_server as openai_server

from runner.clock import FileClock

pytestmark = pytest.mark.timeout(180)

WORKFLOW = """\
input: {type: object, properties: {task: {type: string}}}
start: plan
nodes:
  plan:
    agent:
      prompt: "Plan {{ input.task }}"
      output: {type: object, required: [steps], properties: {steps: {type: array}}}
    cache: {ttl: 1h}
  check:
    action: {shell: [sh, -c, 'echo ran >> checks.txt; test -f ok && echo fine']}
    cache: {ttl: 1d, key: "{{ input.task }}"}
edges:
  - {from: plan, to: check}
"""
HOUR = 3600.0


class Project:
    def __init__(self, root: Path, server: FakeOpenAI) -> None:
        self.root = root
        (root / ".wfrun" / "workflows").mkdir(parents=True)
        (root / ".wfrun" / "workflows" / "plan.yaml").write_text(WORKFLOW)
        self.clock = FileClock.create(root / "clock", 1_800_000_000.0)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
        self.env.update({"WFRUN_CLOCK_FILE": str(self.clock.path),
                         "WFRUN_OPENAI_BASE_URL": server.base_url,
                         "WFRUN_OPENAI_MODEL": "tiny", "WFRUN_OPENAI_API_KEY": "sk-x"})
        self.server = server

    def wfrun(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "runner", "--project", str(self.root),
                               *args], capture_output=True, text=True, timeout=60,
                              env=self.env, cwd=self.root, check=False)

    def run(self, task: str, *extra: str, code: int = 0) -> dict[str, Any]:
        done = self.wfrun("run", "plan", "-i", f"task={task}", "--agent", "openai", "--json",
                          "-q", *extra)
        assert done.returncode == code, done.stderr
        out: dict[str, Any] = json.loads(done.stdout)
        return out

    def show(self, run_id: str) -> dict[str, Any]:
        done = self.wfrun("show", run_id, "--json")
        assert done.returncode == 0, done.stderr
        out: dict[str, Any] = json.loads(done.stdout)
        return out

    def checks(self) -> int:
        path = self.root / "checks.txt"
        return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture
def project(tmp_path: Path, openai_server: FakeOpenAI) -> Project:
    openai_server.script = submit_valid({"steps": ["a", "b"]})
    (tmp_path / "ok").touch()
    return Project(tmp_path, openai_server)


def test_a_second_run_reuses_the_agent_result_without_a_model_request(
        project: Project) -> None:
    first = project.run("ship")
    asked = len(project.server.requests)
    assert asked >= 1
    second = project.run("ship")
    assert len(project.server.requests) == asked  # the model was not asked again
    assert second["final_output"]["stdout"] == "fine\n"
    assert project.checks() == 1  # the action's result came from the cache too
    shown = project.show(second["run_id"])
    assert [(e["node"], e["cached_from"]) for e in shown["timeline"]] == [
        ("plan", first["run_id"]), ("check", first["run_id"])]
    assert shown["outputs"]["plan"] == {"steps": ["a", "b"]}
    text = project.wfrun("show", second["run_id"]).stdout
    assert f"ok (cached: {first['run_id']})" in text
    logs = project.wfrun("logs", second["run_id"])
    assert f"a cached result of run {first['run_id']}; nothing ran" in logs.stderr
    listed = json.loads(project.wfrun("cache", "list", "--json").stdout)["entries"]
    assert sorted((e["node"], e["run_id"]) for e in listed) == [
        ("check", first["run_id"]), ("plan", first["run_id"])]


def test_a_changed_prompt_or_key_misses(project: Project) -> None:
    project.run("ship")
    asked = len(project.server.requests)
    project.run("sail")  # another prompt, another key: both nodes run
    assert len(project.server.requests) > asked
    assert project.checks() == 2
    project.run("ship")  # both entries are kept side by side
    assert project.checks() == 2


def test_the_ttl_runs_out_on_the_clock_and_no_cache_runs_anew(project: Project) -> None:
    project.run("ship")
    asked = len(project.server.requests)
    project.clock.set(project.clock.now() + HOUR + 1)  # the agent's 1h is over, not 1d
    listed = json.loads(project.wfrun("cache", "list", "--json").stdout)["entries"]
    assert sorted((e["node"], e["expired"]) for e in listed) == [("check", False),
                                                                ("plan", True)]
    project.run("ship")
    assert len(project.server.requests) > asked
    assert project.checks() == 1
    asked = len(project.server.requests)
    third = project.run("ship", "--no-cache")
    assert len(project.server.requests) > asked
    assert project.checks() == 2
    # --no-cache keeps what it made: the next run reuses the third run's results.
    fourth = project.run("ship")
    assert {e["cached_from"] for e in project.show(fourth["run_id"])["timeline"]} == {
        third["run_id"]}


def test_a_failed_node_is_never_kept_and_clear_forgets(project: Project) -> None:
    (project.root / "ok").unlink()
    failed = project.run("ship", code=1)
    assert failed["error"]["node"] == "check"
    entries = json.loads(project.wfrun("cache", "list", "--json").stdout)["entries"]
    assert [e["node"] for e in entries] == ["plan"]  # the failed check is not kept
    (project.root / "ok").touch()
    project.run("ship")
    assert project.checks() == 2  # it ran again
    done = project.wfrun("cache", "clear", "--workflow", "plan", "--node", "plan", "--json")
    assert json.loads(done.stdout) == {"removed": 1}
    asked = len(project.server.requests)
    project.run("ship")
    assert len(project.server.requests) > asked
    assert project.checks() == 2
    project.clock.set(project.clock.now() + 2 * HOUR)
    done = project.wfrun("cache", "clear", "--expired", "--json")
    assert json.loads(done.stdout) == {"removed": 1}  # the plan's 1h; the check's 1d stays
    bad = project.wfrun("cache", "clear", "--node", "plan")
    assert bad.returncode == 2
    assert "--node needs --workflow" in bad.stderr
    assert json.loads(project.wfrun("cache", "clear", "--json").stdout) == {"removed": 1}
