"""Diagnostics: every problem found in a definition file, with an exact location.

Validators never raise for user mistakes; they collect `Diagnostic` objects. A
diagnostic first carries a *key path* into the YAML document; positions are
resolved afterwards (only for files that have problems, see `positions.py`), so
the happy path never pays for the slow round-trip loader.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

Severity = Literal["error", "warning"]
KeyPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Diagnostic:
    """One problem in one file. `line` and `column` are 1-based; 0 means unknown."""

    path: str
    code: str
    message: str
    severity: Severity = "error"
    line: int = 0
    column: int = 0
    hint: str | None = None
    # Where in the YAML document the problem is; resolved into line/column later.
    key_path: KeyPath | None = field(default=None, compare=False)
    # Point at the key itself rather than its value (unknown keys, duplicates).
    at_key: bool = field(default=False, compare=False)

    def located(self, line: int, column: int) -> Diagnostic:
        return replace(self, line=line, column=column)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
        }
        if self.hint:
            out["hint"] = self.hint
        return out


MAX_PER_FILE = 200


class DiagnosticSink:
    """Collects diagnostics for one file while a validator walks it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.items: list[Diagnostic] = []
        self.dropped = 0

    def _full(self) -> bool:
        """Past MAX_PER_FILE problems the rest are counted, not kept: a generated file
        with 100,000 mistakes would otherwise take minutes and a gigabyte to report."""
        if len(self.items) < MAX_PER_FILE:
            return False
        if not self.dropped:
            self.items.append(Diagnostic(
                self.path, "too-many-errors", f"more than {MAX_PER_FILE} problems in this "
                "file; the rest are not shown: fix these and validate again"))
        self.dropped += 1
        return True

    def error(
        self,
        code: str,
        message: str,
        key_path: KeyPath | None = None,
        *,
        at_key: bool = False,
        hint: str | None = None,
        line: int = 0,
        column: int = 0,
    ) -> None:
        if self._full():
            return
        self.items.append(
            Diagnostic(
                self.path, code, message, "error", line, column, hint, key_path, at_key
            )
        )

    def warning(
        self,
        code: str,
        message: str,
        key_path: KeyPath | None = None,
        *,
        at_key: bool = False,
        hint: str | None = None,
    ) -> None:
        if self._full():
            return
        self.items.append(
            Diagnostic(self.path, code, message, "warning", 0, 0, hint, key_path, at_key)
        )

    @property
    def stopped(self) -> bool:
        """True once a problem was dropped: walkers stop early, as nothing more is kept
        (and `too-many-errors` already makes the file invalid)."""
        return self.dropped > 0

    @property
    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.items)


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """A 'did you mean' hint for a misspelled key, node id or workflow name."""
    import difflib  # only a mistake needs it; finding the project must not (cold start)

    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{matches[0]}'?" if matches else None


def sort_key(d: Diagnostic) -> tuple[str, int, int, str]:
    return (d.path, d.line, d.column, d.code)


def render_text(diags: Sequence[Diagnostic], sources: dict[str, str] | None = None) -> str:
    """Render diagnostics the GNU way, each followed by its source line and a caret."""
    lines: list[str] = []
    cache: dict[str, list[str]] = {}
    for d in diags:
        loc = f"{d.path}:{d.line}:{d.column}" if d.line else d.path
        lines.append(f"{loc}: {d.severity}[{d.code}]: {d.message}")
        text = (sources or {}).get(d.path)
        if text is not None and d.line:
            src_lines = cache.setdefault(d.path, text.splitlines())
            if d.line <= len(src_lines):
                src = src_lines[d.line - 1].replace("\t", " ")
                gutter = str(d.line)
                pad = " " * len(gutter)
                lines.append(f"{pad} |")
                lines.append(f"{gutter} | {src}")
                caret = " " * max(d.column - 1, 0) + "^"
                lines.append(f"{pad} | {caret}" + (f" {d.hint}" if d.hint else ""))
                continue
        if d.hint:
            lines.append(f"  = help: {d.hint}")
    return "\n".join(lines)


def summary_line(diags: Sequence[Diagnostic], files: int) -> str:
    errors = sum(1 for d in diags if d.severity == "error")
    warnings = len(diags) - errors
    return (
        f"{errors} error{'s' if errors != 1 else ''}, "
        f"{warnings} warning{'s' if warnings != 1 else ''} "
        f"in {files} file{'s' if files != 1 else ''}"
    )


def internal_error(path: str, exc: Exception) -> Diagnostic:
    """A file the compiler itself failed on. Reported as this file's error so one such
    file never stops `list`, `validate` of the others, a host or the web view's catalog;
    the fuzzers (bench/fuzz_definitions.py, tests/fuzzing.py) count it as a crash."""
    what = " ".join(str(exc).split())[:200]
    return Diagnostic(path, INTERNAL_ERROR, f"wfrun failed to compile this file "
                      f"({type(exc).__name__}: {what}); this is a bug in wfrun, please "
                      "report it with the file")


INTERNAL_ERROR = "internal-error"
