"""What `wfrun host` does NOT import when it has no use for it (issue 37): a ratchet.

A host's start-up is paid before its first item runs (a `host --once` over a 1,000-item
map spends ~0.5 s of CPU importing, beside huey's 0.25 s). Each test starts a real
`wfrun host --once` in a fresh interpreter (`python -X importtime`) over a project with
one queued run, and asserts which modules it never loaded; the run must still complete.
Behavioural, not timed: bench/bench_fanout_hosts.py measures the time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: The controller side, the HTTP client channels post with, the webhook server and the
#: trigger loop (`--once` fires no trigger), the live view (rich: a terminal's, not `-q`):
#: none is used by `host --once --no-controllers -q`. Nor, the workflow's compiled
#: definition being kept (`wfrun start` kept it, compiler/_stored.py), the YAML loader
#: and jsonschema, which only compiling needs (~60 ms of the host's start-up CPU), nor
#: the template checks' simple-tags descent, nor the parsers of `triggers:` and
#: `concurrency:` (the workflow has neither). Nor watchdog: the source watch observes
#: folders only while launches wait in the queue, and the first claim took the one run.
#: Nor the agent side of the engine: a workflow without an agent node never drives a turn.
#: Nor `socket`: the runner id's host name is uname's node name.
UNUSED = ("runner.engine._agent", "runner.controllers", "runner.host.runtime._controllers",
          "urllib.request", "http.server", "runner.host.runtime._webhooks",
          "runner.host.runtime._triggers", "rich", "jsonschema", "ruamel",
          "runner.compiler._yamlio", "runner.compiler._simple_tags", "runner.compiler._triggers",
          "runner.compiler._flow", "cronsim", "watchdog", "socket")

FLOW = """\
name: fan
start: each
nodes:
  each:
    map:
      over: "{{ range(3) | list }}"
      max_concurrency: 2
      do: {action: {shell: [printf, ok]}}
"""


def _wfrun(project: Path, *args: str, importtime: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
    env["WFRUN_HOME"] = str(project.parent / "home")
    extra = ["-X", "importtime"] if importtime else []
    out = subprocess.run([sys.executable, *extra, "-m", "runner", "--project", str(project),
                          *args], cwd=project, env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def _loaded(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def _of(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if any(m == n or m.startswith(n + ".") for n in names))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "fan.yaml").write_text(FLOW)
    _wfrun(root, "start", "fan")
    return root


def test_a_once_host_without_controllers_runs_a_map_without_the_unused_sides(
        project: Path) -> None:
    host = _wfrun(project, "host", "--once", "--no-controllers", "-q", importtime=True)
    assert _of(_loaded(host.stderr), UNUSED) == []
    runs = json.loads(_wfrun(project, "runs", "--json").stdout)
    runs = runs if isinstance(runs, list) else runs["runs"]
    assert [r["status"] for r in runs] == ["completed"]


#: Loading and compiling the built-in pull-request controller needs none of these: its
#: hook imports httpx (and the rich and pygments httpx's own CLI module loads) when a
#: pass runs, and its spec schema is checked without jsonschema (issue 34 item 11).
NOT_FOR_LOADING = ("httpx", "rich", "pygments", "jsonschema", "referencing")


def test_a_host_with_controllers_still_loads_them(project: Path) -> None:
    """The other side of the ratchet: the lazy import is taken when controllers run."""
    host = _wfrun(project, "host", "--once", "-q", importtime=True)
    loaded = _loaded(host.stderr)
    assert "runner.controllers" in loaded
    assert _of(loaded, NOT_FOR_LOADING) == []
