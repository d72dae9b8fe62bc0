"""No module of runner/ or controllers/ over 600 lines (issue 36): past that a module
holds more than one concept and is split by concept, as _bundle, _runner, _daemon,
_triggers, _yamlio, the session controller and the controller manager were."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 600


def test_no_module_is_over_the_limit() -> None:
    sizes = {path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
             for folder in ("runner", "controllers") for path in (ROOT / folder).rglob("*.py")}
    assert len(sizes) > 200  # the walk found the tree
    too_long = {name: lines for name, lines in sizes.items() if lines > LIMIT}
    assert too_long == {}, f"split these modules (limit {LIMIT} lines): {too_long}"
