"""`call:` with parameters (DESIGN §10): registered steps and the `with:` mapping.

A hook REF is `module:function`, `./file.py:function`, or a bare name that an
installed package registers under the entry-point group `wfrun.steps` (wfrun's
own `http` is one). A registered step may declare the JSON Schema of its `with:`
as the attribute `with_schema` on the object the entry point names; the
compiler checks the constant parts of `with:` against it, positioned, with a
'did you mean'. A value that is a template is judged when the run renders it.
"""

from __future__ import annotations

import re
from typing import Any

from ._checker import Checker, type_name
from ._diagnostics import KeyPath
from ._model import HookRef
from ._registry import step_with_schema
from ._shapes import check_shape

STEP_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_TEMPLATE_MARKS = ("{{", "{%")


def is_template(value: Any) -> bool:
    return isinstance(value, str) and any(m in value for m in _TEMPLATE_MARKS)


def call_params(c: Checker, hook: HookRef, value: Any, kp: KeyPath) -> dict[str, Any] | None:
    """Check one `with:` mapping; every string in it is a template rendered natively."""
    if not isinstance(value, dict):
        c.shape_error("wrong-type", f"with must be a mapping of parameter names to values, "
                     f"not {type_name(value)}", kp)
        return None
    ok = True
    for k in value:
        if not isinstance(k, str) or not STEP_NAME_RE.match(k):
            c.sink.error("invalid-name", f"parameter name {str(k)[:60]!r} must match "
                         "[A-Za-z_][A-Za-z0-9_-]*", (*kp, k), at_key=True)
            ok = False
    c.templates_in(value, kp)
    if hook.step is not None:
        schema, problem = step_with_schema(hook.step)
        if problem is not None:
            c.sink.error("step-unloadable", problem, (*kp[:-1], "call"))
            return None
        if schema is not None and not check_shape(c.sink, schema, value, kp, "with",
                                                  owner=f" of step '{hook.step}'",
                                                  skip=is_template):
            ok = False
    return value if ok else None
