"""One policy for text that is persisted or shown: secrets masked, ordinary words kept,
a strict UTF-8 byte bound that never splits a character (runner._safety)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from waiting import DEADLINE

from runner import _safety as safety
from runner._safety import (
    MAX_SAFE_BYTES,
    REDACTED,
    bound,
    one_line,
    redact,
    safe_message,
    secret_env_values,
    secret_values,
)
from runner.engine import _procs as procs
from runner.launch import _safety as launch_safety

pytestmark = pytest.mark.timeout(30)

SETTINGS = settings(max_examples=300, deadline=None, database=None)


@pytest.mark.parametrize(("raw", "leak"), [
    # stderr of a child that printed its environment
    ("npm ERR! env: OPENAI_API_KEY=sk-proj-AbCdEf1234567890 HOME=/root",
     "sk-proj-AbCdEf1234567890"),
    ("OPENAI_API_KEY=hunter2hunter2", "hunter2hunter2"),
    ("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCY", "wJalrXUtnFEMI"),
    # headers, however short the credential
    ("Authorization: Bearer x", "Bearer x"),
    ("authorization: basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    ("curl -H 'x-api-key: abcd1234' https://api.example.com", "abcd1234"),
    ("retrying with bearer abc.def-ghi_123", "abc.def-ghi_123"),
    # credentials inside URLs
    ("could not connect to postgresql://user:pass@host/db", "user:pass"),
    ("fetch https://bob:s3cret@example.com/repo failed", "s3cret"),
    # key=value and JSON / Python-repr pairs, quoted values with spaces included
    ('{"api_key": "abc def ghi", "name": "x"}', "abc def ghi"),
    ("{'password': 'correct horse battery', 'user': 'bob'}", "correct horse battery"),
    ("GITHUB_TOKEN: 'x9y8z7'", "x9y8z7"),
    ("client_secret=s3cr3tvalue&x=1", "s3cr3tvalue"),
    ("db.password = hunter2!!", "hunter2!!"),
    # well-known token shapes, wherever they appear
    ("the key sk-proj-AbCdEfGhIjKlMnOp failed", "sk-proj-AbCdEfGhIjKlMnOp"),
    ("push failed for ghp_0123456789abcdefABCDEF0123", "ghp_0123456789abcdefABCDEF0123"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "11ABCDEFG0123456789"),
    ("slack xoxb-1234567890-abcdef", "xoxb-1234567890-abcdef"),
    ("aws AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc"),
    ("cookie eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "eyJzdWIiOiIxIn0"),
    ("opaque 0f9e8d7c6b5a49382716a5b4c3d2e1f0aa11bb22", "0f9e8d7c6b5a49382716a5b4c3d2e1f0aa11bb22"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAK\n-----END RSA PRIVATE KEY-----", "MIIEow"),
])
def test_every_secret_shape_is_redacted(raw: str, leak: str) -> None:
    out = redact(raw)
    assert leak not in out
    assert REDACTED in out


def test_the_text_around_a_secret_is_kept() -> None:
    assert redact("Authorization: Bearer x") == f"Authorization: Bearer {REDACTED}"
    assert redact("postgresql://user:pass@host/db") == f"postgresql://{REDACTED}@host/db"
    assert redact('{"api_key": "a b c", "n": 1}') == f'{{"api_key": "{REDACTED}", "n": 1}}'
    assert redact("OPENAI_API_KEY=sk-abcdef123 next") == f"OPENAI_API_KEY={REDACTED} next"


@pytest.mark.parametrize("text", [
    "review the change, then start it again",
    "exited with status 3 in /home/dev/projects/wfrun/runner/engine/executors",
    "attempt 1b2c3d4e5f607182 of step review is stale",
    "output does not match the expected schema: 'score' is a required property",
    "max_tokens: 4096 exceeded; token_type=bearer; tokenizer=cl100k",
    "author: Jane Doe; basic auth is off; the bearer token is missing",
    "run pull-request-review-20261201T120000Z-0a1b2c3d failed",
    "the source changed: sha256:" + "ab12" * 16,
    "KeyError: 'task' (sort_key=created_at)",
    "WFRUN_OPENAI_BASE_URL is not set",
])
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_known_secret_values_are_redacted_longest_first_and_short_ones_never() -> None:
    masked = redact("a=abcd1234 b=abcd1234ef c=ab", secrets=["abcd1234", "abcd1234ef", "ab"])
    assert masked == f"a={REDACTED} b={REDACTED} c=ab"


@given(st.text(max_size=200))
@SETTINGS
def test_redaction_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


# -- secret_values: what of a run's input counts as a secret ---------------------------


def test_ordinary_input_values_of_any_length_are_not_secrets() -> None:
    # Issue 9, defect 8: an 8+ character input value used to be redacted from fixed text.
    run_input = {"task": "the change", "notes": ["then start it again"], "count": 12345678}
    secrets = secret_values(run_input)
    assert secrets == ()
    message = "review the change, then start it again"
    assert safe_message(message, secrets) == message


def test_values_under_secret_named_keys_are_secrets_at_any_depth() -> None:
    run_input = {
        "task": "deploy it",
        "github_token": "abcd1234",
        "nested": {"items": [{"password": "hunter22"}, {"label": "ordinary words"}]},
        "creds": {"apiKey": 12345678},
        "credentials": {"user": "robot-account", "extra": ["first-secret"]},
        "Authorization": "Bearer qwerty",
    }
    assert set(secret_values(run_input)) == {
        "abcd1234", "hunter22", "12345678", "robot-account", "first-secret", "Bearer qwerty"}


def test_token_shaped_parts_of_other_input_strings_are_secrets() -> None:
    found = secret_values({"note": "use sk-abcdefghijkl for it", "url": "https://u:pw12@h/x"})
    assert set(found) == {"sk-abcdefghijkl", "u:pw12"}


def test_secret_values_come_longest_first_and_skip_short_ones() -> None:
    found = secret_values({"token": "abc", "secret": "abcdef", "password": "abcdefgh"})
    assert found == ("abcdefgh", "abcdef")


def test_the_key_policy_can_be_replaced() -> None:
    import re

    assert secret_values({"pin": "98765", "token": "t0k3n-value"},
                         keys=re.compile(r"(?i)pin$")) == ("98765",)


def test_secret_env_values_pick_names_that_say_secret() -> None:
    env = {"PATH": "/usr/bin", "OPENAI_API_KEY": "k1", "GH_TOKEN": "t1", "DB_PASSWORD": "p1",
           "HOME": "/root", "PWD": "/work", "SSH_AUTH_SOCK": "/tmp/a", "EMPTY_SECRET": "",
           "max_tokens": "100"}
    assert sorted(secret_env_values(env)) == ["k1", "p1", "t1"]



@given(st.text(alphabet="abcdefgiknoprstuwyAKT_-", max_size=24))
@SETTINGS
def test_the_remembered_verdict_on_a_name_is_the_pattern_s(name: str) -> None:
    """`is_secret_name` remembers its answers by name (it runs twice per run over the
    environment): asked again, or after the memory is full, it answers the same."""
    truth = safety.SECRET_NAME.search(name) is not None
    assert safety.is_secret_name(name) is truth
    assert safety.is_secret_name(name) is truth


def test_the_memory_of_name_verdicts_is_bounded() -> None:
    for i in range(safety._VERDICTS_KEPT + 10):
        safety.is_secret_name(f"VAR_{i}_TOKEN" if i % 2 else f"VAR_{i}")
    assert len(safety._VERDICTS) <= safety._VERDICTS_KEPT
    assert safety.is_secret_name("VAR_1_TOKEN")
    assert not safety.is_secret_name("VAR_2")


# -- bound, one_line, safe_message ----------------------------------------------------

units = st.sampled_from(["a", " ", "\n", "é", "€", "😀", "\u0301"])
texts = st.one_of(st.text(max_size=120), st.lists(units, max_size=120).map("".join))


@given(texts, st.integers(0, 150), st.sampled_from(["head", "tail"]))
@SETTINGS
def test_bound_never_exceeds_max_bytes_and_never_splits_a_character(
        text: str, max_bytes: int, keep: safety.Keep) -> None:
    out = bound(text, max_bytes, keep)
    data = out.encode("utf-8")  # a split character would not encode back
    assert len(data) <= max_bytes
    if len(text.encode("utf-8")) <= max_bytes:
        assert out == text
        return
    kept = out.removesuffix("…") if keep == "head" else out.removeprefix("…")
    # What is kept is whole characters of the original, as many as fit.
    if keep == "head":
        assert text.startswith(kept)
        following = text[len(kept)]
    else:
        assert text.endswith(kept)
        following = text[len(text) - len(kept) - 1]
    room = max_bytes - (3 if max_bytes >= 3 else 0)
    assert len(kept.encode()) + len(following.encode()) > room


def test_bound_marks_the_cut_inside_the_limit() -> None:
    assert bound("abcdefghij", 10) == "abcdefghij"
    assert bound("abcdefghij", 6) == "abc…"
    assert bound("abcdefghij", 6, keep="tail") == "…hij"
    assert bound("€€€", 8) == "€…"  # 3 + 3 bytes; a half € is never kept
    assert bound("abc", 2) == "ab"  # no room for the marker
    assert bound("\ud800abc", 10) == "?abc"  # a lone surrogate cannot be stored as UTF-8
    with pytest.raises(ValueError, match="keep"):
        bound("abc", 1, keep="middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_bytes"):
        bound("abc", -1)


def test_one_line_folds_every_kind_of_whitespace() -> None:
    assert one_line("  first\n\tsecond\r\n  third \u2028 fourth  ") == "first second third fourth"


@pytest.mark.parametrize("unit", ["x", "é", "€", "😀"])
def test_safe_messages_are_one_line_redacted_and_at_most_500_bytes(unit: str) -> None:
    text = "first line\n  api_key=abcdef123\tline " + unit * 1000
    out = safe_message(text)
    assert out.startswith(f"first line api_key={REDACTED} line ")
    assert "\n" not in out
    assert "\t" not in out
    assert "  " not in out
    assert len(out.encode()) <= MAX_SAFE_BYTES == 500
    assert out.endswith("…")


def test_safe_message_redacts_before_it_cuts() -> None:
    # Cutting first could leave half a secret that no pattern recognises any more.
    secret = "zz-top-secret-value-42"
    out = safe_message("x" * 5 + secret, [secret], max_bytes=18)
    assert out == "xxxxx" + REDACTED
    assert "top" not in safe_message("x" * 5 + secret, [secret], max_bytes=12)


def test_a_multi_line_known_secret_is_redacted_before_lines_are_folded() -> None:
    pem = "line one of it\nline two of it"
    assert safe_message(f"key:\n{pem}\nend", [pem]) == f"key: {REDACTED} end"


def test_the_old_modules_are_the_same_policy() -> None:
    for name in ("redact", "bound", "REDACTED"):
        assert getattr(procs, name) is getattr(safety, name)
    for name in ("redact", "bound", "safe_message", "MAX_SAFE_BYTES"):
        assert getattr(launch_safety, name) is getattr(safety, name)
    assert procs.secret_env_values is safety.secret_env_values


ODD = 'p@ss/w0rd+ "quoted" <&> é'
ENCODED = {
    "url": "p%40ss%2Fw0rd%2B%20%22quoted%22%20%3C%26%3E%20%C3%A9",
    "url keeping /": "p%40ss/w0rd%2B%20%22quoted%22%20%3C%26%3E%20%C3%A9",
    "form": "p%40ss%2Fw0rd%2B+%22quoted%22+%3C%26%3E+%C3%A9",
    "base64": "cEBzcy93MHJkKyAicXVvdGVkIiA8Jj4gw6k=",
    "base64 unpadded": "cEBzcy93MHJkKyAicXVvdGVkIiA8Jj4gw6k",
    "base64url": "cEBzcy93MHJkKyAicXVvdGVkIiA8Jj4gw6k=",
    "json": 'p@ss/w0rd+ \\"quoted\\" <&> \\u00e9',
    "json utf-8": 'p@ss/w0rd+ \\"quoted\\" <&> é',
    "jinja tojson": 'p@ss/w0rd+ \\"quoted\\" \\u003c\\u0026\\u003e \\u00e9',
    "html": "p@ss/w0rd+ &quot;quoted&quot; &lt;&amp;&gt; é",
}


@pytest.mark.parametrize("form", sorted(ENCODED))
def test_the_common_encodings_of_a_known_secret_are_masked_too(form: str) -> None:
    # Issue 35.5: `{{ secrets.X | urlencode }}` was recorded in clear.
    text = f"sent {ENCODED[form]} to the server"
    assert safety.mask(text, safety.mask_values([ODD])) == "sent *** to the server"
    assert redact(text, [ODD]) == f"sent {REDACTED} to the server"


def test_the_jinja_filters_encode_as_the_masks_expect() -> None:
    import base64
    import json

    from jinja2 import Environment
    env = Environment(autoescape=False)
    values = safety.mask_values([ODD])
    for template in ("{{ s | urlencode }}", "{{ s | tojson }}", "{{ s | e }}"):
        shown = env.from_string(template).render(s=ODD)
        assert ODD not in safety.mask(shown, values)
        assert safety.mask(shown, values).strip('"') == "***", template
    assert base64.b64encode(ODD.encode()).decode() in values
    assert json.dumps(ODD)[1:-1] in values


def test_an_encoding_equal_to_the_value_is_not_listed_twice() -> None:
    assert safety.mask_values(["plain-token-value"]) == ("cGxhaW4tdG9rZW4tdmFsdWU=",
                                                         "cGxhaW4tdG9rZW4tdmFsdWU",
                                                         "plain-token-value")


@pytest.mark.parametrize("shape", ["ab.", "ab-", "a1.", 'token:"a', "a:b@", "h://a:b"])
def test_redacting_hostile_output_takes_time_in_proportion_to_its_length(shape: str) -> None:
    """A step's output is redacted before it is recorded: a pattern that scanned to the
    end of a run from each word in it (the URL scheme did) made 200 KB of `ab.ab.ab...`
    take minutes. Linear, it takes well under a second; the deadline only catches the
    quadratic case, hundreds of times slower."""
    text = shape * (200_000 // len(shape))
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(redact(text)), daemon=True)
    worker.start()
    worker.join(DEADLINE)
    assert done, f"redacting 200 KB of {shape!r}... did not end within {DEADLINE} s"


# Fragments that assemble into text near every pattern's edge: the secret words in
# any case, separators, quotes, token prefixes, URL pieces, PEM lines and filler.
_FRAGMENTS = st.sampled_from([
    "token", "TOKEN", "Secret", "passwd", "PassPhrase", "credentials", "api_key", "API-KEY",
    "apikey", "access_key", "signing-key", "auth", "Authorization", "proxy-authorization",
    "cookie", "bearer", "Basic", "digest", "=", ":", " ", "\t", "\n", "'", '"', "&", ";",
    ",", "\\", "sk-", "pk-", "rk-", "sk_live_", "pk_test_", "ghp_", "github_pat_", "xoxb-",
    "AKIA", "ASIA", "eyJ", ".", "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----", "https://", "postgres://", "user", "@", "/",
    "abcdefghij0123456789", "A1B2C3D4E5F6G7H8I9J0K1L2M3N4O5P6", "x", "42", "sha256:",
    "[redacted]", "max_tokens", "tokenizer", "author"])


def _every_pattern(text: str) -> str:
    for pattern, masker in safety._masks():
        text = pattern.sub(masker, text)
    return text


@given(st.lists(_FRAGMENTS, max_size=30).map("".join))
@SETTINGS
def test_skipping_the_patterns_a_text_cannot_match_changes_no_result(text: str) -> None:
    """`redact` runs a pattern only when the text holds the literals every match of it
    holds (`_NEEDS`): the result is the one running all of them gives."""
    assert redact(text) == _every_pattern(text)


@given(st.text(max_size=60))
@SETTINGS
def test_non_ascii_text_runs_every_pattern(text: str) -> None:
    assert redact(text) == _every_pattern(text)


def test_a_key_spelled_with_a_letter_only_regex_case_folding_knows_is_still_redacted() -> None:
    """`(?i)` matches the long s (ſ) as an s; `str.lower` does not make it one."""
    assert redact("paſſword=hunter22") == f"paſſword={REDACTED}"
