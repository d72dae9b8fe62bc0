"""Redaction and byte bounds: the one policy for text that is persisted or shown (DESIGN §9).

Everything that leaves a run for the store, a log line, a terminal or a model's
context passes through here: `redact` masks credentials, `one_line` folds
whitespace, `bound` cuts to a strict number of UTF-8 bytes, and `safe_message`
does all three in the only safe order (redact before cutting, so a cut can never
leave half a secret that no pattern recognises any more).

What counts as a secret is deliberately narrow: a value that *looks* like a
credential (a known token shape, the value of a key whose name says secret, a
password inside a URL) or a value the caller knows to be one. Ordinary words are
never masked, not even ones that happen to occur in a run's input: a message that
says "review the change" stays readable when the input was ``{"task": "the
change"}``. `secret_values` picks, from a structured value such as a run's input,
only the strings that are secrets by the same rules.

This module imports only the standard library so every layer, the store included,
may use it.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Literal
from urllib.parse import quote, quote_plus

__all__ = [
    "MASK",
    "MAX_SAFE_BYTES",
    "MIN_SECRET_CHARS",
    "REDACTED",
    "SECRET_NAME",
    "Keep",
    "bound",
    "encodings",
    "is_secret_name",
    "mask",
    "mask_json",
    "mask_values",
    "one_line",
    "redact",
    "safe_message",
    "secret_env_values",
    "secret_values",
    "without_secrets",
]

MAX_SAFE_BYTES = 500
#: Known secret values shorter than this are never replaced: they match ordinary text.
MIN_SECRET_CHARS = 4
REDACTED = "[redacted]"
#: What a *known* secret value (a declared secret, a writeOnly input, a secret-named
#: environment variable) becomes, wherever it occurs: GitHub Actions' mask.
MASK = "***"
ELLIPSIS = "…"
_ELLIPSIS_BYTES = len(ELLIPSIS.encode())

Keep = Literal["head", "tail"]

# --- what a secret is called ------------------------------------------------------
# A name says secret when it *ends* in one of these words (case-insensitive), so
# GITHUB_TOKEN, apiKey, client_secret, DB_PASSWORD and Authorization do, while
# max_tokens, tokenizer, author, PWD, sort_key and SSH_AUTH_SOCK do not.
_SECRET_WORDS = (
    r"token|secrets?|password|passwd|passphrase|credentials?|"
    r"api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key|signing[_-]?key|"
    r"encryption[_-]?key|auth|authorization|cookie"
)
#: Matches a key or variable name that says its value is secret (use `.search`).
SECRET_NAME = re.compile(rf"(?i)(?:{_SECRET_WORDS})$")

# A key inside free text: starts at a boundary, ends in a secret word.
_KEY = rf"(?<![A-Za-z0-9_-])([A-Za-z0-9_-]*?(?:{_SECRET_WORDS}))(?![A-Za-z0-9_-])"

# --- what a secret looks like -----------------------------------------------------
# Each entry: a pattern and the name of the group that holds the secret; only that
# group is replaced, so the surrounding text ("Authorization: Bearer ", "key=") stays.
_SECRET_GROUP = "s"
@functools.cache
def _patterns() -> tuple[re.Pattern[str], ...]:
    # Compiled on first use: a few ms that most commands (`wfrun status`, `--help`)
    # never need to pay at start-up (issue 15, cold start).
    return (
        # PEM private key blocks (multi-line; before whitespace is folded).
        re.compile(r"(?P<s>-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?"
                   r"(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z))", re.DOTALL),
        # "api_key": "..." / password='...' : the whole quoted value, spaces included.
        re.compile(rf"(?i){_KEY}(['\"]?[ \t]*[:=][ \t]*)(?P<q>['\"])"
                   rf"(?P<s>(?:\\.|(?!(?P=q))[^\\\n])+)(?P=q)"),
        # Authorization headers: whatever follows the scheme is the credential, however short.
        re.compile(r"(?i)(?<![A-Za-z0-9_-])(?:proxy-)?authorization[ \t]*[:=][ \t]*"
                   r"(?:(?:bearer|basic|token|digest|negotiate)[ \t]+"
                   r"|(?!(?:bearer|basic|token|digest|negotiate)\b))"
                   r"(?!\[redacted\])(?P<s>[^\s\"',;]+)"),
        # Bearer/basic credentials elsewhere, when they look like one (a digit or symbol, or long).
        re.compile(r"(?i)\b(?:bearer|basic)[ \t]+(?!\[redacted\])"
                   r"(?P<s>(?=[A-Za-z]*[0-9._~+/=-]|[A-Za-z]{20})[A-Za-z0-9._~+/=-]{4,})"),
        # KEY=value / key: value (env files, log lines, CLI flags).
        re.compile(rf"(?i){_KEY}(['\"]?[ \t]*[:=][ \t]*)(?!\[redacted\])"
                   rf"(?!(?:bearer|basic)\b)(?P<s>[^\s\"',;&]{{3,}})"),
        # Well-known token shapes.
        re.compile(r"\b(?P<s>sk-[A-Za-z0-9_-]{6,}|(?:pk|rk)-[A-Za-z0-9_-]{10,})"),
        re.compile(r"\b(?P<s>(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{10,})"),
        re.compile(r"\b(?P<s>gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{20,})"),
        re.compile(r"\b(?P<s>xox[abeprs]-[A-Za-z0-9-]{8,})"),
        re.compile(r"\b(?P<s>(?:AKIA|ASIA)[0-9A-Z]{16})\b"),
        re.compile(r"\b(?P<s>eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*)"),
        # Long opaque runs of letters *and* digits look like keys. Words, paths and run ids
        # (short segments between dashes) do not match; nor do our own `sha256:` digests.
        re.compile(r"(?<![A-Za-z0-9])(?<!sha256:)(?<!sha1:)"
                   r"(?P<s>(?=[A-Za-z]*[0-9])(?=[0-9]*[A-Za-z])[A-Za-z0-9]{32,})(?![A-Za-z0-9])"),
        # Credentials inside URLs: scheme://user:password@host.
        # The scheme is bounded: unbounded, a run like "ab.ab.ab..." was scanned to its
        # end from every word start (quadratic: 64 KB of such output took seconds).
        re.compile(r"(?i)\b[a-z][a-z0-9+.-]{0,63}://(?!\[redacted\])"
                   r"(?P<s>[^/\s:@]+:[^/\s@]+)@"),
    )


def _masker(pattern: re.Pattern[str]) -> Callable[[re.Match[str]], str]:
    def mask(match: re.Match[str]) -> str:
        start, end = match.span(_SECRET_GROUP)
        offset = match.start()
        whole = match.group(0)
        return whole[: start - offset] + REDACTED + whole[end - offset:]
    return mask


# What each pattern of `_patterns` (same order) cannot match without: groups of
# lowercase literals, each group needing one of its literals in the text. A pattern
# whose needs an ASCII text lacks is not run: most output names no secret word, and
# the two key patterns scanned every word start (~1 µs a character each). Each
# literal is part of every match (the secret words below cover `_SECRET_WORDS`), so
# a skipped pattern could not have matched; a replacement only inserts `[redacted]`,
# which holds none of them, so checking the text as it is before each pattern is
# exact. Non-ASCII text runs every pattern: `(?i)` folds some letters (`ſ`, `K`)
# that `str.lower` does not. None: always run.
_WORD_PARTS = ("token", "secret", "pass", "credential", "key", "auth", "cookie")
_SEPARATORS = (":", "=")
_NEEDS: tuple[tuple[tuple[str, ...], ...] | None, ...] = (
    (("-----begin",),),                              # PEM block
    (_WORD_PARTS, _SEPARATORS, ("'", '"')),          # "api_key": "..."
    (("authorization",), _SEPARATORS),               # Authorization: ...
    (("bearer", "basic"),),                          # Bearer xyz
    (_WORD_PARTS, _SEPARATORS),                      # KEY=value
    (("sk-", "pk-", "rk-"),),
    (("_live_", "_test_"),),
    (("gh", "github_pat_"),),                        # ghp_..., github_pat_...
    (("xox",),),
    (("akia", "asia"),),
    (("eyj",),),                                     # a JWT
    None,                                            # long opaque runs
    (("://",),),                                     # URL credentials
)


def _needed(needs: tuple[tuple[str, ...], ...] | None, low: str) -> bool:
    return needs is None or all(any(part in low for part in group) for group in needs)


@functools.cache
def _masks() -> tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...]:
    return tuple((pattern, _masker(pattern)) for pattern in _patterns())


def encodings(value: str) -> set[str]:
    """The forms a template filter or a command commonly turns a secret into: URL-encoded
    (path, query and form styles), base64 (standard and URL-safe, padded or not),
    JSON-escaped (ASCII, UTF-8 and Jinja's `tojson`) and HTML-escaped (both spellings).
    Masking by exact value alone recorded `{{ secrets.X | urlencode }}` in clear."""
    import base64  # only a run with secrets asks: html loads its entity table on import
    import html

    data = value.encode("utf-8", errors="replace")
    found = {quote(value, safe=""), quote(value, safe="/"), quote_plus(value, safe=""),
             quote_plus(value, safe="/"), html.escape(value),
             # markupsafe's spelling, which Jinja's `escape` filter uses
             html.escape(value).replace("&quot;", "&#34;").replace("&#x27;", "&#39;")}
    for b64 in (base64.b64encode(data), base64.urlsafe_b64encode(data)):
        text = b64.decode("ascii")
        found |= {text, text.rstrip("=")}
    for dumped in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        found.add(dumped[1:-1])
        found.add(dumped[1:-1].replace("<", "\\u003c").replace(">", "\\u003e")
                  .replace("&", "\\u0026").replace("'", "\\u0027"))
    found.discard(value)
    return found


def _known(values: Iterable[str]) -> list[str]:
    """Each known secret and its encodings, longest first (so a longer form is replaced
    before a shorter one that it contains)."""
    found: set[str] = set()
    for value in values:
        if len(value) >= MIN_SECRET_CHARS:
            found.add(value)
            found |= encodings(value)
    return sorted(found, key=lambda s: (-len(s), s))


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Mask the known `secrets` (exact values and their common encodings, longest
    first) and anything that looks like a credential. Ordinary words are left alone;
    see the module docstring."""
    if not text:  # a silent step's stderr: 13 pattern passes over nothing (~15 µs)
        return text
    for secret in _known(secrets):
        text = text.replace(secret, REDACTED)
    if not text.isascii():
        for pattern, mask in _masks():
            text = pattern.sub(mask, text)
        return text
    low = text.lower()
    for (pattern, mask), needs in zip(_masks(), _NEEDS, strict=True):
        if _needed(needs, low):
            masked = pattern.sub(mask, text)
            if masked != text:
                text, low = masked, masked.lower()
    return text


def mask_values(values: Iterable[str]) -> tuple[str, ...]:
    """The strings `mask` replaces for these known secrets, longest first: each value
    with its common `encodings` and, for a multi-line one, each of its lines (a log
    may show one line of a key file on its own). Values and lines under
    `MIN_SECRET_CHARS` are left out; callers refuse such secrets rather than mask
    ordinary text."""
    found: list[str] = []
    for value in values:
        found.append(value)
        found.extend(line.strip() for line in value.splitlines())
    return tuple(_known(found))


def mask(text: str, values: tuple[str, ...]) -> str:
    """`text` with every occurrence of each of `values` (from `mask_values`) as `MASK`."""
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return text


def unsafe_tail(text: str, values: tuple[str, ...]) -> int:
    """How many trailing characters of `text` could begin one of `values` (a secret
    split across two chunks of a stream): only those wait for the next chunk, so
    ordinary output is never delayed."""
    longest = max((len(v) for v in values), default=1) - 1
    for k in range(min(longest, len(text)), 0, -1):
        suffix = text[-k:]
        if any(v.startswith(suffix) for v in values):
            return k
    return 0


def mask_json(value: object, values: tuple[str, ...]) -> object:
    """A decoded JSON value with `mask` applied to every string in it, keys included."""
    if not values:
        return value
    if isinstance(value, str):
        return mask(value, values)
    if isinstance(value, Mapping):
        return {mask(str(k), values): mask_json(v, values) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_json(v, values) for v in value]
    return value


def one_line(text: str) -> str:
    """Fold every run of whitespace (newlines and tabs included) to one space."""
    return " ".join(text.split())


def bound(text: str, max_bytes: int = MAX_SAFE_BYTES, keep: Keep = "head", *,
          mark: bool = True) -> str:
    """At most `max_bytes` UTF-8 bytes of `text`, cut at a character boundary.

    A cut text keeps its head (or its tail, for output whose end is what matters)
    and marks the cut with "…", counted inside the limit (`mark=False`: no mark, for
    a field whose readers compare its text). A character that cannot be encoded (a
    lone surrogate) becomes "?", so the result always encodes.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be at least 0, got {max_bytes}")
    if keep not in ("head", "tail"):
        raise ValueError(f"keep must be 'head' or 'tail', got {keep!r}")
    data = text.encode("utf-8", errors="replace")
    if len(data) <= max_bytes:
        return data.decode("utf-8")
    marker = ELLIPSIS if mark and max_bytes >= _ELLIPSIS_BYTES else ""
    room = max_bytes - len(marker.encode())
    if keep == "head":
        # A partial character at the cut is invalid UTF-8 and is dropped.
        return data[:room].decode("utf-8", errors="ignore") + marker
    return marker + data[len(data) - room:].decode("utf-8", errors="ignore")


def safe_message(text: str, secrets: Iterable[str] = (), max_bytes: int = MAX_SAFE_BYTES,
                 *, keep: Keep = "head") -> str:
    """Redacted, one line, at most `max_bytes` UTF-8 bytes: the form of every message
    that is persisted or shown. Redaction comes first, before anything is cut."""
    return bound(one_line(redact(text, secrets)), max_bytes, keep)


# --- picking secrets out of structured values -----------------------------------------

# The default pattern's answers, by name: it is anchored at the end, so `search` tries
# it at every position (1-5 µs per name), and the same names come back all the time
# (every run scans this process's ~35 environment variable names twice: ~70 µs each).
_VERDICTS: dict[str, bool] = {}
_VERDICTS_KEPT = 4096


def is_secret_name(name: str, keys: re.Pattern[str] = SECRET_NAME) -> bool:
    """True when a key or variable name says its value is a secret."""
    if keys is not SECRET_NAME:
        return keys.search(name) is not None
    verdict = _VERDICTS.get(name)
    if verdict is None:
        if len(_VERDICTS) >= _VERDICTS_KEPT:
            _VERDICTS.clear()
        verdict = _VERDICTS[name] = SECRET_NAME.search(name) is not None
    return verdict


def secret_values(value: object, *, keys: re.Pattern[str] = SECRET_NAME) -> tuple[str, ...]:
    """The strings in `value` (a decoded JSON value) that are secrets, longest first.

    Those are every string (or integer) anywhere under a key whose name says secret
    (`keys`, searched in each mapping key at any depth), and the parts of any other
    string that have a credential's shape. Ordinary strings are not collected, so
    passing the result to `redact` masks secrets that a message echoes and nothing
    else. Values shorter than `MIN_SECRET_CHARS` are left out.
    """
    found: set[str] = set()
    stack: list[tuple[object, bool]] = [(value, False)]
    while stack:
        item, secret = stack.pop()
        if isinstance(item, str):
            if secret:
                found.add(item)
            else:
                found.update(_shaped_secrets(item))
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if secret:
                found.add(str(item))
        elif isinstance(item, Mapping):
            for key, child in item.items():
                named = isinstance(key, str) and is_secret_name(key, keys)
                stack.append((child, secret or named))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, secret) for child in item)
    return tuple(sorted((s for s in found if len(s) >= MIN_SECRET_CHARS),
                        key=lambda s: (-len(s), s)))


def secret_env_values(env: Mapping[str, str]) -> list[str]:
    """Values of environment variables whose names say secret, for `redact`."""
    return [value for name, value in env.items() if value and is_secret_name(name)]


def without_secrets(env: Mapping[str, str], values: Iterable[str] = (), *,
                    keep: Iterable[str] = ()) -> dict[str, str]:
    """`env` less what a model-driven process must not inherit: every variable whose
    name says secret, and every variable whose value holds one of the known secret
    `values` (a declared secret read from the environment under any name). Names in
    `keep` pass all the same: the user's explicit choice (an agent CLI's own key)."""
    known = [v for v in values if len(v) >= MIN_SECRET_CHARS]
    kept = set(keep)
    return {name: value for name, value in env.items()
            if name in kept or not (is_secret_name(name) or any(v in value for v in known))}


def _shaped_secrets(text: str) -> list[str]:
    return [m.group(_SECRET_GROUP) for pattern in _patterns() for m in pattern.finditer(text)]
