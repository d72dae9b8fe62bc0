"""Issue 36's path aim, as a ratchet: one warm queued 3-node run enters at most 120
`runner` functions in at most 20 modules (`bench/bench_path.py` prints the same path,
113 in 19 when this was written). The count is deterministic for a tree, so a change
that lengthens the path past the aim fails here, not in a benchmark nobody reads."""

from __future__ import annotations

from pathlib import Path

from runpath import trace_plain_run

FUNCTIONS = 120
MODULES = 20


def test_a_plain_run_walks_at_most_the_aim(tmp_path: Path) -> None:
    entered = trace_plain_run(tmp_path / "proj")
    modules = {module for module, _ in entered}
    assert len(entered) <= FUNCTIONS, sorted(entered)
    assert len(modules) <= MODULES, sorted(modules)
