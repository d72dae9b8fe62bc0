"""Issue 13 item 7: the docs' examples are valid, the YAML error for an unquoted hook
ref suggests quoting, `wfrun list` shows descriptions and inputs, a hook's exception
shows its traceback with --debug, and the agent formats are documented."""

from __future__ import annotations

import json
import re
from pathlib import Path

from everyday import Project

from runner.compiler._yamlio import load

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _yaml_blocks(text: str) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", text, flags=re.S)


def test_every_yaml_example_in_the_workflow_docs_parses() -> None:
    blocks = _yaml_blocks((DOCS / "workflows.md").read_text())
    assert any("./hooks.py:score" in b for b in blocks)
    for block in blocks:
        load(block, "docs/workflows.md")  # raises YamlProblem on an invalid example


def test_an_unquoted_hook_ref_in_a_flow_mapping_suggests_quoting(tmp_path: Path) -> None:
    project = Project(tmp_path / "proj")
    project.workflow("hooked", "start: s\nnodes:\n  s: {compute: {call: ./hooks.py:score}}\n")
    done = project.wfrun("validate", "hooked")
    assert done.returncode == 1
    assert "error[yaml-syntax]" in done.stderr
    assert "quote a value that contains ':'" in done.stderr


def test_list_shows_descriptions_and_inputs(tmp_path: Path) -> None:
    project = Project(tmp_path / "proj")
    project.workflow("deploy", """\
        description: Ships a release to one environment. Second sentence stays in --json.
        input:
          type: object
          required: [version]
          properties:
            version: {type: string, description: the tag to ship}
            env: {type: string}
        start: s
        nodes:
          s: {compute: "{{ input.version }}"}
        """)
    out = project.wfrun("list")
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("deploy"))
    assert "version, env?" in line
    assert "Ships a release to one environment." in line
    assert "Second sentence" not in line
    rows = project.json("list", "--json")["workflows"]
    deploy = next(r for r in rows if r["name"] == "deploy")
    assert deploy["inputs"] == [
        {"name": "version", "type": "string", "required": True, "description": "the tag to ship"},
        {"name": "env", "type": "string", "required": False, "description": None}]
    assert deploy["description"].endswith("stays in --json.")


def test_a_hook_exception_shows_its_traceback_with_debug(tmp_path: Path) -> None:
    project = Project(tmp_path / "proj")
    (project.root / ".wfrun" / "workflows" / "hooks.py").write_text(
        "def explode(ctx):\n    return helper()\n\n\ndef helper():\n"
        "    raise ValueError('bad value in helper')\n")
    project.workflow("hooky", 'start: s\nnodes:\n  s: {compute: {call: "./hooks.py:explode"}}\n')
    plain = project.wfrun("run", "hooky", "--json")
    assert plain.returncode == 1
    error = json.loads(plain.stdout)["error"]
    assert "ValueError" in error["message"]
    assert "Traceback" not in plain.stderr
    debug = project.wfrun("--debug", "run", "hooky")
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr
    assert "in helper" in debug.stderr
    assert "bad value in helper" in debug.stderr


def test_agent_formats_are_documented() -> None:
    text = (DOCS / "agents.md").read_text()
    for needle in ("scripted:", "command:", "WFRUN_STEP", "submit", "exit status"):
        assert needle in text
    for block in _yaml_blocks(text):
        load(block, "docs/agents.md")
