"""Safe error text: redacted, one line, byte-bounded (DESIGN §6, §9).

Anything persisted in the store or shown to a model passes through `safe_message`:
token-like values are replaced, the text is folded to one line and cut to a
strict byte limit. Raw input, prompts and stack traces never get this far: callers
pass a message they composed, and this is the last line of defence.
"""

from __future__ import annotations

import re

MAX_SAFE_BYTES = 500
REDACTED = "[redacted]"

_PATTERNS = [
    # Authorization headers and bearer tokens.
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"),
    # key=value / key: value pairs whose key names a secret.
    re.compile(r"(?i)\b([A-Za-z0-9_-]*(?:token|secret|password|passwd|api[_-]?key|apikey|"
               r"credential|auth)[A-Za-z0-9_-]*)(\s*[=:]\s*|\"\s*:\s*\")([^\s\"',;&]{3,})"),
    # Well-known token shapes.
    re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{10,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    # URLs with embedded credentials.
    re.compile(r"(?i)([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@"),
]


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Replace token-like values (and any known secret strings) with a marker."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    text = _PATTERNS[0].sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _PATTERNS[1].sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    for pattern in _PATTERNS[2:7]:
        text = pattern.sub(REDACTED, text)
    text = _PATTERNS[7].sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    return text


def bound(text: str, max_bytes: int = MAX_SAFE_BYTES) -> str:
    line = " ".join(text.split())
    data = line.encode()
    if len(data) <= max_bytes:
        return line
    return data[: max_bytes - 3].decode(errors="ignore") + "…"


def safe_message(text: str, secrets: tuple[str, ...] = (), max_bytes: int = MAX_SAFE_BYTES
                 ) -> str:
    return bound(redact(text, secrets), max_bytes)
