"""The `cc` fixture (claude_kit.py) for the real-Claude-Code tests."""

from __future__ import annotations

from claude_kit import busy_cores, cc

__all__ = ["busy_cores", "cc"]
