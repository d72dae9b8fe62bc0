"""A run longer than `pi -p` waits (issue 33, item 4), through the real Pi.

`pi -p` starts a workflow whose one step runs until the test opens its gate. Pi's
settle wait (the bridge's, 30 s by default; 2 s here through WFRUN_SETTLE_TIMEOUT)
runs out, Pi exits, and its session hands the run
over. A `wfrun host` continues it; once the gate opens it completes, and `pi -p`
on the same session hears the outcome exactly once.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fakes.openai_server import Answer, Messages, Reply
from fakes.pi_model import last, text_of
from fakes.seed_workflow import RUN_RE
from pi_rpc import EXTENSION, NODE_BIN, PI_CLI, VENV_BIN, custom_messages, write_agent_dir
from pi_world import World
from waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
PROMPT = "please start the gated workflow"
GATED = """
    start: wait
    nodes:
      wait:
        action: {use_shell: true, shell: "while [ ! -e release ]; do sleep 0.1; done"}
"""


def pi_print(world: World, prompt: str, session: Path | None = None) -> None:
    agent = write_agent_dir(world.root / "agent", world.server.base_url)
    (world.root / "home").mkdir(exist_ok=True)
    argv = [str(NODE_BIN / "node"), str(PI_CLI), "-p", prompt, "--session-dir",
            str(world.sessions), "-e", str(EXTENSION)]
    if session is not None:
        argv += ["--session", str(session)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PI_")}
    env.update({"PATH": f"{NODE_BIN}:{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}",
                "PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0",
                "PI_CODING_AGENT_DIR": str(agent), "HOME": str(world.root / "home"),
                "WFRUN_SETTLE_TIMEOUT": "2"})
    done = subprocess.run(argv, cwd=world.project, env=env, capture_output=True, text=True,
                          timeout=120, start_new_session=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_long_run_outlives_pi_p_and_is_heard_once_on_resume(world: World) -> None:
    world.write("gated", GATED)
    seen: dict[str, Any] = {"outcome_turns": 0}

    def rule(messages: Messages) -> Reply | None:
        end = last(messages)
        text = text_of(end)
        if end.get("role") == "user":
            if text == PROMPT:
                return Answer(calls=[("workflow", {"action": "start", "workflow": "gated"})])
            if "run" in seen and f"completed (run {seen['run']})" in text:
                seen["outcome_turns"] += 1
                return Answer(text="It completed.")
            return Answer(text="Nothing new.")
        queued = RUN_RE.search(text)
        if end.get("role") == "tool" and queued and "run" not in seen:
            seen["run"] = queued.group("run")
            return Answer(text="Queued.")
        return None

    world.model.rules.append(rule)
    pi_print(world, PROMPT)  # returns once Pi's settle wait ran out and Pi exited
    run_id = seen["run"]
    assert world.launch(run_id).status == "parked"  # handed over, not lost
    (session,) = world.sessions.glob("*.jsonl")
    host = subprocess.Popen([str(VENV_BIN / "wfrun"), "--project", str(world.project), "host",
                             "--no-controllers"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: world.launch(run_id).status == "running", timeout=60,
                   what="wfrun host to take the handed-over run")
        (world.project / "release").touch()
        wait_until(lambda: world.launch(run_id).status == "done", timeout=60,
                   what="the run to complete under wfrun host")
    finally:
        host.terminate()
        host.communicate(timeout=30)
    pi_print(world, "any news?", session)
    pi_print(world, "and now?", session)
    told = [m for m in custom_messages(session, "wfrun-presentation")
            + custom_messages(session, "wfrun-deferred-turn") if m["details"]["runId"] == run_id]
    assert len(told) == 1, told
    assert seen["outcome_turns"] == 1
