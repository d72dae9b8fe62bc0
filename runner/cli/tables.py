"""rich renderings for the terminal (tables, colours honour NO_COLOR)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def workflow_table(rows: list[dict[str, Any]], project: Path | None) -> None:
    console = Console()
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("NAME", "SOURCE", "VALID", "PATH"):
        table.add_column(col)
    for row in rows:
        valid = "[green]yes[/]" if row["valid"] else "[red]no[/]"
        name = row["name"]
        source = row["source"]
        if row["shadowed_by"]:
            name = f"[dim]{name}[/]"
            source = f"[dim]{source} (shadowed by {row['shadowed_by']})[/]"
        table.add_row(name, source, valid, escape(str(row["path"])))
    console.print(table)
    if project is None:
        Console(stderr=True).print(
            "[dim]no .wfrun/ folder here or above; showing user and built-in workflows[/]")


def runs_table(rows: list[Any]) -> None:
    console = Console()
    if not rows:
        Console(stderr=True).print("no runs yet")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("RUN", no_wrap=True, overflow="fold", min_width=len(rows[0].run_id))
    for col in ("WORKFLOW", "STATUS", "STARTED", "DURATION", "NODE"):
        table.add_column(col)
    for r in rows:
        dur = f"{r.duration_s:.1f}s" if r.duration_s is not None else "-"
        table.add_row(r.run_id, r.workflow, _status(r.status), r.started_at or "-", dur,
                      r.current_node or "")
    console.print(table)


_STATUS_STYLE = {"completed": "green", "failed": "red", "timed_out": "red",
                 "cancelled": "yellow", "waiting": "cyan", "running": "blue", "paused": "yellow"}


def _status(status: str) -> str:
    return f"[{_STATUS_STYLE.get(status, 'white')}]{status}[/]"


def run_view(view: dict[str, Any]) -> None:
    import json

    console = Console()
    console.print(f"[bold]{view['run_id']}[/]  {view['workflow']}  {_status(view['status'])}"
                  + ("  (paused)" if view.get("paused") else ""))
    if view.get("title") and view["title"] != view["workflow"]:
        console.print(f"  {escape(str(view['title']))}")
    console.print(f"  started {view['started_at']}  finished {view['finished_at'] or '-'}  "
                  f"steps {view['steps']}")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("NODE", "KIND", "OUTCOME", "MS", "ERROR"):
        table.add_column(col)
    for e in view["timeline"]:
        err = (e.get("error") or {}).get("message", "") if e.get("error") else ""
        table.add_row(str(e["node"]), str(e.get("kind") or ""), str(e.get("outcome") or "…"),
                      str(e.get("duration_ms") if e.get("duration_ms") is not None else ""),
                      escape(str(err)[:100]))
    console.print(table)
    if view.get("error"):
        console.print(f"[red]error:[/] {escape(str(view['error'].get('message')))}")
    failure = view.get("failure")
    if failure and (failure.get("stdout_tail") or failure.get("stderr_tail")):
        for stream in ("stdout", "stderr"):
            lines = failure.get(f"{stream}_tail") or []
            if lines:
                console.print(f"[bold]{escape(str(failure['node']))} {stream}[/] (last "
                              f"{len(lines)} lines):")
                for line in lines:
                    console.print("  " + escape(line), highlight=False, soft_wrap=True)
        console.print(f"  all of it: wfrun logs {escape(view['run_id'])} "
                      f"{escape(str(failure['node']))}")
    if view.get("final_output") is not None:
        console.print("final output:")
        console.print_json(json.dumps(view["final_output"]))
