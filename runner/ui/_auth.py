"""Who may read and who may act: the UI's token, its file, and the CSRF rule.

Every `wfrun ui` has a token, printed in its URL. Reads need it only when it was
asked for (`--token`, `WFRUN_UI_TOKEN`) or the address is not loopback; every
action (a POST under /api/) needs it always, as a Bearer header or as the
HttpOnly cookie the URL sets. A token made up here is kept in a private file
(0600 in a 0700 folder, `.wfrun/state/ui-token`) so a restarted UI keeps its
URL and a script on this machine can read it for its Bearer header.

CSRF: a cookie rides along on any request the browser makes, a Bearer header
only on those a script of this origin makes. So a cookie-authenticated POST must
also carry `X-Wfrun-Csrf` with the page's CSRF value (derived from the token with
HMAC, handed to pages only when the request itself carried the cookie) and, when
the browser sends an `Origin`, one naming this server. A cross-site form cannot
set the header and a cross-site script cannot read the value (no CORS), so both
hold even where SameSite=Strict is not honoured (docs/ui.md#actions).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runner._private import private_dirs
from runner.errors import OperationFailed
from runner.host.runtime._audit import local_user

COOKIE = "wfrun_ui_token"
CSRF_HEADER = "x-wfrun-csrf"
TOKEN_FILE = "ui-token"
FILE_MODE = 0o600

Via = Literal["cookie", "bearer"]


@dataclass(frozen=True)
class Credential:
    """How a request proved it holds the token."""

    via: Via


def same(given: str, token: str) -> bool:
    # As bytes: compare_digest refuses a str with non-ASCII characters (a TypeError, a 500).
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode())


def csrf_value(token: str) -> str:
    """The CSRF value pages carry: bound to the token, useless without the cookie."""
    return hmac.new(token.encode(), b"wfrun-ui-csrf", hashlib.sha256).hexdigest()


def actor_of(token: str) -> str:
    """Who an action is recorded as: the token's fingerprint (never the token) and the
    local user the UI runs as."""
    digest = hashlib.sha256(token.encode()).hexdigest()[:12]
    return f"token:{digest} ({local_user()})"


def credential(*, cookie: str, authorization: str, token: str) -> Credential | None:
    bearer = authorization[7:] if authorization[:7].lower() == "bearer " else ""
    if bearer and same(bearer, token):
        return Credential("bearer")
    if cookie and same(cookie, token):
        return Credential("cookie")
    return None


def csrf_refusal(*, via: Via, token: str, header: str, origin: str | None,
                 own_origins: tuple[str, ...]) -> str | None:
    """Why a POST fails the CSRF check, or None when it passes. Bearer requests are
    exempt: a browser never adds that header by itself."""
    if via == "bearer":
        return None
    if origin is not None and origin not in own_origins:
        return f"cross-site request refused (Origin {origin[:100]})"
    if not header or not same(header, csrf_value(token)):
        return ("missing or wrong X-Wfrun-Csrf header: post from the console page, or "
                "send the token as Authorization: Bearer")
    return None


def load_or_make_token(folder: Path) -> str:
    """The token in `folder/ui-token`, made (0600 in 0700) when there is none yet."""
    path = folder / TOKEN_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
        if len(text) >= 16 and text.isascii() and text.isprintable():
            if path.stat().st_mode & 0o077:
                os.chmod(path, FILE_MODE)  # made readable by others since: tighten
            return text
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError) as exc:
        raise OperationFailed(f"cannot read the UI token file {path}: "
                              f"{getattr(exc, 'strerror', None) or exc}; remove it and "
                              "start wfrun ui again") from None
    token = secrets.token_urlsafe(24)
    try:
        private_dirs(folder)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), FILE_MODE)
            fh.write(token + "\n")
    except OSError as exc:
        raise OperationFailed(f"cannot write the UI token file {path}: {exc.strerror}; "
                              "pass --token instead") from None
    return token
