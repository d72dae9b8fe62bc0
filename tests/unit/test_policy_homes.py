"""Policies with one home (issue 36.4), held by ratchets like test_clock_discipline.py.

An AST scan of every module under runner/ for a second copy of a shared policy:

    canonical JSON   json.dumps/dump with sort_keys=True, a JSONEncoder, or JSON fed to
                     a hash: only runner/_canonical.py encodes for identity
    byte bounds      `text.encode(...)[...]`, a cut of encoded text: only runner/_safety.py
                     (`bound`, `safe_message`) cuts at a character boundary
    the lease        a literal lease length or renewal interval, or a lease divided by
                     a literal: only runner/_leases.py (`LEASE_SECONDS`, `renew_every`)

Each finding must be in `ALLOWED`, by file and enclosing function, with the reason
it is not that policy (a log line, a prompt, a wire format). A new copy fails here:
use the home instead. Secret words have their own ratchet (test_secret_policy.py);
reads of the time theirs (test_clock_discipline.py), which covers the store too.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parents[2] / "runner"


def _home(module: str) -> str:
    """A policy module's file, relative to runner/ (named by module: it may be renamed)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None
    assert spec.origin is not None
    return Path(spec.origin).relative_to(RUNNER).as_posix()


HOMES = {"canonical": _home("runner._canonical"), "bytes": _home("runner._safety"),
         "lease": _home("runner._leases")}

#: (policy, file under runner/, enclosing function) -> why it is not the policy.
ALLOWED: dict[tuple[str, str, str], str] = {
    ("canonical", "engine/_dbbundle.py", "DatabaseBundle.write_manifest"):
        "the manifest document, pretty-printed for people as the folder bundle's file",
    ("canonical", "engine/_agent.py", "StepContract.expected"):
        "a prompt: the output schema shown to a model, keys sorted for reading",
    ("canonical", "compiler/_templates.py", "_tojson"):
        "the `tojson` template filter: text a template renders, not an identity",
    ("canonical", "host/session/_wiring.py", "_described"):
        "a prompt: a workflow's input schema shown to a model",
    ("canonical", "host/session/_reference.py", "JsonlHost._write"):
        "a log line of the reference host's session file",
    ("canonical", "host/inprocess/_sessionlog.py", "SessionLog._write"):
        "a log line of the in-process host's session file",
    ("canonical", "host/mcp/_sessionlog.py", "SessionLog._write"):
        "a log line of the MCP host's session file (the hook path loads no more)",
    ("canonical", "host/mcp/_integrate.py", "integrate"):
        "says whether a client's settings file changed, within one process",
    ("canonical", "launch/_intents.py", "_digest"):
        "turn intent ids already stored: their bytes (ASCII-escaped JSON) must not change",
}


@dataclass(frozen=True)
class Finding:
    policy: str
    path: str
    scope: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"runner/{self.path}:{self.line} in {self.scope}: {self.policy}: {self.what}"


def _is_json_call(node: ast.AST, names: tuple[str, ...]) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in names and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "json")


def _literal_number(node: ast.AST | None) -> bool:
    return (isinstance(node, ast.Constant) and isinstance(node.value, int | float)
            and not isinstance(node.value, bool))


def _names_lease(node: ast.AST) -> bool:
    """An expression naming a lease length (`lease_seconds`, `self.lease`, ...)."""
    name = node.attr if isinstance(node, ast.Attribute) else (
        node.id if isinstance(node, ast.Name) else "")
    return "lease" in name.lower() and "ms" not in name.lower().split("_")


class _Scanner(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.scope: list[str] = []
        self.found: list[Finding] = []

    def _add(self, policy: str, node: ast.AST, what: str) -> None:
        self.found.append(Finding(policy, self.path, ".".join(self.scope) or "<module>",
                                  getattr(node, "lineno", 0), what))

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        if not isinstance(node, ast.ClassDef):
            args = node.args
            positional = args.posonlyargs + args.args
            defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
            for arg, default in [*zip(positional, defaults, strict=True),
                                 *zip(args.kwonlyargs, args.kw_defaults, strict=True)]:
                if _names_lease(ast.Name(arg.arg)) and _literal_number(default):
                    self._add("lease", arg, f"{arg.arg} defaults to a literal")
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = _scoped
    visit_AsyncFunctionDef = _scoped
    visit_ClassDef = _scoped

    def visit_Call(self, node: ast.Call) -> None:
        if _is_json_call(node, ("dumps", "dump")) and any(
                k.arg == "sort_keys" and isinstance(k.value, ast.Constant) and k.value.value
                for k in node.keywords):
            self._add("canonical", node, "json.dumps(sort_keys=True)")
        if _is_json_call(node, ("JSONEncoder",)):
            self._add("canonical", node, "a JSONEncoder")
        func = node.func
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id == "hashlib") and any(
                _is_json_call(inner, ("dumps",)) for arg in node.args for inner in ast.walk(arg)):
            self._add("canonical", node, "a hash of json.dumps")
        for keyword in node.keywords:
            if keyword.arg in ("renew_every", "lease_seconds") and _literal_number(keyword.value):
                self._add("lease", node, f"{keyword.arg}= a literal")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        value = node.value
        if (isinstance(node.slice, ast.Slice) and isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute) and value.func.attr == "encode"):
            self._add("bytes", node, "a cut of encoded text")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        fraction = isinstance(node.op, ast.Div) or (  # a unit change (* 1000) is not
            isinstance(node.op, ast.Mult) and isinstance(node.right, ast.Constant)
            and isinstance(node.right.value, float) and node.right.value < 1)
        if fraction and _names_lease(node.left) and _literal_number(node.right):
            self._add("lease", node, "a renewal interval derived by hand")
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._lease_constant(target, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._lease_constant(node.target, node.value)
        self.generic_visit(node)

    def _lease_constant(self, target: ast.AST, value: ast.AST | None) -> None:
        name = target.id if isinstance(target, ast.Name) else ""
        if (("lease" in name.lower() or "renew" in name.lower())
                and "ms" not in name.lower().split("_") and _literal_number(value)):
            self._add("lease", target, f"{name} = a literal")


def scan(source: str, path: str) -> list[Finding]:
    scanner = _Scanner(path)
    scanner.visit(ast.parse(source))
    return [f for f in scanner.found if HOMES[f.policy] != path]


def all_findings() -> list[Finding]:
    return [finding for module in sorted(RUNNER.rglob("*.py"))
            for finding in scan(module.read_text(), module.relative_to(RUNNER).as_posix())]


def test_every_policy_lives_in_its_home() -> None:
    stray = [str(f) for f in all_findings() if (f.policy, f.path, f.scope) not in ALLOWED]
    assert stray == [], ("a second copy of a shared policy; use runner/_canonical.py, "
                         "runner/_safety.py or runner/_leases.py:\n" + "\n".join(stray))


def test_every_allowance_is_still_needed() -> None:
    used = {(f.policy, f.path, f.scope) for f in all_findings()}
    assert set(ALLOWED) - used == set()


@pytest.mark.parametrize(("source", "policy"), [
    # The copies this issue removed, as they were written.
    ('def fingerprint(value):\n    text = json.dumps(value, sort_keys=True, '
     'separators=(",", ":"))\n', "canonical"),
    ('def d(parts):\n    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()\n',
     "canonical"),
    ('def b(text):\n    return text.encode()[:2000].decode(errors="ignore")\n', "bytes"),
    ("LEASE_SECONDS = 30.0\nRENEW_EVERY = 10.0\n", "lease"),
    ("def claim(run_id, *, lease_seconds: float = 30.0): ...\n", "lease"),
    ("class C:\n    lease_seconds: float = 30.0\n", "lease"),
    ("def f(self):\n    return self.lease_seconds / 3\n", "lease"),
    ("def f(store):\n    store.claim('r', lease_seconds=30.0)\n", "lease"),
])
def test_the_ratchet_sees_the_copies_it_replaced(source: str, policy: str) -> None:
    found = scan(source, "somewhere.py")
    assert found
    assert {f.policy for f in found} == {policy}


def test_the_homes_hold_what_the_ratchet_looks_for() -> None:
    import runner._leases as leases

    assert leases.LEASE_SECONDS == 30.0
    assert leases.renew_every() == leases.LEASE_SECONDS / 3
    assert scan((RUNNER / HOMES["lease"]).read_text(), "elsewhere.py")  # the home is found
    assert scan((RUNNER / HOMES["canonical"]).read_text(), "elsewhere.py")
