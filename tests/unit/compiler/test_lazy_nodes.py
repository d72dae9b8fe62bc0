"""Big files (past yamlio.LAZY_MIN) build `nodes:` node by node as the checks reach it,
so a file full of mistakes stops being read at the 200-problem cap. The result must be
the one the plain load gives: same digest, same diagnostics, same positions."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.compiler import Compiler
from runner.compiler import _yamlio as yamlio


def _big() -> str:
    lines = ["start: n0", "nodes:"]
    lines += [f'  n{i}: {{compute: "{i}", timeout: 5s}}' for i in range(9000)]
    text = "\n".join(lines) + "\n"
    assert len(text) > yamlio.LAZY_MIN
    return text


def _both(tmp_path: Path, text: str,
          monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[str, int, int]], str | None,
                                                    list[tuple[str, int, int]], str | None]:
    path = tmp_path / "big.yaml"
    path.write_text(text)
    lazy = Compiler().compile_path(path)
    with monkeypatch.context() as m:
        m.setattr(yamlio, "LAZY_MIN", 10**9)
        plain = Compiler().compile_path(path)

    def shown(r: object) -> list[tuple[str, int, int]]:
        return [(d.code, d.line, d.column) for d in r.diagnostics]  # type: ignore[attr-defined]

    return (shown(lazy), lazy.definition.digest if lazy.valid and lazy.definition else None,
            shown(plain), plain.definition.digest if plain.valid and plain.definition else None)


def test_a_big_valid_file_compiles_as_the_plain_load_does(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    n = 5000
    lines = ["start: a0", "nodes:", '  a0: &shared {compute: "{{ 1 + 1 }}", timeout: 5s}',
             "  a1: *shared"]
    lines += [f'  n{i}: {{compute: "{i}", timeout: 5s}}' for i in range(n)]
    lines += ["edges:", "  - {from: a0, to: a1}", "  - {from: a1, to: n0}"]
    lines += [f"  - {{from: n{i}, to: n{i + 1}}}" for i in range(n - 1)]
    text = "\n".join(lines) + "\n"
    assert len(text) > yamlio.LAZY_MIN
    lazy, lazy_digest, plain, plain_digest = _both(tmp_path, text, monkeypatch)
    assert lazy == plain
    assert lazy_digest is not None
    assert lazy_digest == plain_digest


@pytest.mark.parametrize("bad", [
    '  late: {compute: !!int "0x"}',          # a tag whose text does not fit
    "  late: {compute: x, compute: y}",       # a duplicate key inside one node
    "  n5: {compute: x}",                     # a duplicate node id
    "  late: {compute: [1, {a: 1}, !!float \"\"]}",
])
def test_big_files_report_load_problems_like_the_plain_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    lines = _big().splitlines()
    text = "\n".join([*lines[:-100], bad, *lines[-100:]]) + "\n"
    lazy, _d, plain, _p = _both(tmp_path, text, monkeypatch)
    assert lazy == plain
    assert lazy[0][0] in ("yaml-value", "duplicate-key")
    assert lazy[0][1] > 9000 - 100  # placed on the line near the end, not line 0


def test_a_big_file_full_of_mistakes_is_read_only_up_to_the_cap(tmp_path: Path) -> None:
    lines = ["start: n0", "nodes:"] + [f"  n{i}: {{agent: x, bogus: 1}}" for i in range(12000)]
    # Past the cap a value no load can read: the lazy load never builds it.
    lines.append('  last: {compute: !!int "0x"}')
    path = tmp_path / "big.yaml"
    path.write_text("\n".join(lines) + "\n")
    result = Compiler().compile_path(path)
    codes = [d.code for d in result.diagnostics]
    assert len(codes) == 201
    assert codes[0] == "too-many-errors"
    assert "yaml-value" not in codes
    assert all(d.line > 0 for d in result.diagnostics[1:])
