"""The launch layer's own error: a start refused by a check before anything was stored.

Apart from the checks themselves (queue.py) so that a fan-out's child launches
(items.py, under the engines) can tell it apart without importing the queue.
"""

from __future__ import annotations

from runner.errors import InputError


class PreflightError(InputError):
    """A start request failed a check; nothing was stored."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
