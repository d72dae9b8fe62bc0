"""The fuzz suite in the test command (issue 10): a few hundred structure-aware
mutations of the valid fixtures (tests/fuzzing.py), compiled in process. Every case
ends in a result whose diagnostics are one line each and whose JSON form is valid
JSON; no case raises. bench/fuzz_definitions.py runs 10,000+ through the CLI."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fuzzing import case

from runner.compiler import Compiler
from runner.compiler.discovery import build_catalog

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.randoms(use_true_random=False))
def test_mutated_definitions_give_diagnostics_never_exceptions(rng: random.Random) -> None:
    import tempfile

    origin, text = case(rng)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / ".wfrun" / "workflows"
        folder.mkdir(parents=True)
        path = folder / "fuzzed.yaml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        catalog = build_catalog("workflows", Path(tmp), None)
        result = Compiler(catalog).compile_path(path)
        assert json.loads(json.dumps(result.to_json()))["name"] == "fuzzed"
        for d in result.diagnostics:
            assert "\n" not in d.message, (origin, d)
            assert d.code
            assert d.severity in ("error", "warning")
            assert "Traceback" not in d.message
