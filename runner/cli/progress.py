"""Foreground run progress: a live rich view on a terminal, plain lines otherwise."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from runner.engine import RunState

_MARK = {"ok": "[green]✓[/]", "failed": "[red]✗[/]", "timed_out": "[red]⏱[/]",
         "cancelled": "[yellow]⊘[/]"}


class Progress:
    """An engine observer; all output goes to stderr so stdout stays data."""

    def __init__(self, quiet: bool = False) -> None:
        self.console = Console(stderr=True)
        self.quiet = quiet
        self.live: Live | None = None
        self.node_started = 0.0
        self.current: str | None = None
        self.last_update = ""
        self.steps = 0
        self.shown: set[str] = set()  # the notifications printed here, by id

    def __enter__(self) -> Progress:
        if self.console.is_terminal and not self.quiet:
            self.live = Live(self._render(), console=self.console, transient=True,
                             refresh_per_second=8, get_renderable=self._render)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None

    def _render(self) -> Text:
        if self.current is None:
            return Text("")
        # Display only (a live counter on a terminal), never recorded: the real clock.
        elapsed = time.monotonic() - self.node_started
        line = f"▶ {self.current}  {elapsed:5.1f}s  step {self.steps}"
        if self.last_update:
            line += f"  {self.last_update}"
        return Text(line)

    def __call__(self, event: dict[str, Any], state: RunState) -> None:
        if self.quiet:
            return
        kind, node, p = event["type"], event.get("node"), event.get("payload") or {}
        self.steps = state.steps
        if kind == "node_started":
            # Display only: the start of the live counter above.
            self.current, self.node_started, self.last_update = node, time.monotonic(), ""
        elif kind in ("node_finished", "node_failed"):
            mark = _MARK.get(str(p.get("outcome")), "?")
            ms = p.get("duration_ms")
            extra = ""
            if kind == "node_failed":
                err = p.get("error") or {}
                message = " ".join(str(err.get("message", "")).split())  # one line
                extra = f"  [dim]{escape(message[:160])}[/]"
                if p.get("will_retry"):
                    extra += f"  [yellow]retry in {p.get('retry_in_ms', 0) / 1000:.1f}s[/]"
            self.console.print(f"{mark} {escape(str(node))}  [dim]{ms} ms[/]{extra}",
                               highlight=False)
            self.current = None
        elif kind == "update_published":
            data = p.get("data")
            if p.get("type") == "progress" and isinstance(data, dict):
                done, total = data.get("completed"), data.get("total")
                label = data.get("label") or p.get("key")
                self.last_update = f"{label}: {done}/{total}" if total else f"{label}"
        elif kind == "notification_emitted":
            self.console.print(f"[cyan]![/] {escape(str(p.get('message', '')))}",
                               highlight=False)
            self.shown.add(str(p.get("notification_id")))
        elif kind == "include_entered":
            self.console.print(f"↘ {escape(str(node))}", highlight=False)
        elif kind == "include_exited":
            self.console.print(f"↗ {escape(str(node))} ({escape(str(p.get('exit')))})",
                               highlight=False)
        elif kind in ("run_paused", "run_resumed"):
            self.console.print(f"[yellow]{kind.replace('_', ' ')}[/]")
