"""`wfrun integrate pi [--path]`, and the real Pi loading what it installed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from fakes.openai_server import Answer, Messages, Reply
from fakes.pi_model import last
from pi_rpc import EXTENSION, VENV_BIN
from pi_world import World

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
WFRUN = str(VENV_BIN / "wfrun")


def _wfrun(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
    return subprocess.run([WFRUN, *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=60, check=False)


def test_integrate_pi_path_prints_the_shipped_extension(tmp_path: Path) -> None:
    done = _wfrun(tmp_path, "integrate", "pi", "--path")  # no project needed
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == EXTENSION


def test_integrate_pi_installs_then_is_up_to_date(tmp_path: Path) -> None:
    (tmp_path / ".wfrun" / "workflows").mkdir(parents=True)
    done = _wfrun(tmp_path, "integrate", "pi")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == ("installed the wfrun Pi extension in "
                                           ".pi/extensions/wfrun/")
    folder = tmp_path / ".pi" / "extensions" / "wfrun"
    assert (folder / "index.ts").read_bytes() == EXTENSION.read_bytes()
    command = json.loads((folder / "wfrun.json").read_text())["command"]
    assert command == [WFRUN]  # the wfrun that installed it, whatever Pi's PATH holds
    again = _wfrun(tmp_path, "integrate", "pi")
    assert again.stdout.splitlines()[0] == ("the wfrun Pi extension in .pi/extensions/wfrun/ "
                                            "is up to date")
    assert sorted(p.name for p in folder.iterdir()) == ["index.ts", "wfrun.json"]  # no temp files


def test_integrate_pi_outside_a_project_is_one_clear_line(tmp_path: Path) -> None:
    done = _wfrun(tmp_path, "integrate", "pi")
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("wfrun: error: no .wfrun/ folder")
    assert not (tmp_path / ".pi").exists()


def test_pi_loads_the_installed_extension_from_a_trusted_project(world: World) -> None:
    assert _wfrun(world.project, "integrate", "pi").returncode == 0

    def rule(messages: Messages) -> Reply | None:
        if last(messages).get("role") == "user":
            return Answer(calls=[("workflow", {"action": "list"})])
        return Answer(text="Listed.")

    world.model.rules.append(rule)
    # Not on PATH: Pi finds wfrun through the installed wfrun.json alone.
    pi = world.pi(installed=True, env={"PATH": "/usr/bin:/bin"})
    at = pi.prompt("what workflows are there?")
    pi.wait_settled(at)
    (end,) = [r for r in pi.records[at:] if r.get("type") == "tool_execution_end"]
    assert not end["result"]["isError"], end
    assert "- review (project)" in end["result"]["content"][0]["text"]
    assert pi.close() == 0


def test_integrate_pi_checks_that_the_bridge_it_configures_starts(tmp_path: Path) -> None:
    (tmp_path / ".wfrun" / "workflows").mkdir(parents=True)
    done = _wfrun(tmp_path, "integrate", "pi")
    assert f"checked: `{WFRUN} bridge` starts and answers" in done.stdout
    # A bridge that cannot start (here a stale WFRUN_PROJECT Pi would pass on to it) is
    # one line, after the files are written.
    env = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
    bad = subprocess.run([WFRUN, "--project", str(tmp_path), "integrate", "pi"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=False,
                         env={**env, "WFRUN_PROJECT": str(tmp_path / "gone")})
    assert bad.returncode == 1, bad.stderr
    (line,) = bad.stderr.strip().splitlines()
    assert line.startswith(f"wfrun: error: the files are written, but `{WFRUN} bridge` does "
                           "not start: wfrun: error: project folder")
