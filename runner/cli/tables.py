"""rich renderings for the terminal (tables, colours honour NO_COLOR)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

# Off a terminal (a pipe, a CI log) nothing is cut: lines are as long as their values.
UNBOUNDED = 100_000


def make_console(stderr: bool = False) -> Console:
    """A terminal gets its own width; anything else gets full values (COLUMNS aside)."""
    out = Console(stderr=stderr)
    if out.is_terminal:
        return out
    return Console(stderr=stderr, width=UNBOUNDED)


def workflow_table(rows: list[dict[str, Any]], project: Path | None) -> None:
    out = make_console()
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("NAME", "SOURCE", "VALID", "INPUTS", "DESCRIPTION", "PATH"):
        table.add_column(col)
    for row in rows:
        valid = "[green]yes[/]" if row["valid"] else "[red]no[/]"
        name = row["name"]
        source = row["source"]
        if row["shadowed_by"]:
            name = f"[dim]{name}[/]"
            source = f"[dim]{source} (shadowed by {row['shadowed_by']})[/]"
        inputs = ", ".join(f"{i['name']}{'' if i['required'] else '?'}"
                           for i in row.get("inputs") or [])
        about = str(row.get("description") or row.get("title") or "")
        table.add_row(name, source, valid, escape(inputs or "-"),
                      escape(_first_sentence(about)),
                      escape(str(row["path"])))
    out.print(table)
    if project is None:
        make_console(stderr=True).print(
            "[dim]no .wfrun/ folder here or above; showing user and built-in workflows[/]")


def _first_sentence(text: str) -> str:
    """A description's first sentence: the table's summary (`--json` has all of it)."""
    flat = " ".join(text.split())
    end = flat.find(". ")
    return flat if end < 0 else flat[:end + 1]


def runs_table(rows: list[Any], *, filtered: bool = False) -> None:
    out = make_console()
    if not rows:
        # An empty filter result is not an empty project.
        make_console(stderr=True).print("no runs match" if filtered else "no runs yet")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("RUN", no_wrap=True, overflow="fold", min_width=len(rows[0].run_id))
    for col in ("WORKFLOW", "STATUS", "STARTED", "DURATION", "NODE"):
        table.add_column(col)
    for r in rows:
        dur = f"{r.duration_s:.1f}s" if r.duration_s is not None else "-"
        node = f"→ {r.continued_by}" if r.continued_by else (r.current_node or "")
        table.add_row(r.run_id, r.workflow, _status(r.status), r.started_at or "-", dur,
                      escape(node))
    out.print(table)


_STATUS_STYLE = {"completed": "green", "failed": "red", "timed_out": "red",
                 "cancelled": "yellow", "waiting": "cyan", "running": "blue", "paused": "yellow",
                 "continued": "cyan", "queued": "dim", "starting": "blue", "parked": "yellow"}


def _status(status: str) -> str:
    return f"[{_STATUS_STYLE.get(status, 'white')}]{status}[/]"


def run_view(view: dict[str, Any]) -> None:
    import json

    console = make_console()
    console.print(f"[bold]{view['run_id']}[/]  {view['workflow']}  {_status(view['status'])}"
                  + ("  (paused)" if view.get("paused") and view["status"] != "paused" else ""))
    if view.get("title") and view["title"] != view["workflow"]:
        console.print(f"  {escape(str(view['title']))}")
    console.print(f"  started {view['started_at']}  finished {view['finished_at'] or '-'}  "
                  f"steps {view['steps']}")
    if view.get("input") is not None:  # secrets and writeOnly fields are masked already
        shown = json.dumps(view["input"], ensure_ascii=False, separators=(", ", ": "))
        console.print(f"  input {escape(shown)}", highlight=False, soft_wrap=True)
    if view.get("parent_run_id"):
        console.print(f"  continues {escape(str(view['parent_run_id']))}")
    rerun = view.get("rerun") or {}
    if view.get("rerun_of"):
        forced = f"; forced (changed: {', '.join(rerun.get('changed_nodes') or [])})" \
            if rerun.get("forced") else ""
        items = "".join(f"; reused {len(done)} ended item{'s' if len(done) != 1 else ''} "
                        f"of {node}" for node, done in (rerun.get("reused_items") or {}).items())
        console.print(f"  rerun of {escape(str(view['rerun_of']))} from node "
                      f"{escape(str(rerun.get('from')))}{escape(items)}{escape(forced)}")
    if view.get("rerun_by"):
        console.print(f"  rerun by {escape(', '.join(view['rerun_by']))}")
    if view.get("continued_by"):
        console.print(f"  answered; continued by {escape(str(view['continued_by']))}")
    elif view.get("status") == "waiting":
        console.print(f"  waiting at {escape(str(view.get('waiting_on')))}; answer it with: "
                      f"wfrun answer {view['run_id']} '<json or text>'")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("NODE", "KIND", "OUTCOME", "MS", "ERROR"):
        table.add_column(col)
    for e in view["timeline"]:
        err = (e.get("error") or {}).get("message", "") if e.get("error") else ""
        outcome = str(e.get("outcome") or "…")
        if e.get("reused_from"):
            outcome += " (set)" if e.get("set") else " (reused)"
        elif e.get("cached_from"):
            outcome += f" (cached: {e['cached_from']})"
        if e.get("items"):  # a map or parallel node: its items by outcome, of how many
            counts = e["items"]
            outcome += " (" + ", ".join(f"{n} {k}" for k, n in counts.items()) \
                + f" of {sum(counts.values())})"
        table.add_row(str(e["node"]), str(e.get("kind") or ""), escape(outcome),
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
