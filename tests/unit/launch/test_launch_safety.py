"""Safe error text: redaction of token-like values, one line, a strict byte bound."""

from __future__ import annotations

import pytest

from runner.launch._safety import MAX_SAFE_BYTES, REDACTED, bound, redact, safe_message

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(("raw", "secret"), [
    ("Authorization: Bearer abc123def456ghi", "abc123def456ghi"),
    ("basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    ("api_key=live_51Habcdefgh", "live_51Habcdefgh"),
    ("OPENAI_API_KEY: xyz987654", "xyz987654"),
    ('{"password": "hunter2!!"}', "hunter2!!"),
    ("client_secret=s3cr3tvalue&x=1", "s3cr3tvalue"),
    ("the key sk-proj-AbCdEfGhIjKlMnOp failed", "sk-proj-AbCdEfGhIjKlMnOp"),
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123", "ghp_abcdefghijklmnopqrstuvwxyz0123"),
    ("slack xoxb-1234567890-abcdef", "xoxb-1234567890-abcdef"),
    ("aws AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
    ("jwt eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2Q", "eyJhbGciOiJIUzI1"),
    ("fetch https://bob:pa55word@example.com/x failed", "pa55word"),
])
def test_token_like_values_are_redacted(raw: str, secret: str) -> None:
    out = redact(raw)
    assert secret not in out
    assert REDACTED in out


def test_known_secrets_are_redacted_and_useful_text_is_kept() -> None:
    out = safe_message("cannot reach the provider with key opensesame-42 (HTTP 401); check "
                       "WFRUN_OPENAI_BASE_URL", secrets=("opensesame-42", "abc"))
    assert out == ("cannot reach the provider with key [redacted] (HTTP 401); check "
                   "WFRUN_OPENAI_BASE_URL")
    assert redact("too short: abc", ("abc",)) == "too short: abc"  # <4 chars never matched


@pytest.mark.parametrize("unit", ["x", "é", "€", "😀"])
def test_messages_are_one_line_and_at_most_500_bytes(unit: str) -> None:
    text = "first line\n  second\tline " + unit * 1000
    out = safe_message(text)
    assert "\n" not in out
    assert "\t" not in out
    assert "  " not in out
    assert len(out.encode()) <= MAX_SAFE_BYTES == 500
    assert out.startswith("first line second line ")
    assert out.endswith("…")
    out.encode().decode()  # still valid UTF-8: cut at a character boundary
    assert bound("short") == "short"
    assert len(bound("y" * 600, 50).encode()) <= 50
