"""`wfrun bridge`: the session host protocol as JSON-RPC lines over stdio (docs/hosts.md)."""

from __future__ import annotations

from .server import BridgeServer, RemoteHost, serve_stdio
from .wire import PROTOCOL_VERSION

__all__ = ["PROTOCOL_VERSION", "BridgeServer", "RemoteHost", "serve_stdio"]
