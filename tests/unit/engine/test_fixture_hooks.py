"""The hooks of the valid fixtures take what the engine passes: one `HookContext`, read
by attribute (issue 35 item 9: `count_steps` subscripted it like a dict)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from runner.steps import HookContext

HOOKS = Path(__file__).resolve().parents[3] / "fixtures" / "definitions" / "valid" / "hooks.py"


def test_the_fixture_hooks_run_on_a_real_hook_context() -> None:
    spec = importlib.util.spec_from_file_location("fixture_hooks", HOOKS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    context = HookContext(input={}, outputs={"plan": {"steps": ["a", "b", "c"]}}, results={},
                          run={"id": "r1"}, project={}, publish_update=lambda *a: None)
    assert module.count_steps(context) == 3
    assert module.deploy(context) == {"deployed": True}
    assert module.summarize(context) == {"summary": "done"}
