"""The compiler pipeline: read → load → check shape → check graph → flatten → digest.

`Compiler` caches results per resolved file for one session (a `validate` of a
whole corpus compiles a shared child once) and detects include cycles by
keeping the stack of files being compiled.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner._canonical import fingerprint

from ._diagnostics import (
    Diagnostic,
    DiagnosticSink,
    KeyPath,
    did_you_mean,
    internal_error,
    sort_key,
)
from ._discovery import Catalog, Origin, is_path_ref
from ._graph import LocalGraph, check_included, check_local, flatten, to_networkx
from ._model import Source, WorkflowDefinition
from ._parse import RawWorkflow, parse_workflow
from ._references import check_references
from ._sources import SourceText, read_source
from ._yamlio import YamlProblem, access, load
from ._yamlpos import locate_all


@dataclass
class CompileResult:
    """The outcome for one file: a definition when valid, and every diagnostic."""

    path: str
    name: str
    diagnostics: list[Diagnostic]
    definition: WorkflowDefinition | None = None
    text: str | None = None
    # Texts of every file a diagnostic points into (included children too), for rendering.
    texts: dict[str, str] = field(default_factory=dict)

    _graph: Any = field(default=None, repr=False, compare=False)

    @property
    def graph(self) -> Any:
        """The compiled `networkx.DiGraph` (None when invalid), built on first use."""
        if self._graph is None and self.definition is not None and self.valid:
            self._graph = to_networkx(self.definition.nodes, self.definition.edges)
        return self._graph

    @property
    def valid(self) -> bool:
        return self.definition is not None and not any(
            d.severity == "error" for d in self.diagnostics)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "valid": self.valid,
            "digest": self.definition.digest if self.valid and self.definition else None,
            "diagnostics": [d.to_json() for d in self.diagnostics],
        }


@dataclass
class _Unit:
    """One file's checked local graph, kept for parents that include it."""

    graph: LocalGraph | None
    source: Source | None
    sources: list[Source]
    diagnostics: list[Diagnostic]
    text: str | None


def digest_of(snapshot: dict[str, Any]) -> str:
    """The definition digest: the fingerprint of the canonical snapshot (its bytes are
    a stored format; see `runner._canonical`)."""
    return fingerprint(snapshot)


#: A compiler has not asked its catalog for the project's channels yet.
_UNREAD = object()


class Compiler:
    """Compiles workflow files, resolving includes through a catalog."""

    def __init__(self, catalog: Catalog | None = None) -> None:
        self.catalog = catalog
        self._units: dict[Path, _Unit] = {}
        self._stack: list[Path] = []
        self._texts: dict[str, str] = {}
        self._channels: frozenset[str] | object | None = _UNREAD

    # -- public -------------------------------------------------------------------
    def compile_path(self, path: Path, *, display: str | None = None,
                     origin: Origin | None = None) -> CompileResult:
        with _gc_paused():
            try:
                return self._compile_path(path, display, origin)
            except Exception as exc:  # a compiler bug: this file's error, not the caller's
                shown = display or path.as_posix()
                return CompileResult(shown, path.stem, [internal_error(shown, exc)])

    def _compile_path(self, path: Path, display: str | None,
                      origin: Origin | None) -> CompileResult:
        shown = display or path.as_posix()
        name = path.stem
        unit = self._unit(path, shown, name, origin)
        diags = sorted(unit.diagnostics, key=sort_key)
        result = CompileResult(shown, name, diags, text=unit.text, texts=dict(self._texts))
        if unit.graph is None or any(d.severity == "error" for d in diags):
            return result
        nodes, edges = flatten(unit.graph)
        wf = unit.graph.workflow
        definition = WorkflowDefinition(
            name=wf.name, start=wf.start, nodes=nodes, edges=edges, title=wf.title,
            description=wf.description, input_schema=wf.input_schema, max_steps=wf.max_steps,
            presentation=wf.presentation, secrets=wf.secrets, env=wf.env,
            template_budget=wf.template_budget, triggers=wf.triggers,
            concurrency=wf.concurrency, rate_limit=wf.rate_limit,
            exits={k: v[0] for k, v in wf.exits.items()},
            source=unit.source, sources=tuple(_dedupe(unit.sources)))
        snapshot = definition.snapshot()
        from dataclasses import replace

        definition = replace(definition, digest=digest_of(snapshot))
        result.definition = definition
        return result

    def compile_name(self, name: str) -> CompileResult | Diagnostic:
        """Resolve a catalog name or a path and compile it."""
        if is_path_ref(name):
            path = Path(name).expanduser()
            return self.compile_path(_real(path), display=name)
        if self.catalog is None:
            return Diagnostic(name, "workflow-not-found", f"no workflow named '{name}'")
        entry = self.catalog.get(name)
        if entry is None:
            return Diagnostic(name, "workflow-not-found", f"no workflow named '{name}'",
                              hint=self.catalog.suggest(name))
        return self.compile_path(entry.path, display=entry.display, origin=entry.origin)

    # -- internals ----------------------------------------------------------------
    def _unit(self, path: Path, shown: str, name: str, origin: Origin | None) -> _Unit:
        key = _real(path)
        cached = self._units.get(key)
        if cached is not None:
            return cached
        sink = DiagnosticSink(shown)
        read = read_source(path, shown)
        if isinstance(read, Diagnostic):
            unit = _Unit(None, None, [], [read], None)
            self._units[key] = unit
            return unit
        self._texts[shown] = read.text
        source = _source_of(read, name, origin)
        unit = self._compile_text(read, sink, name, source, key)
        self._units[key] = unit
        return unit

    def _compile_text(self, read: SourceText, sink: DiagnosticSink, name: str,
                      source: Source, key: Path) -> _Unit:
        try:
            data = load(read.text, sink.path)
        except YamlProblem as problem:
            return _Unit(None, source, [source], [problem.diagnostic], read.text)
        try:
            with access(sink.path):  # a big file's nodes are read as the checks reach them
                wf = parse_workflow(data, name, read.path, sink)
        except YamlProblem as problem:
            return _Unit(None, source, [source], [problem.diagnostic], read.text)
        if wf is None or sink.stopped:  # past the cap the later checks could add nothing
            return _Unit(None, source, [source], locate_all(sink.items, read.text), read.text)
        if wf.channels:
            self._check_channels(wf.channels, sink)
        sources = [source] + [Source("file", h.sha256 or "", path=h.file)
                              for h in wf.hooks if h.file]
        self._stack.append(key)
        try:
            children = self._children(wf, sink, sources)
        finally:
            self._stack.pop()
        graph = check_local(wf, children, sink)
        check_references(graph, sink)
        for mount in children:
            check_included(graph, mount, sink)
        return _Unit(graph, source, sources, locate_all(sink.items, read.text), read.text)

    def _check_channels(self, named: list[tuple[KeyPath, str]], sink: DiagnosticSink) -> None:
        """A `notify` channel the project does not configure is a mistake now, not a
        delivery that fails later (when the catalog knows the project's channels)."""
        if self._channels is _UNREAD:
            ask = self.catalog.channel_names if self.catalog is not None else None
            self._channels = ask() if ask is not None else None
        known = self._channels
        if not isinstance(known, frozenset):
            return
        for kp, name in named:
            if name in known:
                continue
            listed = ", ".join(sorted(known)) if known else "none"
            sink.error("unknown-channel", f"notify channel '{name}' is not configured in "
                       f".wfrun/config.yaml (notify: channels:); configured: {listed}", kp,
                       hint=did_you_mean(name, known))

    def _children(self, wf: RawWorkflow, sink: DiagnosticSink,
                  sources: list[Source]) -> dict[str, LocalGraph]:
        children: dict[str, LocalGraph] = {}
        for mount, inc in wf.includes.items():
            kp = (*inc.key_path, "workflow")
            resolved = self._resolve(inc.workflow, wf.path.parent)
            if isinstance(resolved, Diagnostic):
                sink.error(resolved.code, resolved.message, kp, hint=resolved.hint)
                continue
            child_path, shown, origin = resolved
            if _real(child_path) in self._stack:
                chain = " -> ".join([*(p.stem for p in self._stack), child_path.stem])
                sink.error("include-cycle", f"include cycle: {chain}", kp)
                continue
            unit = self._unit(child_path, shown, child_path.stem, origin)
            errors = [d for d in unit.diagnostics if d.severity == "error"]
            if errors or unit.graph is None:
                first = errors[0] if errors else None
                where = f" (first: {first.path}:{first.line}: {first.message})" if first else ""
                sink.error("include-invalid", f"included workflow '{inc.workflow}' has "
                           f"{len(errors)} error{'s' if len(errors) != 1 else ''}{where}", kp)
                # Carry the child's own diagnostics so the author sees where to fix it.
                sink.items.extend(d for d in unit.diagnostics if d.path != sink.path)
                continue
            children[mount] = unit.graph
            sources.extend(unit.sources)
        return children

    def _resolve(self, ref: str, base: Path) -> tuple[Path, str, Origin | None] | Diagnostic:
        if is_path_ref(ref):
            try:
                path = _real(base / Path(ref).expanduser())
                missing = not path.exists() and not path.is_symlink()  # a loop: read_source's
            except (OSError, ValueError, RuntimeError) as exc:  # too long, NUL, a link loop
                return Diagnostic("", "workflow-not-found",
                                  f"included file '{ref[:120]}' cannot be used: "
                                  f"{getattr(exc, 'strerror', None) or exc}")
            if missing:
                return Diagnostic("", "workflow-not-found",
                                  f"included file '{ref}' does not exist")
            return path, path.as_posix(), None
        if self.catalog is None:
            return Diagnostic("", "workflow-not-found", f"no workflow named '{ref}'")
        entry = self.catalog.get(ref)
        if entry is None:
            return Diagnostic("", "workflow-not-found", f"no workflow named '{ref}'",
                              hint=self.catalog.suggest(ref))
        return entry.path, entry.display, entry.origin


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while one file compiles.

    Loading and checking allocate tens of thousands of small containers that all
    stay alive until the compile ends, so the collector's passes find nothing but
    cost a third of the time on a big file. Nothing is lost: cycles left behind
    are collected once it runs again.

    What survives the compile (the definition, the compiler's per-file cache) is
    long-lived by construction, so it is moved straight to the oldest generation
    (`freeze` then `unfreeze`), not walked by a young-generation pass as soon as the
    collector is back (~45 ms after a 5,000-node compile, for ~100,000 objects that
    all survive it); the oldest generation's full passes still see them. Skipped when
    something else froze objects (a pre-fork server's freeze is not undone here).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        gc.enable()


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        return path.absolute()


def _source_of(read: SourceText, name: str, origin: Origin | None) -> Source:
    if origin == "builtin":
        return Source("builtin", read.sha256, name=name)
    return Source("file", read.sha256, path=str(_real(read.path)))


def _dedupe(sources: list[Source]) -> list[Source]:
    seen: set[tuple[str, str | None, str | None]] = set()
    out = []
    for s in sources:
        key = (s.kind, s.path, s.name)
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out
