"""The definition corpus in fixtures/definitions/ and how its annotations read.

Each invalid file starts with one or more lines like

    # expect: unknown-key 4:5
    # expect: unknown-key 3:1 @unknown_key_top.yaml

meaning: compiling this file yields exactly these (code, line, column) diagnostics,
the `@file` ones in another file of the corpus (an included child). Line and
column are 1-based; `0:0` is a file-level diagnostic without a position. Valid
files may carry `# expect:` lines too, for warnings.
"""

from __future__ import annotations

import re
from pathlib import Path

from runner.compiler import Compiler, CompileResult
from runner.compiler._discovery import Catalog, CatalogEntry

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "fixtures" / "definitions"
VALID = CORPUS / "valid"
INVALID = CORPUS / "invalid"
VALID_FILES = sorted(p for p in VALID.iterdir() if p.suffix in (".yaml", ".yml"))
INVALID_FILES = sorted(p for p in INVALID.iterdir() if p.suffix in (".yaml", ".yml"))

#: The notification channels the corpus's project configures.
CHANNELS = frozenset({"ops", "team"})

EXPECT_RE = re.compile(r"^# expect: ([a-z0-9-]+) (\d+):(\d+)(?: @(\S+))?\s*$")

Expectation = tuple[str, str, int, int]  # (file name, code, line, column)


def expectations(path: Path) -> set[Expectation]:
    """The `# expect:` annotations of one corpus file (read as bytes: some are not UTF-8)."""
    text = path.read_bytes().decode("utf-8", "replace").lstrip("\ufeff")
    out: set[Expectation] = set()
    for line in text.splitlines():
        if not line.startswith("# expect:"):
            continue
        match = EXPECT_RE.match(line)
        assert match, f"{path.name}: malformed annotation {line!r}"
        code, row, col, other = match.groups()
        target = (path.parent / other).resolve() if other else path.resolve()
        out.add((_rel(target), code, int(row), int(col)))
    return out


def observed(result: CompileResult) -> set[Expectation]:
    return {(_rel(Path(d.path).resolve()), d.code, d.line, d.column) for d in result.diagnostics}


def _rel(path: Path) -> str:
    try:
        return path.relative_to(CORPUS).as_posix()
    except ValueError:
        return path.as_posix()


def corpus_catalog() -> Catalog:
    """A catalog whose project folder is invalid/ and user folder is valid/ (no built-ins)."""
    entries = [CatalogEntry(p.stem, "project", p) for p in INVALID_FILES]
    entries += [CatalogEntry(p.stem, "user", p) for p in VALID_FILES]
    catalog = Catalog("workflows", None, {"project": INVALID, "user": VALID, "builtin": None},
                      entries)
    catalog.channel_names = lambda: CHANNELS  # as a project's .wfrun/config.yaml would
    return catalog


def compile_fixture(path: Path) -> CompileResult:
    return Compiler(corpus_catalog()).compile_path(path)
