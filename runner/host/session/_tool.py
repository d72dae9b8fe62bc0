"""The one `workflow` tool the model sees: a flat schema, then exact per-action checks.

Strict OpenAI-compatible providers reject a top-level `oneOf`, so the schema is
one flat object with an `action` enum and optional fields; each action then
accepts exactly its own fields (DESIGN §6; pi-workflows §8).
"""

from __future__ import annotations

from runner.errors import InputError

TYPE_CHECKING = False  # no typing at run time: `wfrun mcp` lists the tool at start-up
if TYPE_CHECKING:
    from typing import Any

ACTIONS = ("list", "start", "status", "pause", "resume", "cancel", "answer", "update", "submit")

WORKFLOW_TOOL: dict[str, Any] = {
    "name": "workflow",
    "description": (
        "Run and drive this project's wfrun workflows: the YAML files in .wfrun/workflows/ "
        "(and the user's and built-in ones). Use this tool, not any other workflow tool, "
        "whenever the user asks to run, start, check, pause, cancel or answer a workflow, "
        "and whenever a workflow step contract asks you for a result. list: available "
        "workflows. start: queue a workflow (it starts after your turn ends). "
        "status/pause/resume/cancel: the current or a named run. answer: continue a run "
        "waiting at a checkpoint. submit/update: finish or report progress on the current "
        "workflow step, exactly as its step contract shows."),
    "parameters": {
        "type": "object",
        "additionalProperties": False,
        "required": ["action"],
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS)},
            "workflow": {"type": "string", "description": "start: a workflow name or path"},
            "input": {"description": "start: the run input; answer: the answer"},
            "runId": {"type": "string", "description": "status/cancel/answer: a run id"},
            "offset": {"type": "integer", "minimum": 0, "description": "list: page offset"},
            "step": {"type": "string", "description": "submit/update: the step id"},
            "attempt": {"type": "string", "description": "submit/update: the attempt id"},
            "output": {"description": "submit: the step's result"},
            "update": {"type": "object", "description": "update: {type, key, data}"},
        },
    },
}

# Per action: (required fields, optional fields).
FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "list": ((), ("offset",)),
    "start": (("workflow",), ("input",)),
    "status": ((), ("runId",)),
    "pause": ((), ()),
    "resume": ((), ()),
    "cancel": ((), ("runId",)),
    "answer": (("input",), ("runId",)),
    "update": (("step", "attempt", "update"), ()),
    "submit": (("step", "attempt", "output"), ()),
}


def _shown(value: object, limit: int) -> str:
    # Imported here: `wfrun mcp` lists this tool at start-up, before the compiler loads.
    from runner.compiler._schemamessages import shown

    return shown(value, limit)


def validate_call(args: Any) -> tuple[str, dict[str, Any]]:
    """The action and its fields, or InputError naming exactly what to fix."""
    if not isinstance(args, dict):
        raise InputError("workflow tool arguments must be a JSON object")
    action = args.get("action")
    if not isinstance(action, str) or action not in FIELDS:
        raise InputError(f"unknown action {_shown(action, 40)}; use one of: {', '.join(ACTIONS)}")
    required, optional = FIELDS[action]
    allowed = {"action", *required, *optional}
    extra = sorted(str(k) for k in args if k not in allowed)
    if extra:
        names = ", ".join(_shown(k, 40).strip('"') for k in extra[:5])
        raise InputError(f"action '{action}' does not take {names}; it takes "
                         + (", ".join((*required, *optional)) or "no other fields"))
    missing = [k for k in required if k not in args]
    if missing:
        raise InputError(f"action '{action}' needs {', '.join(missing)}")
    for key in ("workflow", "runId", "step", "attempt"):
        if key in args and (not isinstance(args[key], str) or not args[key]):
            raise InputError(f"'{key}' must be a non-empty string")
    if "offset" in args and (not isinstance(args["offset"], int) or args["offset"] < 0):
        raise InputError("'offset' must be a non-negative integer")
    if "update" in args and not isinstance(args["update"], dict):
        raise InputError("'update' must be an object {type, key, data}")
    return action, {k: v for k, v in args.items() if k != "action"}
