"""The session seam: the host protocol, the `workflow` tool, the session controller
(wfrun's `HostListener`) and the JSONL reference host."""

from __future__ import annotations

from .controller import NotificationOutbox, SessionController, SessionExecutor

__all__ = ["NotificationOutbox", "SessionController", "SessionExecutor"]
