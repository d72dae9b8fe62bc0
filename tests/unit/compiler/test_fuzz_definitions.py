"""The fuzz suite in the test command (issue 10): a few hundred structure-aware
mutations of the valid fixtures (tests/fuzzing.py), compiled in process. Every case
ends in a result whose diagnostics are one line each and whose JSON form is valid
JSON; no case raises. bench/fuzz_definitions.py runs 10,000+ through the CLI."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fuzzing import case, compile_case, controller_texts, fixture_texts, seeded

from runner.compiler._diagnostics import INTERNAL_ERROR

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.randoms(use_true_random=False))
def test_mutated_definitions_give_diagnostics_never_exceptions(rng: random.Random) -> None:
    import tempfile

    origin, text = case(rng)
    with tempfile.TemporaryDirectory() as tmp:
        diags = compile_case(Path(tmp), 0, origin, text)
    for d in diags:
        assert d.code != INTERNAL_ERROR, (origin, d)  # the compiler's safety net caught one
        assert "\n" not in d.message, (origin, d)
        assert d.code
        assert d.severity in ("error", "warning")
        assert "Traceback" not in d.message


@FUZZ
@given(st.randoms(use_true_random=False))
def test_the_issue_35_crasher_classes_give_diagnostics(rng: random.Random) -> None:
    """The seeds alone: 400-digit durations, a NUL in a hook path, `!!set` as an input,
    initial_status or expression, in workflows and controllers."""
    import tempfile

    texts = fixture_texts() + controller_texts()
    origin, text = texts[rng.randrange(len(texts))]
    from fuzzing import _load

    mutated = seeded(_load(text), rng)
    with tempfile.TemporaryDirectory() as tmp:
        diags = compile_case(Path(tmp), 0, origin, mutated)
    assert all(d.code != INTERNAL_ERROR for d in diags), (origin, mutated[:300], diags)
    assert all("\n" not in d.message for d in diags)
