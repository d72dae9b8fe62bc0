"""`wfrun show RUN --follow`: a live, read-only view that ends when the run ends."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from runner.host.runtime._views import follow

from .tables import run_view

if TYPE_CHECKING:
    from runner.engine import RunReader


def _elapsed(started: str | None) -> str:
    if not started:
        return ""
    from datetime import UTC, datetime

    try:
        t = datetime.fromisoformat(started.replace("Z", "+00:00"))
    except ValueError:
        return ""
    # Display only: how long a running node has run, as the person watching sees it.
    return f"{(datetime.now(UTC) - t).total_seconds():.1f}s"


def render(view: dict[str, Any]) -> RenderableType:
    parts: list[RenderableType] = [Text.from_markup(
        f"[bold]{escape(view['run_id'])}[/]  {escape(str(view['workflow']))}  "
        f"[blue]{view['status']}[/]" + ("  (paused)" if view.get("paused") else ""))]
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("NODE", "KIND", "OUTCOME", "TIME"):
        table.add_column(col)
    for e in view["timeline"][-15:]:
        if e.get("outcome") is None:
            took = _elapsed(e.get("started_at"))
            outcome = "[yellow]running[/]"
        else:
            took = f"{e.get('duration_ms')} ms"
            outcome = {"ok": "[green]ok[/]"}.get(str(e["outcome"]), f"[red]{e['outcome']}[/]")
        table.add_row(escape(str(e["node"])), escape(str(e.get("kind") or "")), outcome, took)
    parts.append(table)
    for bar in view.get("progress", []):
        total, done = bar.get("total"), bar.get("completed")
        eta = f"  ETA {bar['eta_s']:.0f}s" if bar.get("eta_s") is not None else ""
        line = Table.grid(padding=(0, 1))
        line.add_row(Text(str(bar["label"])),
                     ProgressBar(total=float(total) if total else None,
                                 completed=float(done or 0), width=30),
                     Text(f"{done}/{total}{eta}" if total else f"{done}"))
        parts.append(line)
    return Group(*parts)


def follow_run(runs_dir: Path | RunReader, run_id: str, *, as_json: bool = False
               ) -> dict[str, Any]:
    # runs_dir: a folder or the workspace's reader (bundles in the database)
    if as_json:
        # One JSON view per change, one per line (JSON Lines), ending with the final view.
        return follow(runs_dir, run_id, lambda v: print(json.dumps(v), flush=True))
    latest: dict[str, Any] = {}
    stop = threading.Event()
    with Live(Text(""), refresh_per_second=8, transient=True) as live:
        def update(view: dict[str, Any]) -> None:
            latest.clear()
            latest.update(view)
            live.update(render(view))

        def tick() -> None:
            while not stop.wait(0.25):
                if latest:
                    live.update(render(latest))  # elapsed time keeps moving

        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            final = follow(runs_dir, run_id, update)
        finally:
            stop.set()
            ticker.join(timeout=1)
            time.sleep(0)  # display only: yield so the live view's last refresh lands
    run_view(final)
    return final
