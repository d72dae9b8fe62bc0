"""`wfrun run/resume/answer/runs/show` end to end, in subprocesses against a temp project."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from waiting import DEADLINE, wait_until

RUN_VIEW_KEYS = {
    "schema", "run_id", "workflow", "title", "status", "paused", "parent_run_id", "continued_by",
    "rerun_of", "rerun", "rerun_by", "definition_digest", "started_at", "finished_at",
    "current_node", "steps", "waiting_on",
    "timeline", "outputs", "final_output", "error", "updates", "trace_events", "trace_torn",
    "failure", "input", "launch",
}
RUN_ROW_KEYS = {"run_id", "workflow", "status", "started_at", "finished_at", "duration_s",
                "current_node", "parent_run_id", "title", "continued_by", "created_at"}


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / ".wfrun" / "workflows").mkdir(parents=True)

    def workflow(self, name: str, text: str) -> None:
        (self.root / ".wfrun" / "workflows" / f"{name}.yaml").write_text(textwrap.dedent(text))

    def file(self, name: str, text: str) -> Path:
        path = self.root / name
        path.write_text(textwrap.dedent(text))
        return path

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "runner", "--project", str(self.root), *args]

    def wfrun(self, *args: str, timeout: float = 20,
              columns: int = 80) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), capture_output=True, text=True,
                              timeout=timeout, cwd=self.root,
                              env={**os.environ, "COLUMNS": str(columns)})

    def json(self, *args: str) -> Any:
        done = self.wfrun(*args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    @property
    def runs_dir(self) -> Path:
        return self.root / ".wfrun" / "runs"

    def run_ids(self) -> list[str]:
        if not self.runs_dir.exists():
            return []
        return sorted(p.name for p in self.runs_dir.iterdir() if not p.name.startswith("."))


@pytest.fixture
def project(tmp_path: Path) -> Project:
    p = Project(tmp_path / "proj")
    p.workflow("greet", """
        title: "greet {{ input.name }}"
        input:
          type: object
          required: [name]
          properties: {name: {type: string}, times: {type: integer}}
        start: hello
        nodes:
          hello: {compute: "{{ {'greeting': 'hi ' ~ input.name, 'times': input.get('times')} }}"}
    """)
    p.workflow("broken", """
        start: boom
        nodes:
          boom: {action: {shell: [sh, -c, 'echo nope >&2; exit 5']}}
    """)
    p.workflow("approve", """
        start: ask
        nodes:
          ask: {checkpoint: {summary: "Ship {{ input.what }}?"}}
          after: {compute: "{{ {'answer': outputs.ask.answer, 'what': input.what} }}"}
        edges:
          - {from: ask, to: after}
    """)
    return p


def _no_traceback(text: str) -> None:
    assert "Traceback" not in text


def test_run_completes_with_exit_0_and_takes_input_both_ways(project: Project) -> None:
    done = project.wfrun("run", "greet", "--input", '{"name": "ada"}', "-i", "times=3",
                         "--json", "-q")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "completed"
    assert out["parked"] is False
    assert out["final_output"] == {"greeting": "hi ada", "times": 3}  # -i values parse as JSON
    assert out["run_id"].startswith("greet-")
    plain = project.wfrun("run", "greet", "-i", "name=bob", "-q")
    assert plain.returncode == 0
    assert json.loads(plain.stdout) == {"greeting": "hi bob", "times": None}
    assert plain.stderr == ""  # -q: a completed run prints only its data


def test_failed_run_exits_1(project: Project) -> None:
    done = project.wfrun("run", "broken", "-q")
    assert done.returncode == 1
    assert "failed" in done.stderr
    assert "exited with 5" in done.stderr
    _no_traceback(done.stderr)


@pytest.mark.parametrize(("args", "needle"), [
    (("--input", "{not json"), "--input is not valid JSON"),
    (("-i", "novalue"), "-i takes key=value"),
    (("-i", "times=many"), "input does not match workflow 'greet'"),  # not an integer
    (("--input", "[1, 2]", "-i", "name=x"), "needs --input to be a JSON object"),
])
def test_bad_input_is_one_line_exit_2_and_no_bundle(project: Project, args: tuple[str, ...],
                                                    needle: str) -> None:
    done = project.wfrun("run", "greet", *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("wfrun: error: ")
    assert needle in lines[0]
    _no_traceback(done.stderr)
    assert project.run_ids() == []


def test_unknown_workflow_and_run_exit_3(project: Project) -> None:
    done = project.wfrun("run", "nosuch")
    assert done.returncode == 3
    assert "nosuch" in done.stderr
    shown = project.wfrun("show", "greet-20240101T000000Z-00000000", "--json")
    assert shown.returncode == 3
    _no_traceback(done.stderr + shown.stderr)


def test_waiting_run_exits_4_and_answer_continues_it(project: Project) -> None:
    done = project.wfrun("run", "approve", "-i", "what=v2", "--json", "-q")
    assert done.returncode == 4, done.stderr
    parent = json.loads(done.stdout)
    assert parent["status"] == "waiting"
    assert f"wfrun answer {parent['run_id']}" in done.stderr
    answered = project.wfrun("answer", parent["run_id"], '{"ok": true}', "--json", "-q")
    assert answered.returncode == 0, answered.stderr
    child = json.loads(answered.stdout)
    assert child["status"] == "completed"
    assert child["final_output"] == {"answer": {"ok": True}, "what": "v2"}
    again = project.wfrun("answer", parent["run_id"], "no")
    assert again.returncode == 2
    assert "already answered" in again.stderr
    view = project.json("show", child["run_id"], "--json")
    assert view["parent_run_id"] == parent["run_id"]


def test_runs_and_show_json_have_stable_keys(project: Project) -> None:
    project.wfrun("run", "greet", "-i", "name=a", "-q")
    project.wfrun("run", "broken", "-q")
    project.wfrun("run", "approve", "-i", "what=x", "-q")
    listing = project.json("runs", "--json")
    rows = listing["runs"]
    assert set(listing) == {"runs"}
    assert len(rows) == 3
    for row in rows:
        assert set(row) == RUN_ROW_KEYS
    by_wf = {r["workflow"]: r for r in rows}
    assert by_wf["greet"]["status"] == "completed"
    assert by_wf["greet"]["title"] == "greet a"
    assert by_wf["broken"]["status"] == "failed"
    assert by_wf["approve"]["status"] == "waiting"
    assert [r["started_at"] for r in rows] == sorted((r["started_at"] for r in rows),
                                                     reverse=True)
    only = project.json("runs", "--status", "failed", "--json")["runs"]
    assert [r["workflow"] for r in only] == ["broken"]

    view = project.json("show", by_wf["broken"]["run_id"], "--json")
    assert set(view) == RUN_VIEW_KEYS
    assert view["schema"] == "wfrun.run-view.v1"
    assert view["status"] == "failed"
    assert view["error"]["code"] == "nonzero_exit"
    assert [t["node"] for t in view["timeline"]] == ["boom"]
    assert view["timeline"][0]["outcome"] == "failed"
    assert view["trace_torn"] is False
    assert view["trace_events"] >= 3

    human = project.wfrun("runs", columns=200)  # an 80-column table truncates run ids
    assert human.returncode == 0
    assert by_wf["greet"]["run_id"] in human.stdout
    shown = project.wfrun("show", by_wf["greet"]["run_id"])
    assert shown.returncode == 0
    assert "completed" in shown.stdout


def _wait_for(path: Path, timeout: float = DEADLINE) -> None:
    wait_until(path.exists, timeout=timeout, interval=0.02, what=f"{path} to appear")


def test_ctrl_c_during_a_shell_node_parks_and_resume_completes(project: Project) -> None:
    project.workflow("hold", """
        start: hold
        nodes:
          hold:
            action:
              shell:
                - sh
                - -c
                - 'if [ -f done ]; then echo resumed; exit 0; fi; touch started done; sleep 30'
          after: {compute: "{{ outputs.hold.stdout | trim }}"}
        edges:
          - {from: hold, to: after}
    """)
    proc = subprocess.Popen(project.argv("run", "hold", "-q"), cwd=project.root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(project.root / "started")
        proc.send_signal(signal.SIGINT)
        _stdout, stderr = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    _no_traceback(stderr)
    (run_id,) = project.run_ids()
    assert f"wfrun resume {run_id}" in stderr
    assert project.json("show", run_id, "--json")["status"] == "parked"
    resumed = project.wfrun("resume", run_id, "--json", "-q")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["final_output"] == "resumed"


HOLDING_AGENT = """
    import sys
    import time
    from pathlib import Path

    import runner.host.runtime._local as local


    class Holding:
        # An agent that never answers: the step stays open until it must stop.
        name = "holding"

        def run_turn(self, step, message, kind):
            Path("step-open").write_text(step.contract.attempt)
            while not step.should_stop():
                time.sleep(0.02)


    real = local.make_executor
    local.make_executor = (lambda spec, clock=None, settings=None: Holding() if spec == "hold"
                           else real(spec, clock, settings))
    from runner.cli.app import main

    sys.argv[0] = "wfrun"
    main()
"""


def test_ctrl_c_during_an_agent_step_parks_and_resume_completes(project: Project) -> None:
    project.workflow("ask", """
        start: think
        nodes:
          think:
            agent:
              prompt: "Think about {{ input.topic }}."
              output: {type: object, required: [idea], properties: {idea: {type: string}}}
            timeout: 1m
          after: {compute: "{{ 'idea: ' ~ outputs.think.idea }}"}
        edges:
          - {from: think, to: after}
    """)
    wrapper = project.file("holding_cli.py", HOLDING_AGENT)
    argv = [sys.executable, str(wrapper), "--project", str(project.root), "run", "ask",
            "-i", "topic=tea", "--agent", "hold", "-q"]
    proc = subprocess.Popen(argv, cwd=project.root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    try:
        _wait_for(project.root / "step-open")
        proc.send_signal(signal.SIGINT)
        _stdout, stderr = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    _no_traceback(stderr)
    (run_id,) = project.run_ids()
    view = project.json("show", run_id, "--json")
    assert view["status"] == "parked"
    assert view["current_node"] == "think"
    first_attempt = (project.root / "step-open").read_text()
    assert [t["attempt"] for t in view["timeline"]] == [first_attempt]

    script = project.file("answers.yaml", "think: {idea: green}\n")
    resumed = project.wfrun("resume", run_id, "--agent", f"scripted:{script}", "--json", "-q")
    assert resumed.returncode == 0, resumed.stderr
    out = json.loads(resumed.stdout)
    assert out["status"] == "completed"
    assert out["final_output"] == "idea: green"
    trace = [json.loads(line) for line in
             (project.runs_dir / run_id / "trace.jsonl").read_text().splitlines()]
    kinds = [e["payload"]["kind"] for e in trace if e["type"] == "agent_prompt_sent"]
    assert kinds == ["step", "resume"]  # the resumed step re-sends its prompt
    started = [e["node"] for e in trace if e["type"] == "node_started"]
    assert started == ["think", "think", "after"]


def test_a_run_without_a_launch_row_is_not_resumed_around_the_queue(project: Project) -> None:
    assert project.wfrun("run", "greet", "-i", "name=a", "-q").returncode == 0
    (run_id,) = project.run_ids()
    assert project.wfrun("store", "reset", "--yes").returncode == 0  # the rows are gone
    before = (project.runs_dir / run_id / "trace.jsonl").read_bytes()
    refused = project.wfrun("resume", run_id)
    assert refused.returncode == 2, refused.stderr
    _no_traceback(refused.stderr)
    assert refused.stderr.strip().splitlines() == [
        f"wfrun: error: run {run_id} has no launch row (made before every run had one, or "
        f"its store was reset), so it cannot be resumed; its bundle is kept (`wfrun show "
        f"{run_id}`): start the workflow again with `wfrun run`"]
    assert (project.runs_dir / run_id / "trace.jsonl").read_bytes() == before  # untouched
    assert project.json("show", run_id, "--json")["status"] == "completed"
    missing = project.wfrun("resume", "greet-20260101T000000Z-00000000")
    assert missing.returncode == 3
    assert "no run 'greet-20260101T000000Z-00000000'" in missing.stderr


def _in_a_terminal(project: Project, *args: str) -> tuple[int, str]:
    """`wfrun ARGS` with stdout and stderr on a pseudo-terminal; its exit and output."""
    import pty

    main, side = pty.openpty()
    proc = subprocess.Popen(project.argv(*args), cwd=project.root, stdin=subprocess.DEVNULL,
                            stdout=side, stderr=side, env={**os.environ, "COLUMNS": "200"})
    os.close(side)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the process closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    return proc.wait(timeout=60), b"".join(chunks).decode(errors="replace")


def test_run_in_a_terminal_prints_the_final_notification_once(project: Project) -> None:
    project.workflow("tell", """
        start: work
        nodes:
          work: {compute: "{{ {'n': 1} }}"}
          done: {notify: {kind: final, message: "all-done-{{ outputs.work.n }}"}}
        edges:
          - {from: work, to: done}
    """)
    code, shown = _in_a_terminal(project, "run", "tell")
    assert code == 0, shown
    assert shown.count("all-done-1") == 1, shown
    # Off a terminal stdout is data: the final output is printed in full.
    piped = project.wfrun("run", "tell")
    assert json.loads(piped.stdout)["message"] == "all-done-1"
