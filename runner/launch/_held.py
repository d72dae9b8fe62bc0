"""What a runner holds back from the store: writeOnly input and known secrets.

writeOnly input fields of launches queued here never reach the store, only this
process's memory until the launch activates (docs/secrets.md). With the secrets
this runner was given (`--secret`, the environment) they are redacted from every
message the launch layer persists or shows a model (`safe`), and handed to the
engine with the run's secret source (`Engines.secret_source`, engines.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runner._safety import safe_message, secret_values
from runner.engine._secrets import SecretSource


class HeldInput:
    """One runner's held values. `base` is the runner's secret source (read at each
    use: a caller may swap it before a run)."""

    def __init__(self, secrets: tuple[str, ...], base: Callable[[], SecretSource]) -> None:
        self.secrets = secrets
        self._base = base
        self.values: dict[str, dict[str, Any]] = {}  # by run id

    def safe(self, text: str, run_input: Any = None) -> str:
        """Redacted, bounded text. Secrets are redacted, not ordinary words: of the run
        input, values that look like secrets (by key name or shape) and single-token
        values of 8+ characters (an id, a key, a path) are masked where a message echoes
        them; phrases ("the change") are left alone."""
        known = [str(v) for held in self.values.values() for v in held.values()]
        known += list(self._base().given.values())
        return safe_message(text, self.secrets + tuple(known) + secret_values(run_input)
                            + token_values(run_input))


def token_values(value: Any, min_chars: int = 8) -> tuple[str, ...]:
    """Single-token strings of `min_chars` or more in `value`, longest first."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if len(item) >= min_chars and not any(c.isspace() for c in item):
                found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return tuple(sorted(found, key=len, reverse=True))
