"""`wfrun list`, `validate`, `graph`, `schema`: the definition commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from runner.compiler._discovery import SUFFIXES, is_path_ref
from runner.errors import DefinitionInvalid, InputError, NotFoundError

from .app import cli
from .context import Context
from .graphfmt import render_graph

if TYPE_CHECKING:
    from runner.compiler import Compiler, CompileResult, Diagnostic, WorkflowDefinition


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=False, ensure_ascii=False))


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_cmd(ctx: Context, as_json: bool) -> None:
    """List workflows from the project, the user folder and the built-ins."""
    from runner.compiler._stored import project_cache

    catalog = ctx.catalog("workflows")
    kept = project_cache(catalog)
    compiler: Compiler | None = None  # built on the first workflow not kept compiled
    rows = []
    for entry in catalog.entries:
        definition = kept.load(entry.path, entry.origin) if kept is not None else None
        valid = definition is not None
        if definition is None:
            if compiler is None:
                from runner.compiler import Compiler

                compiler = Compiler(catalog)
            result = compiler.compile_path(entry.path, display=entry.display,
                                           origin=entry.origin)
            definition, valid = result.definition, result.valid
            if valid and definition is not None and kept is not None:
                kept.save(entry.path, entry.origin, definition)
        rows.append(_row(entry.name, entry.origin, entry.display, entry.shadowed_by,
                         definition, valid))
    if as_json:
        _echo_json({"project": str(catalog.project_root) if catalog.project_root else None,
                    "workflows": rows,
                    "problems": [d.to_json() for d in catalog.problems]})
        return
    from .tables import workflow_table

    workflow_table(rows, catalog.project_root)
    if catalog.problems:
        from runner.compiler import render_text

        for d in catalog.problems:
            click.echo(render_text([d]), err=True)


def _row(name: str, origin: str, path: str, shadowed_by: str | None,
         definition: WorkflowDefinition | None, valid: bool) -> dict[str, Any]:
    return {
        "name": name,
        "source": origin,
        "path": path,
        "valid": valid,
        "shadowed_by": shadowed_by,
        "digest": definition.digest if valid and definition else None,
        "title": definition.title if definition else None,
        "description": definition.description if definition else None,
        "inputs": _inputs(definition.input_schema) if definition else [],
    }


def _inputs(schema: Any) -> list[dict[str, Any]]:
    """The input fields a workflow's schema declares: name, type, required, description."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return []
    required = set(schema.get("required") or [])
    out = []
    for name, prop in schema["properties"].items():
        prop = prop if isinstance(prop, dict) else {}
        out.append({"name": name, "type": prop.get("type"), "required": name in required,
                    "description": prop.get("description")})
    return out


def _targets(ctx: Context, refs: tuple[str, ...]) -> list[tuple[str, Path | None, str | None]]:
    """(display, path, origin) per file to validate; path None = unknown name."""
    catalog = ctx.catalog("workflows")
    if not refs:
        return [(e.display, e.path, e.origin) for e in catalog.entries]
    out: list[tuple[str, Path | None, str | None]] = []
    for ref in refs:
        path = Path(ref).expanduser()
        if path.is_dir():
            for child in sorted(path.iterdir()):
                if child.suffix in SUFFIXES and not child.name.startswith("."):
                    out.append((child.as_posix(), child, None))
            continue
        if is_path_ref(ref) or path.exists():
            out.append((ref, path, None))
            continue
        entry = catalog.get(ref)
        out.append((entry.display, entry.path, entry.origin) if entry else (ref, None, None))
    return out


@cli.command("validate")
@click.argument("refs", nargs=-1, metavar="[NAME|PATH]...")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Output format.")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.pass_obj
def validate_cmd(ctx: Context, refs: tuple[str, ...], fmt: str, as_json: bool) -> None:
    """Validate workflows (all of them when no name is given)."""
    if as_json:
        if click.get_current_context().get_parameter_source("fmt") \
                == click.core.ParameterSource.COMMANDLINE and fmt != "json":
            raise InputError(f"--json and --format {fmt} disagree: give one of them")
        fmt = "json"
    from runner.compiler import Compiler, CompileResult, Diagnostic

    catalog = ctx.catalog("workflows")
    compiler = Compiler(catalog)
    results: list[CompileResult] = []
    missing = False
    for display, path, origin in _targets(ctx, refs):
        if path is None:
            missing = True
            hint = catalog.suggest(display)
            diag = Diagnostic(display, "workflow-not-found", f"no workflow named '{display}'",
                              hint=hint)
            results.append(CompileResult(display, display, [diag]))
            continue
        result = compiler.compile_path(path, display=display,
                                       origin=origin)  # type: ignore[arg-type]
        missing = missing or _file_missing(result)
        results.append(result)
    problems = list(catalog.problems) if not refs else []
    if fmt == "json":
        _echo_json({"files": [r.to_json() for r in results],
                    "problems": [d.to_json() for d in problems],
                    "valid": all(r.valid for r in results)
                    and not any(d.severity == "error" for d in problems)})
    else:
        _print_text(results, problems)
    if missing:
        sys.exit(NotFoundError.exit_code)
    if any(d.severity == "error" for d in problems) or not all(r.valid for r in results):
        sys.exit(DefinitionInvalid.exit_code)


def _print_text(results: list[CompileResult], problems: list[Diagnostic]) -> None:
    from runner.compiler import render_text, summary_line

    seen: set[tuple[str, int, int, str, str]] = set()
    all_diags: list[Diagnostic] = []
    for r in results:
        fresh = []
        for d in r.diagnostics:
            key = (d.path, d.line, d.column, d.code, d.message)
            if key not in seen:
                seen.add(key)
                fresh.append(d)
        all_diags.extend(fresh)
        if fresh:
            click.echo(render_text(fresh, r.texts), err=True)
        if r.valid and r.definition is not None:
            click.echo(f"ok {r.name} {r.definition.digest}  ({r.path})")
    if problems:
        click.echo(render_text(problems), err=True)
        all_diags.extend(problems)
    click.echo(f"wfrun: {summary_line(all_diags, len(results))}", err=True)


@cli.command("graph")
@click.argument("ref", metavar="NAME|PATH")
@click.option("--format", "fmt", type=click.Choice(["text", "mermaid", "dot"]),
              default="text", show_default=True)
@click.pass_obj
def graph_cmd(ctx: Context, ref: str, fmt: str) -> None:
    """Print a workflow's compiled graph."""
    result = compile_or_fail(ctx, ref)
    assert result.definition is not None
    click.echo(render_graph(result.definition, fmt))


def compile_or_fail(ctx: Context, ref: str) -> CompileResult:
    """Compile a workflow by name or path, or raise the error the CLI should show."""
    from runner.compiler import Compiler, Diagnostic, render_text

    compiler = Compiler(ctx.catalog("workflows"))
    out = compiler.compile_name(ref)
    if isinstance(out, Diagnostic):
        hint = f" ({out.hint})" if out.hint else ""
        raise NotFoundError(f"{out.message}{hint}; `wfrun list` shows what exists")
    if _file_missing(out):
        raise NotFoundError(f"'{ref}' does not exist; `wfrun list` shows what exists")
    if not out.valid:
        click.echo(render_text(out.errors, out.texts), err=True)
        raise DefinitionInvalid(f"workflow '{out.name}' has {len(out.errors)} error(s); fix "
                                "them and try again")
    return out


def _file_missing(result: CompileResult) -> bool:
    """A path that names no file is 'not found' (exit 3), like an unknown name."""
    return any(d.code == "file-not-found" and d.path == result.path for d in result.diagnostics)


@cli.command("schema")
def schema_cmd() -> None:
    """Print the JSON Schema of the workflow YAML format (for editors)."""
    from runner.compiler._schema import workflow_schema

    _echo_json(workflow_schema())
