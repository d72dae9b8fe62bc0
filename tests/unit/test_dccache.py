"""Dataclass methods compiled from kept code (runner/_dccache.py, issue 37).

Each test runs a fresh interpreter (the patch is per process, and a process's atexit
writes the file): the first compiles and keeps the code, the second compiles nothing,
and in both the classes behave exactly as `dataclasses` makes them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """\
import dataclasses, json, sys
from runner import _dccache

_dccache.Codes.limit = int(sys.argv[2])
codes = _dccache.install(sys.argv[1])
assert _dccache.install("elsewhere") is codes  # once per process

@dataclasses.dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: int = 2

@dataclasses.dataclass(order=True)
class Tag:
    name: str
    kept: list[int] = dataclasses.field(default_factory=list)

p = Point(1)
try:
    p.x = 5
    frozen = False
except dataclasses.FrozenInstanceError:
    frozen = True
print(json.dumps({"added": codes.added, "kept": len(codes.codes), "repr": repr(p),
                  "eq": p == Point(1, 2), "ne": p != Point(1, 3), "hash": hash(p) == hash(Point(1)),
                  "frozen": frozen, "order": Tag("a") < Tag("b"), "fresh": Tag("a").kept == [],
                  "shared": Tag("a").kept is not Tag("a").kept}))
"""


def _run(cache: Path, limit: int = 4096) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(cache), str(limit)],
                         capture_output=True, text=True, check=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin"}, cwd=Path(__file__).resolve().parents[2])
    result: dict[str, object] = json.loads(out.stdout)
    return result


BEHAVES = {"repr": "Point(x=1, y=2)", "eq": True, "ne": True, "hash": True, "frozen": True,
           "order": True, "fresh": True, "shared": True}


def test_the_second_process_compiles_nothing_and_its_classes_behave_the_same(
        tmp_path: Path) -> None:
    cache = tmp_path / "__pycache__" / "dataclasses.marshal"
    first = _run(cache)
    assert first["added"] == first["kept"]
    assert isinstance(first["added"], int)
    assert first["added"] > 0
    assert cache.exists()
    second = _run(cache)
    assert second["added"] == 0
    assert second["kept"] == first["kept"]
    for result in (first, second):
        assert {k: result[k] for k in BEHAVES} == BEHAVES


def test_a_damaged_or_foreign_file_is_compiled_past_and_replaced(tmp_path: Path) -> None:
    cache = tmp_path / "dataclasses.marshal"
    for content in (b"\\x00not marshal", b"", __import__("marshal").dumps(("2.7.0", {}))):
        cache.write_bytes(content)
        result = _run(cache)
        assert result["added"] == result["kept"]
        assert {k: result[k] for k in BEHAVES} == BEHAVES
        assert _run(cache)["added"] == 0  # the file was rewritten whole


def test_no_write_without_bytecode_writing(tmp_path: Path) -> None:
    cache = tmp_path / "dataclasses.marshal"
    subprocess.run([sys.executable, "-B", "-c", SCRIPT, str(cache), "4096"], check=True, timeout=60,
                   capture_output=True, cwd=Path(__file__).resolve().parents[2])
    assert not cache.exists()


def test_past_its_limit_a_save_keeps_only_what_its_process_used(tmp_path: Path) -> None:
    cache = tmp_path / "dataclasses.marshal"
    first = _run(cache)
    marshal = __import__("marshal")
    version, codes = marshal.loads(cache.read_bytes())
    stale = {f"def __create_fn__():\n def f{i}():\n  return {i}\n return f{i}": compile(
        f"x = {i}", "<string>", "exec") for i in range(50)}
    cache.write_bytes(marshal.dumps((version, {**codes, **stale})))
    assert _run(cache, limit=10**6)["kept"] == first["kept"] + 50  # kept: nothing to save
    kept = _run(cache, limit=10)  # added none, so nothing written: still the big file
    assert kept["added"] == 0
    cache.write_bytes(marshal.dumps((version, stale)))  # a miss for every method: a save
    assert _run(cache, limit=10)["kept"] == 50 + first["kept"]
    assert _run(cache)["kept"] == first["kept"]  # the stale ones were dropped
