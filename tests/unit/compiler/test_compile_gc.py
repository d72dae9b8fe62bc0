"""The collector around a compile (issue 34 item 18).

A compile pauses the cyclic collector, then hands what survives it (the definition,
the compiler's per-file cache) straight to the oldest generation instead of leaving
~100,000 young objects for a pass as soon as the collector is back.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from runner.compiler import Compiler
from runner.compiler._compile import _gc_paused


def _chain(path: Path, n: int) -> Path:
    lines = ["start: n0", "nodes:", '  n0: {compute: "{{ 0 }}"}']
    lines += [f'  n{i}: {{compute: "{{{{ outputs.n{i - 1} + 1 }}}}"}}' for i in range(1, n)]
    lines += ["edges:"] + [f"  - {{from: n{i}, to: n{i + 1}}}" for i in range(n - 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _in_generation(obj: object, generation: int) -> bool:
    return any(o is obj for o in gc.get_objects(generation=generation))


def test_what_a_compile_keeps_goes_to_the_oldest_generation(tmp_path: Path) -> None:
    assert gc.isenabled()
    result = Compiler().compile_path(_chain(tmp_path / "chain.yaml", 300))
    assert result.valid
    assert gc.isenabled()
    assert result.definition is not None
    node = next(iter(result.definition.nodes.values()))
    assert gc.is_tracked(node)
    assert _in_generation(node, 2)
    assert gc.get_count()[0] < 1000  # no young generation left to walk


def test_a_cycle_left_behind_is_still_collected() -> None:
    class Loop:
        def __init__(self) -> None:
            self.me = self

    with _gc_paused():  # garbage made while a compile runs, promoted with the rest
        loop = Loop()
        ref = weakref.ref(loop)
        del loop
    assert ref() is not None  # a cycle: only the collector frees it
    gc.collect()
    assert ref() is None


def test_objects_someone_froze_stay_frozen(tmp_path: Path) -> None:
    # A compile moves its survivors to the oldest generation by `freeze` then `unfreeze`,
    # which would also thaw what the caller froze; it skips that when anything is frozen.
    # The caller's object is checked itself: the frozen count may fall meanwhile as other
    # threads free frozen objects.
    kept = ["frozen by the caller"]
    gc.freeze()
    try:
        assert not any(_in_generation(kept, g) for g in range(3))  # frozen: in none
        assert Compiler().compile_path(_chain(tmp_path / "w.yaml", 5)).valid
        assert not any(_in_generation(kept, g) for g in range(3))  # thawed: back in one
    finally:
        gc.unfreeze()
