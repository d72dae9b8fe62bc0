"""The run side of a plain queued run's path (issue 36, "Prove it"): what a warm 3-node
chain (fixtures/workflows/chain3.yaml) enters in the engine's run loop, the compiler and
the root modules, traced with `sys.setprofile` as tests/unit/launch/test_run_path.py
traces the launch layer.

A run that declares no secrets, in a process without tracing, whose nodes compute
scalars, enters none of the machinery for those (secrets, spans, JSON round trips);
its control and clock reads are no calls; the compiler is the render with its guard
and the compiled cache with its freshness, nothing else. `bench/bench_path.py --list`
prints the whole path.
"""

from __future__ import annotations

import pytest
from runpath import trace_plain_run

#: Engine modules whose machinery a plain run does not use: the secrets it does not
#: declare, the spans nobody asked for, the step cache, an attempt's JSON check (its
#: values are scalars), the ports of fan-out and logs, the control's constructor.
UNUSED_ENGINE = {"_secrets", "_tracing", "_cache", "_nodecontext", "_driverports",
                 "_control", "_hooks", "_agent", "_fanout"}


@pytest.fixture(scope="module")
def entered(tmp_path_factory: pytest.TempPathFactory) -> set[tuple[str, str]]:
    """(module, function) for every `runner` function one warm queued run enters."""
    return trace_plain_run(tmp_path_factory.mktemp("path") / "proj")


def test_the_engine_enters_no_machinery_a_plain_run_does_not_use(
        entered: set[tuple[str, str]]) -> None:
    engine = {m.removeprefix("runner.engine.") for m, _ in entered
              if m.startswith("runner.engine.")}
    assert {"_engine", "_runner", "_nodes", "_state"} <= engine
    assert sorted(engine & UNUSED_ENGINE) == []
    # A new run's per-scope views start empty: nothing to build from its state.
    assert ("runner.engine._state", "ScopedValues.reset") not in entered


def test_the_compiler_is_the_render_and_the_compiled_cache(
        entered: set[tuple[str, str]]) -> None:
    compiler = {m for m, _ in entered if m.startswith("runner.compiler.")}
    assert compiler == {"runner.compiler._templates", "runner.compiler._workflows"}
    # A name's compiled entry is found by the name itself, its sources re-hashed in place.
    workflows = {f for m, f in entered if m == "runner.compiler._workflows"}
    assert workflows == {"Workflows.compile", "current", "_stamp", "_Compiled.fresh"}


def test_a_clock_read_is_no_call(entered: set[tuple[str, str]]) -> None:
    clock = {f for m, f in entered if m == "runner.clock"}
    assert clock <= {"iso", "compact_utc"}  # SystemClock.now/monotonic: the C functions
