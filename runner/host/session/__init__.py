"""The session seam: the host protocol, the `workflow` tool, the session controller
(wfrun's `HostListener`) and the JSONL reference host.

The controller loads on first use: `wfrun mcp` lists the tool (tool.py) before it
loads anything else (runner/host/mcp/_serve.py, issue 33)."""

from __future__ import annotations

from runner._lazy import lazy_names

TYPE_CHECKING = False  # no typing at run time (`wfrun mcp`'s start path)
if TYPE_CHECKING:
    from ._controller import SessionController

__all__ = ["SessionController"]
__getattr__, __dir__ = lazy_names(__name__, dict.fromkeys(__all__, "_controller"))
