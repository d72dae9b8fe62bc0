"""A NUL byte in a valid input string that reaches argv, env or cwd: a clean node failure.

JSON input can carry `\\u0000`; no program can receive it (the kernel's strings end
at NUL), so Popen refuses it. wfrun must say which part of the command holds it and
fail the node, through `wfrun run` and through `wfrun host`, never crash a run
thread or print a traceback.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from everyday import Project, temp_project
from waiting import wait_until

WORKFLOWS = {
    "nul_argv": """\
        input: {type: object, properties: {arg: {type: string}}}
        start: echo
        nodes:
          echo: {action: {shell: [printf, "%s", "{{ input.arg }}"]}}
        """,
    "nul_env": """\
        input: {type: object, properties: {arg: {type: string}}}
        start: echo
        nodes:
          echo: {action: {shell: [sh, -c, 'printf %s "$V"'], env: {V: "{{ input.arg }}"}}}
        """,
    "nul_cwd": """\
        input: {type: object, properties: {arg: {type: string}}}
        start: echo
        nodes:
          echo: {action: {shell: [pwd], cwd: "{{ input.arg }}"}}
        """,
    "nul_routed": """\
        input: {type: object, properties: {arg: {type: string}}}
        start: echo
        nodes:
          echo: {action: {shell: [printf, "%s", "{{ input.arg }}"]}}
          handled: {compute: "{{ results.echo.error.code }}"}
        edges:
          - {from: echo, switch: {on: $result.outcome, cases: {failed: handled}}}
        """,
    "ok": """\
        start: one
        nodes:
          one: {action: {shell: [echo, fine]}}
        """,
}
NUL_INPUT = json.dumps({"arg": "a\u0000b"})
EXPECTED = {
    "nul_argv": "argument 2 of the command contains a NUL byte",
    "nul_env": "environment variable V contains a NUL byte",
    "nul_cwd": "the working directory contains a NUL byte",
}


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    with temp_project(tmp_path / "proj", WORKFLOWS) as proj:
        yield proj


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_nul_in_argv_env_or_cwd_fails_the_node_with_a_clear_message(
        project: Project, name: str) -> None:
    done = project.wfrun("run", name, "--input", NUL_INPUT, "--json")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "failed"
    assert outcome["error"]["code"] == "nul_byte"
    assert outcome["error"]["node"] == "echo"
    assert EXPECTED[name] in outcome["error"]["message"]
    assert EXPECTED[name] in done.stderr
    # The run ended properly: its bundle and its launch agree.
    view = project.json("status", outcome["run_id"], "--json")
    assert view["launch"]["status"] == "failed"
    assert project.json("show", outcome["run_id"], "--json")["status"] == "failed"


def test_a_nul_failure_can_be_routed_like_any_node_failure(project: Project) -> None:
    done = project.wfrun("run", "nul_routed", "--input", NUL_INPUT, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_output"] == "nul_byte"


@pytest.mark.timeout(120)
def test_wfrun_host_fails_the_node_and_keeps_running_launches(project: Project) -> None:
    host = project.host("-q", stderr=subprocess.PIPE)
    ids = {name: project.json("start", name, "--input", NUL_INPUT, "--json")["run_id"]
           for name in EXPECTED}
    ok = project.json("start", "ok", "--json")["run_id"]

    def status(run_id: str) -> str:
        return str(project.json("status", run_id, "--json")["status"])

    for name, run_id in ids.items():
        wait_until(lambda r=run_id: status(r) in ("failed", "done", "completed"),  # type: ignore[misc]
                   what=f"{name} to end under the host")
        view = project.json("show", run_id, "--json")
        assert view["status"] == "failed"
        assert view["error"]["code"] == "nul_byte"
        assert EXPECTED[name] in view["error"]["message"]
    wait_until(lambda: project.json("show", ok, "--json")["status"] == "completed"
               if (project.root / ".wfrun" / "runs" / ok).exists() else False,
               what="the next launch to complete under the same host")
    assert host.poll() is None  # the host is still up
    host.terminate()
    _, err = host.communicate(timeout=30)
    assert "Traceback" not in err
