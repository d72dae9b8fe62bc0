"""rich renderings for the terminal (tables, colours honour NO_COLOR)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
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
        table.add_row(name, source, valid, row["path"])
    console.print(table)
    if project is None:
        Console(stderr=True).print(
            "[dim]no .wfrun/ folder here or above; showing user and built-in workflows[/]")
