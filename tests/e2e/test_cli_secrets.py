"""Secret canaries through the real CLI: nothing wfrun writes or shows a model holds one.

Each canary is a unique string handed to wfrun as a declared secret (environment or
`--secret`), a writeOnly input field, a secret-named environment variable a failing
command prints, and the text of a hook's exception. After the runs, every byte under
the project's `.wfrun/` (store, WAL, bundles, artifacts, logs) and WFRUN_HOME, every
CLI output and every request the fake model received is searched: zero hits. The
commands themselves did receive the real values (they compare a hash).
"""

# ruff: noqa: E501  (workflows embedded as YAML keep their long lines)
from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.openai_server import FakeOpenAI, submit_valid
from fakes.openai_server import openai_server as openai_server
from waiting import wait_until

TOKEN = "canary-deploy-token-5f1c"  # declared secret, from the environment
PASSWORD = "canary-password-77aa"  # writeOnly input field
API_KEY = "canary-api-key-9d3e"  # MY_API_KEY in the environment (secret-named)
FILE_SECRET = "canary-file-secret-c0de"  # --secret NAME=@FILE
UNKNOWN_KEY = "canary-unknown-key-4242"  # printed as CONFIG_API_KEY=..., known to nobody
CANARIES = (TOKEN, PASSWORD, API_KEY, FILE_SECRET, UNKNOWN_KEY)
VISIBLE = "ci-box-visible-name"  # an `env:` allowlisted, non-secret value


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# `check` proves the command got the real values (by hash) and prints them all, on
# both streams, then fails; the failure routes to `boom`, whose hook raises with the
# secret in its message.
CANARY_WORKFLOW = f"""\
secrets: [DEPLOY_TOKEN]
env: [CI_NAME]
input:
  type: object
  properties:
    password: {{type: string, writeOnly: true}}
    task: {{type: string}}
start: plan
nodes:
  plan:
    agent:
      prompt: "Deploy {{{{ input.task }}}} with {{{{ secrets.DEPLOY_TOKEN }}}} and {{{{ input.password }}}} on {{{{ env.CI_NAME }}}}"
      output: {{type: object}}
  check:
    action:
      shell:
        - sh
        - -c
        - |
          [ "$(printf %s "$T" | sha256sum | cut -c1-64)" = "{sha(TOKEN)}" ] && echo token-matches
          [ "$(printf %s "$P" | sha256sum | cut -c1-64)" = "{sha(PASSWORD)}" ] && echo password-matches
          echo "token=$T password=$P api=$MY_API_KEY"
          echo "on stderr: $T $P $MY_API_KEY" >&2
          cat config.env >&2
          exit 3
      env: {{T: "{{{{ secrets.DEPLOY_TOKEN }}}}", P: "{{{{ input.password }}}}"}}
  boom:
    compute: {{call: "./boom.py:boom"}}
edges:
  - {{from: plan, to: check}}
  - {{from: check, switch: {{on: $result.outcome, cases: {{failed: boom}}}}}}
"""
BOOM_PY = """\
def boom(ctx):
    raise ValueError("cannot deploy with " + ctx.secrets["DEPLOY_TOKEN"] + " / "
                     + ctx.input["password"])
"""
# A command agent that echoes its prompt (stdin) and a secret-named variable to stderr.
AGENT_PY = """\
import json, os, sys
prompt = sys.stdin.read()
print("agent saw: " + prompt, file=sys.stderr)
print("agent env: " + ",".join(sorted(k for k, v in os.environ.items()
                                     if k in ("MY_API_KEY", "DEPLOY_TOKEN", "PLAIN_NAMED")
                                     or v in (os.environ.get("KEEP_ME", "-"),))), file=sys.stderr)
print(json.dumps({"seen": prompt.splitlines()[0]}))
"""
FILE_WORKFLOW = f"""\
secrets: [FROM_FILE]
start: use
nodes:
  use:
    action:
      shell: [sh, -c, 'echo "got $S"; [ "$(printf %s "$S" | sha256sum | cut -c1-64)" = "{sha(FILE_SECRET)}" ]']
      env: {{S: "{{{{ secrets.FROM_FILE }}}}"}}
"""
# `wait` blocks on a release file, so the test can kill its runner mid-node.
RESUME_WORKFLOW = f"""\
secrets: [DEPLOY_TOKEN]
start: wait
nodes:
  wait:
    action:
      shell:
        - env
        - "ARGV_COPY={{{{ secrets.DEPLOY_TOKEN }}}}"
        - sh
        - -c
        - |
          touch "$GATE/started"
          while [ ! -e "$GATE/release" ]; do sleep 0.1; done
          [ "$(printf %s "$T" | sha256sum | cut -c1-64)" = "{sha(TOKEN)}" ] && echo "token-matches $T"
          [ "$ARGV_COPY" = "$T" ] && echo "argv-matches"
      env: {{T: "{{{{ secrets.DEPLOY_TOKEN }}}}", GATE: "{{{{ project.root }}}}/gate"}}
"""


class Project:
    def __init__(self, root: Path, home: Path) -> None:
        self.root = root
        self.home = home
        folder = root / ".wfrun" / "workflows"
        folder.mkdir(parents=True)
        (folder / "deploy.yaml").write_text(CANARY_WORKFLOW)
        (folder / "boom.py").write_text(BOOM_PY)
        (folder / "fromfile.yaml").write_text(FILE_WORKFLOW)
        (folder / "slow.yaml").write_text(RESUME_WORKFLOW)
        (root / "agent.py").write_text(AGENT_PY)
        # A config file a command prints: its key is known to nobody, its shape says secret.
        (root / "config.env").write_text(f"CONFIG_API_KEY={UNKNOWN_KEY}\n")
        (root / "gate").mkdir()
        self.outputs: list[str] = []  # everything the CLI printed, searched at the end

    def env(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items()
                if not k.startswith("WFRUN_") and k not in ("DEPLOY_TOKEN", "MY_API_KEY")}
        return {**base, "WFRUN_HOME": str(self.home), **extra}

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "runner", "--project", str(self.root), *args]

    def wfrun(self, *args: str, env: dict[str, str] | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.argv(*args), capture_output=True, text=True,
                              timeout=timeout, cwd=self.root,
                              env=env if env is not None else self.env(), check=False)
        self.outputs += [done.stdout, done.stderr]
        return done

    def launch_rows(self) -> int:
        store = self.root / ".wfrun" / "state" / "store.sqlite3"
        if not store.exists():
            return 0
        conn = sqlite3.connect(store.as_uri() + "?mode=ro", uri=True)
        try:
            return int(conn.execute("SELECT count(*) FROM workflow_run_queue").fetchone()[0])
        finally:
            conn.close()

    def run_id(self, done: subprocess.CompletedProcess[str]) -> str:
        return str(json.loads(done.stdout)["run_id"])

    def written_bytes(self) -> Iterator[tuple[Path, bytes]]:
        for top in (self.root / ".wfrun", self.home):
            for path in top.rglob("*"):
                if path.is_file() and not path.is_symlink():
                    yield path, path.read_bytes()

    def assert_no_canary_anywhere(self, extra: list[str] = ()) -> None:  # type: ignore[assignment]
        files = list(self.written_bytes())
        assert any(p.name == "trace.jsonl" for p, _ in files)
        assert any(p.name.startswith("store.sqlite3") for p, _ in files)
        for canary in CANARIES:
            for path, data in files:
                assert canary.encode() not in data, f"{canary} in {path}"
            for text in [*self.outputs, *extra]:
                assert canary not in text, f"{canary} in output {text[:200]!r}"


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path / "proj", tmp_path / "home")


def _model_texts(server: FakeOpenAI) -> list[str]:
    return [json.dumps(r.body) + json.dumps(r.headers) for r in server.requests]


@pytest.mark.timeout(120)
def test_canaries_reach_commands_but_no_byte_wfrun_writes_and_no_model_message(
        project: Project, openai_server: FakeOpenAI) -> None:
    openai_server.script = submit_valid({"planned": True})
    env = project.env(DEPLOY_TOKEN=TOKEN, MY_API_KEY=API_KEY, CI_NAME=VISIBLE,
                      WFRUN_OPENAI_API_KEY="sk-test-0123456789abcdef")
    done = project.wfrun("--openai-base-url", openai_server.base_url, "--openai-model", "m",
                         "run", "deploy", "-i", "task=ship", "-i", f"password={PASSWORD}",
                         "--agent", "openai", "--json", env=env)
    assert done.returncode == 1, done.stderr  # the hook failed the run
    outcome = json.loads(done.stdout)
    run_id = outcome["run_id"]
    assert outcome["status"] == "failed"
    assert outcome["error"]["node"] == "boom"
    assert "cannot deploy with *** / ***" in outcome["error"]["message"]
    assert "Traceback" not in done.stderr

    # The model got the prompt with the secrets masked, and the allowlisted env value.
    prompts = [m["content"] for r in openai_server.requests for m in r.messages
               if m.get("role") == "user" and isinstance(m.get("content"), str)]
    assert any(f"Deploy ship with *** and *** on {VISIBLE}" in p for p in prompts), prompts

    # The command got the real values; its logs show them masked, on both streams.
    logs = project.wfrun("logs", run_id, "check", env=env)
    assert logs.returncode == 0, logs.stderr
    assert "token-matches" in logs.stdout
    assert "password-matches" in logs.stdout
    assert "token=*** password=*** api=***" in logs.stdout
    assert "on stderr: *** *** ***" in logs.stdout  # --stdout/--stderr not given: both
    only_err = project.wfrun("logs", run_id, "check", "--stderr", env=env)
    assert only_err.stdout.splitlines() == ["on stderr: *** *** ***",
                                            "CONFIG_API_KEY=[redacted]"]

    show = project.wfrun("show", run_id, "--json", env=env)
    view = json.loads(show.stdout)
    assert view["failure"]["node"] == "boom"
    assert view["outputs"]["plan"] == {"planned": True}
    trace = (project.root / ".wfrun" / "runs" / run_id / "trace.jsonl").read_text()
    assert '"password":"***"' in trace  # the writeOnly field is recorded masked
    for args in (("show", run_id), ("runs", "--json"), ("status", run_id, "--json"),
                 ("logs", run_id, "--json")):
        project.wfrun(*args, env=env)
    project.assert_no_canary_anywhere(_model_texts(openai_server))


@pytest.mark.timeout(120)
def test_a_command_agent_sees_a_masked_prompt_and_its_logs_are_kept(project: Project) -> None:
    # Issue 35.5: a command agent inherits no secret of wfrun's environment, neither a
    # secret-named variable nor a declared secret's value under another name.
    env = project.env(DEPLOY_TOKEN=TOKEN, MY_API_KEY=API_KEY, CI_NAME=VISIBLE,
                      PLAIN_NAMED=TOKEN, KEEP_ME="kept-ordinary-value")
    agent = f"command:{sys.executable} {project.root / 'agent.py'}"
    done = project.wfrun("run", "deploy", "-i", "task=ship", "-i", f"password={PASSWORD}",
                         "--agent", agent, "--json", env=env)
    assert done.returncode == 1, done.stderr
    run_id = project.run_id(done)
    logs = project.wfrun("logs", run_id, "plan", "--stderr", env=env)
    assert logs.returncode == 0, logs.stderr
    assert f"agent saw: Deploy ship with *** and *** on {VISIBLE}" in logs.stdout
    assert "agent env: KEEP_ME\n" in logs.stdout
    project.assert_no_canary_anywhere()


@pytest.mark.timeout(120)
def test_a_secret_from_a_file_and_a_missing_one(project: Project, tmp_path: Path) -> None:
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(FILE_SECRET + "\n")
    done = project.wfrun("run", "fromfile", "--secret", f"FROM_FILE=@{secret_file}", "--json")
    assert done.returncode == 0, done.stderr
    logs = project.wfrun("logs", project.run_id(done), "use", "--stdout")
    assert logs.stdout == "got ***\n"

    missing = project.wfrun("run", "fromfile")
    assert missing.returncode == 2  # refused before anything is queued
    assert "needs secret FROM_FILE" in missing.stderr
    assert "--secret FROM_FILE=" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert project.launch_rows() == 1  # only the first run's

    bad = project.wfrun("run", "fromfile", "--secret", "FROM_FILE=@/no/such/file")
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("wfrun: error: --secret FROM_FILE=@/no/such/file: no such "
                                  "file")
    project.assert_no_canary_anywhere()


@pytest.mark.timeout(120)
def test_a_killed_run_resumes_with_secrets_resolved_again(project: Project) -> None:
    env = project.env(DEPLOY_TOKEN=TOKEN)
    runner = subprocess.Popen(project.argv("run", "slow", "-q"), cwd=project.root, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The step runs before its runner records its group: wait for both, so the kill
        # lands where a registry exists to be read.
        children = project.root / ".wfrun" / "state" / "children"
        wait_until(lambda: (project.root / "gate" / "started").exists()
                   and any(children.glob("*.json")), what="the node to start, recorded")
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=30)
    finally:
        if runner.poll() is None:
            runner.kill()
        runner.communicate(timeout=30)
    run_id = next(p.name for p in (project.root / ".wfrun" / "runs").iterdir()
                  if p.name.startswith("slow-"))
    # The killed runner's process registry outlives it: pids and start times, never the
    # argv with the rendered secret (issues 34.2, 35.5).
    registries = list((project.root / ".wfrun" / "state").rglob("*.json"))
    assert any(p.parent.name == "children" for p in registries), registries
    project.assert_no_canary_anywhere()
    (project.root / "gate" / "release").touch()

    refused = project.wfrun("resume", run_id)  # the secret is in no file: it is needed again
    assert refused.returncode != 0
    assert "needs secret DEPLOY_TOKEN" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr

    resumed = project.wfrun("resume", run_id, "--json", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "completed"
    logs = project.wfrun("logs", run_id, "wait", "--stdout")
    assert logs.stdout == "token-matches ***\nargv-matches\n"
    project.assert_no_canary_anywhere()


def _run_views(project: Project, run_id: str) -> dict[str, Any]:
    return dict(json.loads(project.wfrun("show", run_id, "--json").stdout))


@pytest.mark.timeout(120)
def test_a_write_only_field_needs_its_value_again_to_resume(project: Project) -> None:
    folder = project.root / ".wfrun" / "workflows"
    (folder / "pw.yaml").write_text(textwrap.dedent("""\
        input:
          type: object
          properties: {password: {type: string, writeOnly: true}}
        start: wait
        nodes:
          wait:
            action:
              shell: [sh, -c, 'touch "$G/pw-started"; while [ ! -e "$G/pw-release" ]; do sleep 0.1; done; echo "pw $P"']
              env: {P: "{{ input.password }}", G: "{{ project.root }}/gate"}
        """))
    runner = subprocess.Popen(project.argv("run", "pw", "-q", "-i", f"password={PASSWORD}"),
                              cwd=project.root, env=project.env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (project.root / "gate" / "pw-started").exists(),
                   what="the node to start")
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=30)
    finally:
        if runner.poll() is None:
            runner.kill()
        runner.communicate(timeout=30)
    run_id = next(p.name for p in (project.root / ".wfrun" / "runs").iterdir()
                  if p.name.startswith("pw-"))
    (project.root / "gate" / "pw-release").touch()
    refused = project.wfrun("resume", run_id)
    assert refused.returncode != 0
    assert "input field 'password' is secret (writeOnly)" in refused.stderr, refused.stderr
    assert "--secret password=" in refused.stderr
    resumed = project.wfrun("resume", run_id, "--secret", f"password={PASSWORD}", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert _run_views(project, run_id)["status"] == "completed"
    logs = project.wfrun("logs", run_id, "wait", "--stdout")
    assert logs.stdout == "pw ***\n"
    project.assert_no_canary_anywhere()


@pytest.mark.timeout(120)
def test_start_refuses_a_write_only_value_for_a_host_and_runs_it_with_wait(
        project: Project) -> None:
    (project.root / ".wfrun" / "workflows" / "login.yaml").write_text(textwrap.dedent("""\
        input: {type: object, properties: {password: {type: string, writeOnly: true}}}
        start: use
        nodes:
          use: {action: {shell: [sh, -c, 'echo "using $P"'], env: {P: "{{ input.password }}"}}}
        """))
    refused = project.wfrun("start", "login", "-i", f"password={PASSWORD}")
    assert refused.returncode == 2, refused.stderr
    assert "input field 'password' is secret (writeOnly)" in refused.stderr
    assert "wfrun start --wait" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert project.launch_rows() == 0  # nothing was queued

    waited = project.wfrun("start", "login", "-i", f"password={PASSWORD}", "--wait", "--json")
    assert waited.returncode == 0, waited.stderr
    run_id = json.loads(waited.stdout.strip().splitlines()[-1])["run_id"]
    assert project.wfrun("logs", run_id, "use", "--stdout").stdout == "using ***\n"
    project.assert_no_canary_anywhere()


ODD_SECRET = 'canary p@ss/w0rd+ "q" <&> é-71b3'
ENCODED_WORKFLOW = """\
secrets: [ODD_SECRET]
start: send
nodes:
  send:
    action:
      shell:
        - sh
        - -c
        - 'printf "%s\\n%s\\n" "$1" "$2"; printf %s "$S" | base64 -w0; echo'
        - sh
        - "{{ secrets.ODD_SECRET | urlencode }}"
        - "{{ secrets.ODD_SECRET | tojson }}"
      env: {S: "{{ secrets.ODD_SECRET }}"}
  echo:
    compute: "{{ {'url': secrets.ODD_SECRET | urlencode, 'said': outputs.send.stdout} }}"
edges:
  - {from: send, to: echo}
"""


@pytest.mark.timeout(120)
def test_the_common_encodings_of_a_secret_are_masked_in_all_that_is_recorded(
        project: Project) -> None:
    # Issue 35.5: masking by exact value recorded `{{ secrets.X | urlencode }}` in clear.
    import base64
    from urllib.parse import quote

    (project.root / ".wfrun" / "workflows" / "encoded.yaml").write_text(ENCODED_WORKFLOW)
    done = project.wfrun("run", "encoded", "--json", env=project.env(ODD_SECRET=ODD_SECRET))
    assert done.returncode == 0, done.stderr
    run_id = project.run_id(done)
    logs = project.wfrun("logs", run_id, "send", "--stdout")
    assert logs.stdout == "***\n\"***\"\n***\n", logs.stdout
    show = project.wfrun("show", run_id, "--json")
    assert json.loads(show.stdout)["outputs"]["echo"]["url"] == "***"
    forms = {"url": quote(ODD_SECRET, safe="/"), "json": json.dumps(ODD_SECRET)[1:-1],
             "base64": base64.b64encode(ODD_SECRET.encode()).decode()}
    for path, data in project.written_bytes():
        for name, form in forms.items():
            assert form.encode() not in data, f"the {name} form in {path}"
    for name, form in forms.items():
        assert all(form not in text for text in project.outputs), name
