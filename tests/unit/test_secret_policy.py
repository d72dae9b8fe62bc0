"""One secret-name policy (issue 34.4): `runner/_safety.py` decides which names say secret,
and every part of wfrun asks it. Two lists drifted apart once (the UI and launch messages
missed DB_PASSWD, GITHUB_AUTH, SESSION_COOKIE); this ratchet fails when a second appears.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from runner._safety import SECRET_NAME, is_secret_name
from runner.host.runtime._launches import environment_secrets

RUNNER = Path(__file__).resolve().parents[2] / "runner"
POLICY = RUNNER / "_safety.py"
# The words a secret name ends in, as any second list would spell them.
WORDS = frozenset({"token", "tokens", "secret", "secrets", "password", "passwd", "passphrase",
                   "apikey", "auth", "authorization", "cookie", "credential", "credentials",
                   "accesskey", "privatekey", "secretkey", "signingkey", "pwd"})


def _word(text: str) -> str | None:
    folded = re.sub(r"[^a-z]", "", text.lower())
    return folded if folded in WORDS else None


def second_lists(source: str) -> list[tuple[int, str]]:
    """Collections of two or more secret words, and regex alternations of them."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            words = {_word(e.value) for e in node.elts
                     if isinstance(e, ast.Constant) and isinstance(e.value, str)} - {None}
            if len(words) >= 2:
                found.append((node.lineno, ", ".join(sorted(w for w in words if w))))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and "|" in node.value:
            words = {_word(part) for part in re.split(r"[|()?:\[\]]", node.value)} - {None}
            if len(words) >= 2:
                found.append((node.lineno, node.value[:60]))
    return found


def test_no_second_list_of_secret_name_rules_in_runner() -> None:
    offenders = [f"{path.relative_to(RUNNER.parent)}:{line}: {what}"
                 for path in sorted(RUNNER.rglob("*.py")) if path != POLICY
                 for line, what in second_lists(path.read_text())]
    assert offenders == [], ("secret-name rules belong in runner/_safety.py only "
                             "(is_secret_name, secret_env_values):\n" + "\n".join(offenders))


def test_the_ratchet_sees_the_list_it_replaced() -> None:
    assert second_lists('W = ("TOKEN", "SECRET", "PASSWORD", "API_KEY")\n')
    assert second_lists('P = r"(?i)(token|passwd)$"\n')
    assert not second_lists('ARGS = ("--token", "--port")\nX = "token"\n')
    assert second_lists(POLICY.read_text())  # the policy itself is what it finds


@pytest.mark.parametrize("name", ["DB_PASSWD", "GITHUB_AUTH", "SESSION_COOKIE",
                                  "GITHUB_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD"])
def test_environment_secrets_follow_the_policy(name: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert is_secret_name(name)
    monkeypatch.setenv(name, "canary-value-5e2b")
    monkeypatch.setenv("MAX_TOKENS", "canary-not-a-secret")
    assert "canary-value-5e2b" in environment_secrets()
    assert "canary-not-a-secret" not in environment_secrets()
    assert SECRET_NAME.search("MAX_TOKENS") is None
    assert os.environ[name] == "canary-value-5e2b"


def test_wfrun_agent_env_names_what_a_command_agent_may_inherit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.engine.executors import CommandExecutor
    from runner.host.runtime._local import make_executor

    monkeypatch.setenv("WFRUN_AGENT_ENV", " ANTHROPIC_API_KEY, ,OTHER_TOKEN")
    executor = make_executor("command:my-agent --flag")
    assert isinstance(executor, CommandExecutor)
    assert executor.pass_env == ("ANTHROPIC_API_KEY", "OTHER_TOKEN")
