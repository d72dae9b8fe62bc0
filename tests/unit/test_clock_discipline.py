"""Time is an input (DESIGN §9, issue 9): runner code reads it only through a `Clock`.

An AST scan of every module under runner/ for direct reads of the time (`time.time`,
`time.monotonic`, `time.sleep`, `time.perf_counter` and their kin, `datetime.now`,
`datetime.utcnow`, `date.today`, however imported or aliased). Each one must be in
`ALLOWED`, by file and enclosing function, with the reason it may bypass the Clock.
A new read fails here: take a `clock: Clock | None = None` and ask it instead.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parents[2] / "runner"

TIME_READS = frozenset({
    "time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
    "process_time", "process_time_ns", "thread_time", "thread_time_ns", "sleep",
})
DATETIME_READS = frozenset({"now", "utcnow", "today"})

#: (file under runner/, enclosing function or "*" for the whole file) -> why it may.
ALLOWED: dict[tuple[str, str], str] = {
    ("clock.py", "*"): "the Clock itself: SystemClock and FileClock read the real time",
    ("cli/progress.py", "Progress._render"): "display only: the live elapsed counter",
    ("cli/progress.py", "Progress.__call__"): "display only: the live counter's start",
    ("cli/follow.py", "_elapsed"): "display only: a running node's age in `show --follow`",
    ("engine/_procs.py", "_supervise"): "the pipes' drain grace after a step's group is "
                                        "gone: real time, as a reader thread's join was",
    ("cli/follow.py", "follow_run"): "display only: yield so the live view's last refresh lands",
    ("compiler/_workflows.py", "build_catalog"): "compared with folder mtimes, which the "
                                                "kernel's real clock sets (a racy scan check)",
}


@dataclass(frozen=True)
class Read:
    path: str
    scope: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"runner/{self.path}:{self.line} in {self.scope}: {self.what}"


class _Scanner(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.scope: list[str] = []
        self.reads: list[Read] = []
        self.time_modules: set[str] = set()  # names bound to the `time` module
        self.time_functions: dict[str, str] = {}  # local name -> time function
        self.datetime_modules: set[str] = set()  # names bound to the `datetime` module
        self.datetime_classes: set[str] = set()  # names bound to datetime.datetime / .date

    # -- what names mean ---------------------------------------------------------------
    def bind_imports(self, tree: ast.AST) -> None:
        """Imports anywhere in the file (a function may import `time` locally)."""
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "time":
                        self.time_modules.add(alias.asname or "time")
                    elif alias.name == "datetime":
                        self.datetime_modules.add(alias.asname or "datetime")
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                for alias in node.names:
                    if node.module == "time" and alias.name in TIME_READS:
                        self.time_functions[alias.asname or alias.name] = alias.name
                    elif node.module == "datetime" and alias.name in ("datetime", "date"):
                        self.datetime_classes.add(alias.asname or alias.name)

    # -- scopes --------------------------------------------------------------------------
    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = _scoped
    visit_AsyncFunctionDef = _scoped
    visit_ClassDef = _scoped

    def _read(self, node: ast.AST, what: str) -> None:
        scope = ".".join(self.scope) or "<module>"
        self.reads.append(Read(self.path, scope, getattr(node, "lineno", 0), what))

    # -- reads ---------------------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        base = node.value
        if isinstance(base, ast.Name):
            reads = ((base.id in self.time_modules and node.attr in TIME_READS)
                     or (base.id in self.datetime_classes and node.attr in DATETIME_READS))
            if reads:
                self._read(node, f"{base.id}.{node.attr}")
        elif (isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name)
              and base.value.id in self.datetime_modules
              and base.attr in ("datetime", "date") and node.attr in DATETIME_READS):
            self._read(node, f"{base.value.id}.{base.attr}.{node.attr}")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.time_functions and isinstance(node.ctx, ast.Load):
            self._read(node, f"{node.id} (time.{self.time_functions[node.id]})")


def scan(source: str, path: str) -> list[Read]:
    tree = ast.parse(source)
    scanner = _Scanner(path)
    scanner.bind_imports(tree)
    scanner.visit(tree)
    return scanner.reads


def _allowed(read: Read) -> bool:
    return (read.path, "*") in ALLOWED or (read.path, read.scope) in ALLOWED


def test_runner_code_reads_time_only_through_a_clock() -> None:
    reads = [r for file in sorted(RUNNER.rglob("*.py"))
             for r in scan(file.read_text(encoding="utf-8"),
                           file.relative_to(RUNNER).as_posix())]
    assert reads, "the scan found nothing at all: is RUNNER right?"
    unexplained = [str(r) for r in reads if not _allowed(r)]
    assert not unexplained, (
        "direct time reads outside the allow-list; take a `clock: Clock | None = None` "
        "and ask it (or add an entry to ALLOWED with the reason):\n  "
        + "\n  ".join(unexplained))


def test_every_allowed_read_says_why() -> None:
    # Entries whose read has gone are not an error: files here change under other work.
    assert all(reason.strip() for reason in ALLOWED.values())


@pytest.mark.parametrize(("source", "what"), [
    ("import time\ndef f():\n    return time.monotonic()\n", "time.monotonic"),
    ("import time as t\nclass C:\n    def f(self):\n        t.sleep(1)\n", "t.sleep"),
    ("def f():\n    import time\n    return time.perf_counter()\n", "time.perf_counter"),
    ("from time import monotonic as m\ndef f():\n    return m()\n", "m (time.monotonic)"),
    ("from datetime import datetime\ndef f():\n    return datetime.now()\n", "datetime.now"),
    ("import datetime\ndef f():\n    return datetime.datetime.utcnow()\n",
     "datetime.datetime.utcnow"),
    ("from datetime import date as d\ndef f():\n    return d.today()\n", "d.today"),
    ("import time\ndef f(now=time.time):\n    return now()\n", "time.time"),
])
def test_the_scan_sees_a_read_however_it_is_imported(source: str, what: str) -> None:
    (read,) = scan(source, "x.py")
    assert read.what == what
    assert read.scope != "<module>"


def test_the_scan_ignores_what_does_not_read_the_time() -> None:
    source = ("import time\nfrom datetime import datetime\nimport threading\n"
              "def f(ts):\n    threading.Event().wait(0.1)\n"
              "    return time.strftime('%Y', time.gmtime(ts)), datetime.fromtimestamp(ts)\n")
    assert scan(source, "x.py") == []
