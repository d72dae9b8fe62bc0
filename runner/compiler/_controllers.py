"""Controller definitions (YAML): the same diagnostics quality as workflows (DESIGN §7).

```yaml
# .wfrun/controllers/pull-request.yaml
reconcile: ./pull_request.py:reconcile      # or package.module:function
timeout: 60s
resync: 10m                                  # optional periodic re-check
spec: {type: object, required: [repository]} # JSON Schema for resource specs
initial_status: {phase: observing}
```
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner._canonical import fingerprint

from ._checker import Checker
from ._diagnostics import Diagnostic, DiagnosticSink, internal_error, sort_key
from ._model import HookRef, Source
from ._sources import read_source
from ._triggers import TriggerSpec, parse_triggers
from ._yamlio import YamlProblem, load
from ._yamlpos import locate_all

CONTROLLER_KEYS = ("name", "description", "reconcile", "timeout", "spec", "initial_status",
                   "resync", "triggers")
DEFAULT_RECONCILE_TIMEOUT = 60.0


@dataclass(frozen=True)
class ControllerDefinition:
    name: str
    reconcile: HookRef
    timeout: float | None = DEFAULT_RECONCILE_TIMEOUT
    spec_schema: dict[str, Any] | None = None
    initial_status: dict[str, Any] = field(default_factory=dict)
    resync: float | None = None
    description: str | None = None
    # Enqueue a resource key on a schedule, a webhook or file changes (DESIGN §10);
    # not in the digest (when a key is reconciled, not how).
    triggers: tuple[TriggerSpec, ...] = ()
    source: Source | None = None
    digest: str = ""


@dataclass
class ControllerCompileResult:
    path: str
    name: str
    diagnostics: list[Diagnostic]
    definition: ControllerDefinition | None = None
    text: str | None = None

    @property
    def valid(self) -> bool:
        return self.definition is not None and not any(
            d.severity == "error" for d in self.diagnostics)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "name": self.name, "valid": self.valid,
                "digest": self.definition.digest if self.definition and self.valid else None,
                "diagnostics": [d.to_json() for d in self.diagnostics]}


def compile_controller(path: Path, *, display: str | None = None,
                       builtin: bool = False) -> ControllerCompileResult:
    shown = display or path.as_posix()
    try:
        return _compile(path, shown, builtin)
    except Exception as exc:  # a compiler bug: this file's error, not the caller's
        return ControllerCompileResult(shown, path.stem, [internal_error(shown, exc)])


def _compile(path: Path, shown: str, builtin: bool) -> ControllerCompileResult:
    name = path.stem
    read = read_source(path, shown)
    if isinstance(read, Diagnostic):
        return ControllerCompileResult(shown, name, [read])
    sink = DiagnosticSink(shown)
    try:
        data = load(read.text, shown)
    except YamlProblem as problem:
        return ControllerCompileResult(shown, name, [problem.diagnostic], text=read.text)
    definition = _parse(data, name, path, sink)
    diags = sorted(locate_all(sink.items, read.text), key=sort_key)
    result = ControllerCompileResult(shown, name, diags, text=read.text)
    if definition is None or any(d.severity == "error" for d in diags):
        return result
    source = (Source("builtin", read.sha256, name=name) if builtin
              else Source("file", read.sha256, path=str(path.resolve())))
    snapshot = {"schema": "wfrun.controller.v1", "name": name,
                "reconcile": definition.reconcile.to_json(), "timeout": definition.timeout,
                "spec": definition.spec_schema, "initial_status": definition.initial_status,
                "resync": definition.resync}
    from dataclasses import replace

    # digest_of is this fingerprint; _compile (and the graph it loads) is not needed here.
    result.definition = replace(definition, source=source, digest=fingerprint(snapshot))
    return result


def _parse(data: Any, name: str, path: Path, sink: DiagnosticSink
           ) -> ControllerDefinition | None:
    c = Checker(sink, path.parent)
    if data is None:
        sink.error("empty-file", "the file is empty; a controller needs at least 'reconcile'",
                   line=1, column=1)
        return None
    m = c.mapping(data, (), "a controller file")
    if m is None:
        return None
    c.keys(m, CONTROLLER_KEYS, (), "the controller", required=("reconcile",))
    if "name" in m and m["name"] != name:
        sink.error("name-mismatch", f"'name: {m['name']}' must equal the file name '{name}'",
                   ("name",))
    hook = c.hook(m["reconcile"], ("reconcile",)) if "reconcile" in m else None
    timeout: float | None = DEFAULT_RECONCILE_TIMEOUT
    if "timeout" in m:
        ok, t = c.duration(m["timeout"], ("timeout",), "timeout")
        timeout = t if ok else DEFAULT_RECONCILE_TIMEOUT
    resync = None
    if "resync" in m:
        ok, r = c.duration(m["resync"], ("resync",), "resync")
        resync = r if ok else None
    spec = c.schema(m["spec"], ("spec",), "spec") if "spec" in m else None
    initial: dict[str, Any] = {}
    if "initial_status" in m:
        initial = c.mapping(m["initial_status"], ("initial_status",), "initial_status") or {}
    description = None
    if "description" in m:
        description = c.string(m["description"], ("description",), "description",
                               non_empty=False)
    triggers = (parse_triggers(m["triggers"], sink, controller=True) if "triggers" in m
                else ())
    if hook is None:
        return None
    return ControllerDefinition(name=name, reconcile=hook, timeout=timeout, spec_schema=spec,
                                initial_status=initial, resync=resync, description=description,
                                triggers=triggers)
