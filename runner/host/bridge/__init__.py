"""`wfrun bridge`: the session host protocol as JSON-RPC lines over stdio (docs/hosts.md)."""

from __future__ import annotations

from ._server import DEFAULT_SETTLE_TIMEOUT, serve_stdio

__all__ = ["DEFAULT_SETTLE_TIMEOUT", "serve_stdio"]
