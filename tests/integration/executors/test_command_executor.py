"""CommandExecutor with real child processes: answers, refusals, and group kills."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
from executor_cases import TASK, MakeStep
from waiting import wait_until

from runner.engine._agent import reminder_text
from runner.engine.executors import CommandExecutor

GOOD = {"verdict": "pass", "score": 7}
# A fake agent CLI reads the prompt on stdin and finds the contract like a model would.
PRELUDE = textwrap.dedent("""
    import json, os, re, sys
    prompt = sys.stdin.read()
    m = re.search(r"Workflow step contract \\(workflow: ([^,]+), step: ([^,]+), "
                  r"attempt: ([^)]+)\\)", prompt)
    step, attempt = m.group(2), m.group(3)
    def call(action, **kw):
        return json.dumps(dict(action=action, step=step, attempt=attempt, **kw))
""")


def agent(body: str) -> list[str]:
    return [sys.executable, "-c", PRELUDE + textwrap.dedent(body)]


def test_json_tool_call_on_stdout_is_accepted(make_step: MakeStep) -> None:
    ex = CommandExecutor(agent(f"print('Sure.'); print(call('submit', output={GOOD!r}))"))
    case = make_step()
    ex.run_turn(case.step, case.step.prompt, "step")
    assert case.step.accepted
    assert case.step.output == GOOD
    assert ex.last_error is None


def test_submission_lines_deliver_update_then_submit(make_step: MakeStep) -> None:
    ex = CommandExecutor(agent(f"""
        print("working on it")
        print("WFRUN_STEP_SUBMISSION " + call("update", update=dict(type="progress",
              key="main", data=dict(completed=1, total=2))))
        print("WFRUN_STEP_SUBMISSION " + call("submit", output={GOOD!r}))
        print("bye")
    """))
    case = make_step()
    ex.run_turn(case.step, case.step.prompt, "step")
    assert case.updates == [("progress", "main", {"completed": 1, "total": 2})]
    assert case.step.accepted
    assert case.step.output == GOOD


def test_plain_output_is_the_step_output(make_step: MakeStep) -> None:
    ex = CommandExecutor(agent("print('Result:\\n```json\\n{\"verdict\": \"fail\", "
                               "\"score\": 2}\\n```')"))
    case = make_step()
    ex.run_turn(case.step, case.step.prompt, "step")
    assert case.step.accepted
    assert case.step.output == {"verdict": "fail", "score": 2}


def test_environment_names_the_attempt(make_step: MakeStep) -> None:
    ex = CommandExecutor([sys.executable, "-c", textwrap.dedent("""
        import json, os, sys
        sys.stdin.read()
        print(json.dumps(dict(action="submit", step=os.environ["WFRUN_STEP"],
                              attempt=os.environ["WFRUN_ATTEMPT"],
                              output=dict(verdict="pass", score=len(os.environ["WFRUN_RUN_ID"])))))
    """)])
    case = make_step()
    ex.run_turn(case.step, case.step.prompt, "step")
    assert case.step.accepted
    assert case.step.output == {"verdict": "pass", "score": len(case.step.contract.run_id)}


def test_schema_rejection_then_reminder_turn_with_the_task(make_step: MakeStep) -> None:
    # The CLI remembers nothing, so the reminder turn must carry the task too.
    ex = CommandExecutor(agent(f"""
        if "Reminder:" in prompt and {TASK!r} in prompt:
            print(call("submit", output={GOOD!r}))
        else:
            print(call("submit", output=dict(verdict="maybe")))
    """))
    case = make_step()
    ex.run_turn(case.step, case.step.prompt, "step")
    assert not case.step.accepted
    assert len(case.step.rejections) == 1
    assert ex.last_error is not None
    assert "schema" in ex.last_error
    ex.run_turn(case.step, reminder_text(case.step, 1), "reminder")
    assert case.step.accepted
    assert case.step.output == GOOD


def test_stale_attempt_is_refused(make_step: MakeStep) -> None:
    ex = CommandExecutor(agent(f"""
        attempt = "0000stale0000"
        print("WFRUN_STEP_SUBMISSION " + call("submit", output={GOOD!r}))
    """))
    case = make_step()
    ex.run_turn(case.step, case.step.prompt, "step")
    assert not case.step.accepted
    assert ex.last_error is not None
    assert "stale" in ex.last_error


def test_non_json_output_three_times_is_never_accepted(make_step: MakeStep) -> None:
    ex = CommandExecutor(agent("print('I reviewed it and it looks good to me.')"))
    case = make_step()
    ex.run_turn(case.step, case.step.prompt, "step")
    for left in (1, 0):
        ex.run_turn(case.step, reminder_text(case.step, left), "reminder")
    assert not case.step.accepted
    assert len(case.step.rejections) == 3
    assert ex.last_error is not None


def test_non_zero_exit_is_no_submission_and_stderr_is_redacted(make_step: MakeStep) -> None:
    token = "tok-9f8e7d6c5b4a39281706"
    env = {"PATH": os.environ.get("PATH", ""), "AGENT_API_TOKEN": token}
    ex = CommandExecutor(agent(f"""
        print(call("submit", output={GOOD!r}))
        sys.stderr.write("auth failed for " + os.environ["AGENT_API_TOKEN"] + "\\n")
        sys.exit(3)
    """), env=env, pass_env=["AGENT_API_TOKEN"])  # the CLI's own key, let through by name
    case = make_step()
    ex.run_turn(case.step, case.step.prompt, "step")
    assert not case.step.accepted
    assert ex.last_error is not None
    assert "exited with status 3" in ex.last_error
    assert "auth failed for [redacted]" in ex.last_error
    assert token not in ex.last_error


def test_empty_stdout_is_no_submission(make_step: MakeStep) -> None:
    ex = CommandExecutor(["true"])
    case = make_step(schema=None)  # without a schema, "" would otherwise be a valid output
    ex.run_turn(case.step, case.step.prompt, "step")
    assert not case.step.accepted
    assert ex.last_error == "agent command printed nothing on stdout"


def test_command_not_found_is_a_clear_reason(make_step: MakeStep) -> None:
    ex = CommandExecutor(["wfrun-no-such-agent-cli", "--flag"])
    case = make_step()
    ex.run_turn(case.step, case.step.prompt, "step")
    assert not case.step.accepted
    assert ex.last_error == "agent command not found: wfrun-no-such-agent-cli"


def test_missing_working_directory_is_named(make_step: MakeStep, tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    ex = CommandExecutor(["true"], cwd=missing)
    case = make_step()
    ex.run_turn(case.step, case.step.prompt, "step")
    assert not case.step.accepted
    assert ex.last_error == f"working directory not found: {missing}"


def _alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting for a reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def _pid_in(path: Path) -> int | None:
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text else None


# The children below would sleep 30 s: a turn that ends well before that (QUICK) was
# stopped, whatever the load. The cancel lands once the child is set up (its pid files
# written), never on a timer racing the child's start-up.
QUICK = 15.0


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_cancel_kills_the_whole_process_group(make_step: MakeStep, tmp_path: Path) -> None:
    script = "echo $$ > sh.pid; sleep 30 & echo $! > bg.pid; sleep 30"
    ex = CommandExecutor(["sh", "-c", script], cwd=tmp_path)
    case = make_step(timeout=None)
    case.cancel_when(lambda: _pid_in(tmp_path / "bg.pid"))
    ex.run_turn(case.step, case.step.prompt, "step")
    returned = time.monotonic()
    sh_pid, bg_pid = _pid_in(tmp_path / "sh.pid"), _pid_in(tmp_path / "bg.pid")
    assert sh_pid is not None
    assert bg_pid is not None
    assert case.cancelled_at is not None
    assert returned - case.cancelled_at < QUICK
    assert not case.step.accepted
    assert ex.last_error is not None
    assert "cancel" in ex.last_error
    wait_until(lambda: not (_alive(sh_pid) or _alive(bg_pid) or _group_members(sh_pid)),
               interval=0.02, what="the group to be gone")
    assert _group_members(sh_pid) == []


def test_term_ignoring_child_is_killed_after_the_grace(
        make_step: MakeStep, tmp_path: Path) -> None:
    ex = CommandExecutor(["sh", "-c", "trap '' TERM; echo $$ > sh.pid; sleep 30"], cwd=tmp_path)
    case = make_step(timeout=None)
    case.cancel_when(lambda: _pid_in(tmp_path / "sh.pid"))  # the trap is set by then
    ex.run_turn(case.step, case.step.prompt, "step")
    returned = time.monotonic()
    assert case.cancelled_at is not None
    # SIGTERM is ignored, so only the SIGKILL after the 1 s grace ends the child.
    assert 1.0 <= returned - case.cancelled_at < QUICK
    pid = _pid_in(tmp_path / "sh.pid")
    assert pid is not None
    assert not _alive(pid)
    assert _group_members(pid) == []


def test_deadline_stops_a_slow_agent(make_step: MakeStep) -> None:
    ex = CommandExecutor(["sleep", "30"])
    case = make_step(timeout=0.5)
    started = time.monotonic()
    ex.run_turn(case.step, case.step.prompt, "step")
    assert time.monotonic() - started < QUICK
    assert not case.step.accepted
    assert ex.last_error is not None
    assert "deadline" in ex.last_error


def test_background_job_holding_stdout_does_not_block_the_turn(make_step: MakeStep) -> None:
    # The CLI answers and exits but leaves a job that keeps stdout open.
    ex = CommandExecutor(agent(f"""
        import subprocess
        subprocess.Popen(["sleep", "30"])
        print(call("submit", output={GOOD!r}), flush=True)
    """))
    case = make_step()
    started = time.monotonic()
    ex.run_turn(case.step, case.step.prompt, "step")
    assert time.monotonic() - started < QUICK
    assert case.step.accepted


def test_the_agent_inherits_no_secret_unless_the_user_passes_it(make_step: MakeStep) -> None:
    # Issue 35.5: docs/secrets.md promises no model sees a secret; a command agent (and any
    # shell its model opens) inherited every secret of wfrun's environment.
    env = {"PATH": os.environ.get("PATH", ""), "GITHUB_TOKEN": "ghp-canary-1",
           "DB_PASSWD": "canary-pw-2", "RENAMED": "x canary-declared-3 y",
           "ANTHROPIC_API_KEY": "canary-own-key-4", "LANG": "C.UTF-8"}
    script = agent(f"""
        print(','.join(sorted(k for k in os.environ if not k.startswith('WFRUN_')
                              and k not in ('PATH', 'LC_CTYPE', '__CF_USER_TEXT_ENCODING'))),
              file=sys.stderr)
        print(call('submit', output={GOOD!r}))
    """)
    logs: list[str] = []
    case = make_step()
    case.step.secret_values = ("canary-declared-3",)
    case.step.on_log = lambda out, err, *_: logs.append(err)
    CommandExecutor(script, env=env, pass_env=["ANTHROPIC_API_KEY"]).run_turn(
        case.step, case.step.prompt, "step")
    assert case.step.accepted
    assert logs == ["ANTHROPIC_API_KEY,LANG\n"]
