"""The session seam: the host protocol, the `workflow` tool, the session controller
(wfrun's `HostListener`) and the JSONL reference host.

The controller loads on first use: `wfrun mcp` lists the tool (tool.py) before it
loads anything else (runner/host/mcp/serve.py, issue 33)."""

from __future__ import annotations

from runner.lazy import lazy_names

TYPE_CHECKING = False  # no typing at run time (`wfrun mcp`'s start path)
if TYPE_CHECKING:
    from .controller import NotificationOutbox, SessionController, SessionExecutor

__all__ = ["NotificationOutbox", "SessionController", "SessionExecutor"]
__getattr__, __dir__ = lazy_names(__name__, dict.fromkeys(__all__, "controller"))
