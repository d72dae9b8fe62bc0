"""Redaction and bounds for text that executors record (DESIGN §9)."""

from __future__ import annotations

import pytest

from runner.engine._procs import REDACTED, bound, redact, safe_text, secret_env_values


@pytest.mark.parametrize(("raw", "leak"), [
    ("Authorization: Bearer abc.def-ghi_123", "abc.def-ghi_123"),
    ("401: Incorrect API key provided: sk-proj-AbCdEf123456", "sk-proj-AbCdEf123456"),
    ("push failed for ghp_0123456789abcdefABCDEF0123", "ghp_0123456789abcdefABCDEF0123"),
    ("api_key=hunter2hunter2 rest", "hunter2hunter2"),
    ('{"password": "correct horse"}', "correct"),
    ("GITHUB_TOKEN: 'x9y8z7'", "x9y8z7"),
    ("cookie eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "eyJzdWIiOiIxIn0"),
    ("key AKIAABCDEFGHIJKLMNOP used", "AKIAABCDEFGHIJKLMNOP"),
    ("fetch https://bob:s3cret@example.com/repo", "s3cret"),
    ("opaque 0f9e8d7c6b5a49382716a5b4c3d2e1f0aa11bb22", "0f9e8d7c6b5a49382716a5b4c3d2e1f0aa11bb22"),
])
def test_token_like_values_are_masked(raw: str, leak: str) -> None:
    masked = redact(raw)
    assert leak not in masked
    assert REDACTED in masked


@pytest.mark.parametrize("text", [
    "exited with status 3 in /home/dev/projects/wfrun/runner/engine/executors",
    "attempt 1b2c3d4e5f607182 of step review is stale",
    "output does not match the expected schema: 'score' is a required property",
])
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_known_secrets_are_masked_longest_first() -> None:
    masked = redact("a=abcd1234 b=abcd1234ef", secrets=["abcd1234", "abcd1234ef", "ab"])
    assert masked == f"a={REDACTED} b={REDACTED}"


def test_bound_keeps_head_or_tail_within_the_byte_limit() -> None:
    # One policy (runner._safety): the cut is marked with "…", counted inside the limit.
    assert bound("x" * 10, 10) == "x" * 10
    assert bound("abcdefghij", 4) == "a…"
    assert bound("abcdefghij", 4, keep="tail") == "…j"
    assert bound("abcdefghij", 8, keep="tail") == "…fghij"


def test_safe_text_redacts_before_cutting() -> None:
    # Cutting first could leave half a secret that no pattern recognises any more.
    secret = "zz-top-secret-value-42"
    text = "x" * 5 + secret
    out = safe_text(text, 15, [secret])
    assert out == "xxxxx" + REDACTED
    assert "top-secret" not in safe_text(text, 12, [secret])


def test_secret_env_values_picks_credential_names() -> None:
    env = {"PATH": "/usr/bin", "OPENAI_API_KEY": "k1", "GH_TOKEN": "t1", "DB_PASSWORD": "p1",
           "HOME": "/root", "EMPTY_SECRET": ""}
    assert sorted(secret_env_values(env)) == ["k1", "p1", "t1"]
