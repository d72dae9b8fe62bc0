"""`wfrun` commands: parse arguments, call one runtime function, render the result."""

from __future__ import annotations

from .app import main

__all__ = ["main"]
