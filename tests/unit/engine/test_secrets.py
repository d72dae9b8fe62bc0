"""Secrets, writeOnly input and env in the engine: real bundles, every byte searched."""

# ruff: noqa: E501  (workflows embedded as YAML keep their long lines)
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from runner._safety import MASK, mask, mask_json, mask_values
from runner.compiler import Compiler
from runner.engine import RunControl
from runner.engine._secrets import (
    SecretMissing,
    SecretSource,
    resolve,
    split_input,
    write_only_fields,
)
from runner.errors import InputError

TOKEN = "tok-canary-0a1b2c"
PASSWORD = "pw-canary-3d4e5f"
ENV_KEY = "envkey-canary-6a7b"


def _bytes_under(root: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in root.rglob("*") if p.is_file()]


def _assert_nowhere(root: Path, *canaries: str) -> None:
    files = _bytes_under(root)
    assert files
    for canary in canaries:
        for path, data in files:
            assert canary.encode() not in data, f"{canary} in {path}"


def test_mask_values_covers_each_line_of_a_multi_line_secret() -> None:
    values = mask_values(["line-one-secret\nline-two-secret", "ab", ""])
    whole = "line-one-secret\nline-two-secret"
    assert {whole, "line-one-secret", "line-two-secret"} <= set(values)
    assert whole.replace("\n", "\\n") in values  # JSON-escaped, as a record would hold it
    assert values == tuple(sorted(values, key=lambda s: (-len(s), s)))  # longest first
    assert not {"ab", ""} & set(values)
    text = "a: line-two-secret; whole: line-one-secret\nline-two-secret"
    assert mask(text, values) == "a: ***; whole: ***"


def test_mask_json_masks_keys_and_nested_strings_only() -> None:
    values = mask_values([TOKEN])
    value = {TOKEN: [f"x{TOKEN}y", 3, None, {"k": TOKEN}], "n": 1.5}
    assert mask_json(value, values) == {MASK: [f"x{MASK}y", 3, None, {"k": MASK}], "n": 1.5}


def _definition(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "wf.yaml"
    path.write_text(text)
    result = Compiler().compile_path(path)
    assert result.valid, [d.message for d in result.errors]
    return result.definition


WORKFLOW = """\
secrets: [DEPLOY_TOKEN]
env: [CI_NAME]
input:
  type: object
  properties:
    password: {type: string, writeOnly: true}
    task: {type: string}
start: use
nodes:
  use:
    compute: "{{ {'token': secrets.DEPLOY_TOKEN, 'pw': input.password, 'ci': env.CI_NAME, 'long': 'x' * 5000 ~ secrets.DEPLOY_TOKEN} }}"
  log:
    action:
      shell: [sh, -c, 'head -c 6000 /dev/zero | tr "\\\\0" y; echo " $T $P $E"; echo "$T" >&2; exit 4']
      env: {T: "{{ secrets.DEPLOY_TOKEN }}", P: "{{ input.password }}", E: "{{ env.OTHER_TOKEN_NOT_LISTED | default('') }}"}
edges: [{from: use, to: log}]
"""


def test_resolve_names_what_is_missing_and_refuses_short_values(tmp_path: Path) -> None:
    d = _definition(tmp_path, WORKFLOW)
    assert write_only_fields(d) == ("password",)
    with pytest.raises(SecretMissing, match=r"needs secret DEPLOY_TOKEN: set it in the "
                       r"environment or pass --secret DEPLOY_TOKEN=VALUE"):
        resolve(d, SecretSource(), {})
    with pytest.raises(InputError, match="shorter than 4 characters"):
        resolve(d, SecretSource(given={"DEPLOY_TOKEN": "abc"}), {})
    with pytest.raises(InputError, match=r"'password' is secret .* at least 4"):
        resolve(d, SecretSource(given={"DEPLOY_TOKEN": TOKEN}), {"password": "abc"})
    with pytest.raises(SecretMissing, match="--secret password=VALUE"):
        resolve(d, SecretSource(given={"DEPLOY_TOKEN": TOKEN}), {"password": MASK})
    # --secret wins over the environment; env: gives only the names it lists.
    got = resolve(d, SecretSource(given={"DEPLOY_TOKEN": TOKEN},
                                  environ={"DEPLOY_TOKEN": "other-value", "CI_NAME": "box",
                                           "HOME": "/root", "MY_API_KEY": ENV_KEY}),
                  {"password": PASSWORD})
    assert dict(got.secrets) == {"DEPLOY_TOKEN": TOKEN}
    assert dict(got.env) == {"CI_NAME": "box"}
    assert dict(got.hidden) == {"password": PASSWORD}
    assert {TOKEN, PASSWORD, ENV_KEY} <= set(got.masked)  # a secret-named variable too
    assert "box" not in got.masked
    assert "/root" not in got.masked


def test_a_workflow_declaring_nothing_still_masks_secret_named_environment_values(
        env: Any) -> None:
    d = env.workflow('start: a\nnodes:\n  a: {compute: "{{ input.note }}"}\n')
    source = SecretSource(environ={"MY_API_KEY": ENV_KEY, "CI_NAME": "box"})
    first, second = resolve(d, source, {}), resolve(d, source, {})
    assert ENV_KEY in first.masked
    assert "box" not in first.masked
    assert first.masked is second.masked  # worked out once per source, not per run
    out = env.engine(secret_source=source).start(d, {"note": f"key={ENV_KEY}"})
    assert out.status == "completed"
    assert out.state.outputs["a"] == f"key={MASK}"
    _assert_nowhere(env.runs, ENV_KEY)


def test_split_input_masks_write_only_fields_whatever_their_length(tmp_path: Path) -> None:
    d = _definition(tmp_path, WORKFLOW)
    stored, hidden = split_input(d, {"password": "x", "task": "t"})
    assert stored == {"password": MASK, "task": "t"}
    assert hidden == {"password": "x"}


def test_a_run_records_only_masks_in_trace_state_artifacts_and_logs(env: Any) -> None:
    d = env.workflow(WORKFLOW)
    source = SecretSource(given={"DEPLOY_TOKEN": TOKEN},
                          environ={"CI_NAME": "box", "MY_API_KEY": ENV_KEY})
    out = env.engine(secret_source=source).start(d, {"password": PASSWORD, "task": "t"})
    assert out.status == "failed"
    assert out.error["code"] == "nonzero_exit"
    assert out.error["message"].endswith("exited with 4: ***")
    run_id = out.run_id
    started = env.events(run_id, "run_started")[0]["payload"]
    assert started["input"] == {"password": MASK, "task": "t"}
    use = out.state.outputs["use"]
    assert (use["token"], use["pw"], use["ci"]) == (MASK, MASK, "box")
    assert isinstance(use["long"], dict)
    assert "$artifact" in use["long"]  # over 4 KiB
    (log,) = env.events(run_id, "node_log")
    assert "$artifact" in log["payload"]["stdout"]  # a long stream goes to artifacts/
    assert log["payload"]["stderr"] == f"{MASK}\n"
    assert log["payload"]["exit_code"] == 4
    artifacts = list((env.runs / run_id / "artifacts").rglob("*"))
    texts = [p.read_text() for p in artifacts if p.is_file()]
    assert any(t.endswith(f"y {MASK} {MASK} \n") for t in texts), [t[-40:] for t in texts]
    assert any(t == "x" * 5000 + MASK for t in texts)
    assert env.state_file(run_id)["input"] == {"password": MASK, "task": "t"}
    _assert_nowhere(env.runs, TOKEN, PASSWORD, ENV_KEY)


def test_resume_needs_the_secrets_again_and_gets_the_real_values(env: Any) -> None:
    gate = env.root / "release"
    d = env.workflow(f"""
        secrets: [DEPLOY_TOKEN]
        input: {{type: object, properties: {{password: {{type: string, writeOnly: true}}}}}}
        start: wait
        nodes:
          wait:
            action:
              shell: [sh, -c, 'while [ ! -e {gate} ]; do sleep 0.1; done; echo "$T|$P"']
              env: {{T: "{{{{ secrets.DEPLOY_TOKEN }}}}", P: "{{{{ input.password }}}}"}}
          show:
            compute: "{{{{ outputs.wait.stdout == secrets.DEPLOY_TOKEN ~ '|' ~ input.password ~ '\\n' }}}}"
        edges: [{{from: wait, to: show}}]
    """)
    control = RunControl()
    source = SecretSource(given={"DEPLOY_TOKEN": TOKEN})
    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.update(out=env.engine(
        secret_source=source).start(d, {"password": PASSWORD}, control=control)))
    worker.start()
    assert env.wait_for(lambda: env.runs.exists() and any(
        "node_started" in env.types(r) for r in
        [n.name for n in env.runs.iterdir() if not n.name.startswith(".")]))
    control.park("test")
    worker.join(timeout=30)
    assert box["out"].parked
    run_id = box["out"].run_id
    with pytest.raises(SecretMissing, match="DEPLOY_TOKEN"):
        env.engine().resume(run_id, env.resolver())
    with pytest.raises(SecretMissing, match="'password'"):
        env.engine(secret_source=source).resume(run_id, env.resolver())
    gate.touch()
    again = SecretSource(given={"DEPLOY_TOKEN": TOKEN, "password": PASSWORD})
    out = env.engine(secret_source=again).resume(run_id, env.resolver())
    assert out.status == "completed"
    # stdout was masked when recorded, so the comparison in `show` sees the mask.
    assert out.final_output is False
    assert env.events(run_id, "node_log")[-1]["payload"]["stdout"] == f"{MASK}|{MASK}\n"
    _assert_nowhere(env.runs, TOKEN, PASSWORD)


@pytest.mark.parametrize(("text", "code"), [
    ("secrets: TOKEN", "wrong-type"),
    ("secrets: [bad-name]", "invalid-name"),
    ("env: [A, A]", "duplicate-name"),
    ("env: [3]", "invalid-name"),
])
def test_secret_and_env_lists_are_checked(tmp_path: Path, text: str, code: str) -> None:
    path = tmp_path / "wf.yaml"
    path.write_text(f"{text}\nstart: a\nnodes:\n  a: {{compute: '{{{{ 1 }}}}'}}\n")
    result = Compiler().compile_path(path)
    assert code in {d.code for d in result.errors}, [d.code for d in result.errors]
    line = next(d for d in result.errors if d.code == code)
    assert line.line == 1


def test_declaring_secrets_changes_the_digest_and_none_keeps_it(tmp_path: Path) -> None:
    base = "start: a\nnodes:\n  a: {compute: '{{ 1 }}'}\n"
    plain = _definition(tmp_path, base)
    declared = _definition(tmp_path, "secrets: [X_TOKEN]\n" + base)
    assert plain.digest != declared.digest
    assert "secrets" not in plain.snapshot()
    assert json.loads(json.dumps(declared.snapshot()))["secrets"] == ["X_TOKEN"]


class _Sink:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def emit(self, run_id: str, node: str, attempt: str, notification_id: str, kind: str,
             message: str, channels: tuple[str, ...] = ()) -> None:
        self.messages.append(message)


def test_a_notification_leaves_the_engine_masked(env: Any) -> None:
    d = env.workflow("""
        secrets: [DEPLOY_TOKEN]
        start: tell
        nodes:
          tell: {notify: {kind: final, message: "deployed with {{ secrets.DEPLOY_TOKEN }}"}}
    """)
    sink = _Sink()
    out = env.engine(secret_source=SecretSource(given={"DEPLOY_TOKEN": TOKEN}),
                     notifications=sink).start(d)
    assert out.status == "completed"
    assert sink.messages == [f"deployed with {MASK}"]
    _assert_nowhere(env.runs, TOKEN)
