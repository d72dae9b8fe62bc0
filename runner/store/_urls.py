"""Store URLs without a database driver: recognizing a Postgres URL and masking
its password (`***`) for every message, view and log line."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit


def is_postgres_url(value: str) -> bool:
    return value.startswith(("postgresql://", "postgres://"))


def mask_url(url: str) -> str:
    """The URL with any password replaced by `***` (also `password=` parameters)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://***"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        netloc = f"{userinfo}@{host}"
    query = re.sub(r"(?i)(password=)[^&]*", r"\1***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
