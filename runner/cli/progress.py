"""Foreground run progress: a live rich view on a terminal, plain lines otherwise.

rich (~60 M instructions to import) is loaded only for a terminal, or when colour is
forced (FORCE_COLOR): a run whose stderr is a pipe or a file, as in scripts, agents'
shells and tests, writes the same lines as plain text with no markup to strip.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    from runner.engine import RunState

#: A line's pieces: (text, rich style or ""). User text is never markup: it is a piece.
Pieces = list[tuple[str, str]]

_MARK = {"ok": ("✓", "green"), "failed": ("✗", "red"), "timed_out": ("⏱", "red"),
         "cancelled": ("⊘", "yellow")}


def wants_rich(stream: TextIO) -> bool:
    """A terminal, or colour asked for: the rich view; else plain lines."""
    if os.environ.get("FORCE_COLOR"):
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


class Progress:
    """An engine observer; all output goes to stderr so stdout stays data."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.console: Console | None = None
        if wants_rich(sys.stderr):
            from rich.console import Console

            self.console = Console(stderr=True)
        self.live: Live | None = None
        self.node_started = 0.0
        self.current: str | None = None
        self.last_update = ""
        self.steps = 0
        self.shown: set[str] = set()  # the notifications printed here, by id

    def __enter__(self) -> Progress:
        if self.console is not None and self.console.is_terminal and not self.quiet:
            from rich.live import Live

            self.live = Live(self._render(), console=self.console, transient=True,
                             refresh_per_second=8, get_renderable=self._render)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None

    def _render(self) -> Text:
        from rich.text import Text

        if self.current is None:
            return Text("")
        # Display only (a live counter on a terminal), never recorded: the real clock.
        elapsed = time.monotonic() - self.node_started
        line = f"▶ {self.current}  {elapsed:5.1f}s  step {self.steps}"
        if self.last_update:
            line += f"  {self.last_update}"
        return Text(line)

    def _print(self, pieces: Pieces) -> None:
        if self.console is None:
            sys.stderr.write("".join(text for text, _ in pieces) + "\n")
            sys.stderr.flush()
            return
        from rich.text import Text

        line = Text()
        for text, style in pieces:
            line.append(text, style=style or None)
        self.console.print(line, highlight=False)

    def __call__(self, event: dict[str, Any], state: RunState) -> None:
        if self.quiet:
            return
        kind, node, p = event["type"], event.get("node"), event.get("payload") or {}
        self.steps = state.steps
        if kind == "node_started":
            # Display only: the start of the live counter above.
            self.current, self.node_started, self.last_update = node, time.monotonic(), ""
        elif kind in ("node_finished", "node_failed"):
            mark, colour = _MARK.get(str(p.get("outcome")), ("?", ""))
            pieces: Pieces = [(mark, colour), (f" {node}  ", ""),
                              (f"{p.get('duration_ms')} ms", "dim")]
            if kind == "node_failed":
                err = p.get("error") or {}
                message = " ".join(str(err.get("message", "")).split())  # one line
                pieces += [("  ", ""), (message[:160], "dim")]
                if p.get("will_retry"):
                    pieces += [("  ", ""), (f"retry in {p.get('retry_in_ms', 0) / 1000:.1f}s",
                                            "yellow")]
            self._print(pieces)
            self.current = None
        elif kind == "update_published":
            data = p.get("data")
            if p.get("type") == "progress" and isinstance(data, dict):
                done, total = data.get("completed"), data.get("total")
                label = data.get("label") or p.get("key")
                self.last_update = f"{label}: {done}/{total}" if total else f"{label}"
        elif kind == "notification_emitted":
            self._print([("!", "cyan"), (f" {p.get('message', '')}", "")])
            self.shown.add(str(p.get("notification_id")))
        elif kind == "include_entered":
            self._print([(f"↘ {node}", "")])
        elif kind == "include_exited":
            self._print([(f"↗ {node} ({p.get('exit')})", "")])
        elif kind in ("run_paused", "run_resumed"):
            self._print([(kind.replace("_", " "), "yellow")])
