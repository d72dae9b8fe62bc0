"""`call:` with `with:` parameters and steps registered by installed packages
(entry-point group `wfrun.steps`), in a real `wfrun` process that finds a plugin
the way any installed package is found: its .dist-info on the path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

WFRUN = str(Path(sys.executable).with_name("wfrun"))

PLUGIN = '''
def greet(ctx):
    return {"text": f"hello {ctx.params['who']}", "times": ctx.params.get("times", 1)}

greet.with_schema = {
    "type": "object", "additionalProperties": False, "required": ["who"],
    "properties": {"who": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
}
'''


def _plugin(root: Path) -> dict[str, str]:
    site = root / "site"
    (site / "myplug-1.0.dist-info").mkdir(parents=True)
    (site / "myplug.py").write_text(PLUGIN)
    (site / "brokenplug.py").write_text("raise ImportError('a dependency is missing')\n")
    (site / "myplug-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: myplug\nVersion: 1.0\n")
    (site / "myplug-1.0.dist-info" / "entry_points.txt").write_text(
        "[wfrun.steps]\ngreet = myplug:greet\nbroken = brokenplug:step\n")
    return {**os.environ, "PYTHONPATH": str(site), "NO_COLOR": "1"}


def _wfrun(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WFRUN, *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_a_plugin_step_runs_with_its_rendered_parameters(tmp_path: Path) -> None:
    env = _plugin(tmp_path)
    (tmp_path / "wf.yaml").write_text(textwrap.dedent("""
        start: hi
        nodes:
          hi:
            action: {call: greet, with: {who: "{{ input.name }}", times: "{{ 1 + 1 }}"}}
    """))
    done = _wfrun(tmp_path, env, "run", "./wf.yaml", "-i", "name=Ada", "--json", "-q")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_output"] == {"text": "hello Ada", "times": 2}


def test_plugin_mistakes_are_positioned_with_did_you_mean(tmp_path: Path) -> None:
    env = _plugin(tmp_path)
    (tmp_path / "wf.yaml").write_text(textwrap.dedent("""\
        start: a
        nodes:
          a:
            action: {call: greet, with: {whom: x, times: 0}}
          b:
            action: {call: broken, with: {x: 1}}
          c:
            action: {call: gret}
        edges:
          - {from: a, to: b}
          - {from: b, to: c}
    """))
    done = _wfrun(tmp_path, env, "validate", "./wf.yaml", "--format", "json")
    assert done.returncode != 0
    (report,) = json.loads(done.stdout)["files"]
    found = {(d["code"], d["line"], d["column"]): d for d in report["diagnostics"]}
    assert set(found) == {("missing-key", 4, 27), ("unknown-key", 4, 34),
                          ("out-of-range", 4, 50), ("step-unloadable", 6, 20),
                          ("unknown-step", 8, 20)}
    assert found[("unknown-key", 4, 34)]["hint"] == "did you mean 'who'?"
    bound = found[("out-of-range", 4, 50)]["message"]
    assert "with.times of step 'greet' must be at least 1" in bound
    assert "brokenplug:step" in found[("step-unloadable", 6, 20)]["message"]
    assert "a dependency is missing" in found[("step-unloadable", 6, 20)]["message"]
    assert found[("unknown-step", 8, 20)]["hint"] == "did you mean 'greet'?"
