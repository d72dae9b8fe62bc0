"""The node kinds wfrun ships: each one's body schema, parser and table row.

`kinds.py` lists these rows in the table; the JSON Schema (`schema.py`), the
parser, the graph icons and the engine's executors all follow the table.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from ._diagnostics import KeyPath, did_you_mean
from ._kinddef import HOOK, ID_PATTERN, JSON_SCHEMA, TEMPLATE, WORD, KindDef, Parsed, obj
from ._model import (
    DEFAULT_FAIL_CODE,
    DEFAULT_OUTPUT_CAP,
    DEFAULT_REMINDERS,
    ActionSpec,
    AgentSpec,
    CheckpointSpec,
    ComputeSpec,
    FailSpec,
    NotifySpec,
)
from ._values import case_key, type_name

if TYPE_CHECKING:  # the checker and template checks load when a body is parsed, not
    # when the run loop reads the kind table (`ends`, `retries`)
    from ._checker import Checker

AGENT_KEYS = ("prompt", "output", "reminders")
DECISION_KEYS = ("question", "choices", "field", "reminders")
COMPUTE_KEYS = ("expr", "call")
ACTION_KEYS = ("shell", "use_shell", "call", "with", "cwd", "env", "stdin", "allow_nonzero_exit",
               "output_cap", "parse")
NOTIFY_KEYS = ("kind", "message", "channels")
CHECKPOINT_KEYS = ("summary",)
FAIL_KEYS = ("message", "code")
FAIL_CODE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
MAX_OUTPUT_CAP = 64 * 1024 * 1024
REMINDERS = {"type": "integer", "minimum": 0, "maximum": 10}


def _agent(c: Checker, body: Any, kp: KeyPath) -> AgentSpec | None:
    if isinstance(body, str):
        body = {"prompt": body}
    m = c.mapping(body, kp, "agent")
    if m is None:
        return None
    prompt = c.string(m["prompt"], (*kp, "prompt"), "prompt", template=True) if (
        "prompt" in m) else None
    output = c.schema(m["output"], (*kp, "output"), "output") if "output" in m else None
    reminders = DEFAULT_REMINDERS
    if "reminders" in m:
        reminders = c.integer(m["reminders"], (*kp, "reminders"), "reminders", 0, 10) or 0
    if prompt is None:
        return None
    return AgentSpec(prompt=prompt, output=output, reminders=reminders)


def _decision(c: Checker, body: Any, kp: KeyPath) -> tuple[AgentSpec | None,
                                                               dict[str, str] | None]:
    m = c.mapping(body, kp, "decision")
    if m is None:
        return None, None
    question = c.string(m["question"], (*kp, "question"), "question", template=True) if (
        "question" in m) else None
    field_name = "route"
    if isinstance(m.get("field"), str):  # another type: the shape check said so
        field_name = c.ident(m["field"], (*kp, "field"), "decision field") or "route"
    reminders = DEFAULT_REMINDERS
    if "reminders" in m:
        reminders = c.integer(m["reminders"], (*kp, "reminders"), "reminders", 0, 10) or 0
    choices: list[str] = []
    targets: dict[str, str] | None = None
    raw = m.get("choices")
    ckp: KeyPath = (*kp, "choices")
    if isinstance(raw, list):
        for i, choice in enumerate(raw):
            if isinstance(choice, (dict, list)) or choice is None:
                c.shape_error("wrong-type", "each choice must be a word", (*ckp, i))
                continue
            key = case_key(choice)
            if key in choices:
                c.sink.error("duplicate-choice", f"choice '{key}' is listed twice", (*ckp, i))
                continue
            choices.append(key)
    elif isinstance(raw, dict):
        targets = {}
        for choice, target in raw.items():
            key = case_key(choice)
            if not isinstance(target, str):
                c.shape_error("wrong-type", f"choice '{key}' must name the node it leads to",
                             (*ckp, choice))
                continue
            if key in targets:
                c.sink.error("duplicate-choice", f"choice '{key}' is listed twice (choices "
                             "compare as text)", (*ckp, choice), at_key=True)
                continue
            choices.append(key)
            targets[key] = target
    elif "choices" in m:
        c.shape_error("wrong-type", "choices must be a list of words, or a mapping of word to "
                     "node id", ckp)
    if "choices" in m and not choices and isinstance(raw, (list, dict)):
        c.shape_error("empty-value", "a decision needs at least one choice", ckp)
    if question is None or not choices:
        return None, None
    schema = {
        "type": "object",
        "required": [field_name],
        "properties": {field_name: {"type": "string", "enum": choices},
                       "reason": {"type": "string"}},
    }
    prompt = (f"{question}\n\nAnswer with a JSON object whose '{field_name}' is one of: "
              + ", ".join(choices) + ". Add a short 'reason'.")
    spec = AgentSpec(prompt=prompt, output=schema, reminders=reminders,
                     decision_field=field_name, choices=tuple(choices))
    return spec, targets


def _compute(c: Checker, body: Any, kp: KeyPath) -> ComputeSpec | None:
    if isinstance(body, str):
        c.template(body, kp)
        return ComputeSpec(expr=body)
    m = c.mapping(body, kp, "compute")
    if m is None:
        return None
    if ("expr" in m) == ("call" in m):
        c.shape_error("compute-form", "compute needs exactly one of 'expr' or 'call'", kp)
        return None
    if "expr" in m:
        expr = m["expr"]
        if isinstance(expr, str):
            c.template(expr, (*kp, "expr"))
        return ComputeSpec(expr=expr if isinstance(expr, str) else _literal(expr))
    hook = c.hook(m["call"], (*kp, "call"))
    return ComputeSpec(call=hook) if hook else None


def _action(c: Checker, body: Any, kp: KeyPath) -> ActionSpec | None:
    m = c.mapping(body, kp, "action")
    if m is None:
        return None
    if ("shell" in m) == ("call" in m):
        c.shape_error("action-form", "action needs exactly one of 'shell' (an argv list) or "
                     "'call' (a Python hook)", kp)
        return None
    use_shell = False
    if "use_shell" in m:
        use_shell = bool(c.boolean(m["use_shell"], (*kp, "use_shell"), "use_shell"))
    shell: tuple[str, ...] | str | None = None
    call = None
    if "shell" in m:
        raw = m["shell"]
        skp: KeyPath = (*kp, "shell")
        if isinstance(raw, str):
            if not use_shell:
                c.sink.error("shell-string", "shell must be an argv list like [ruff, check, .]; "
                             "to run a command line through /bin/sh, add 'use_shell: true'", skp)
                return None
            c.template(raw, skp)
            _shell_quoting(c, raw, skp)
            shell = raw
        elif isinstance(raw, list):
            if not raw:
                c.shape_error("empty-value", "shell needs at least the program name", skp)
                return None
            argv = []
            for i, arg in enumerate(raw):
                if isinstance(arg, (dict, list)) or arg is None:
                    c.shape_error("wrong-type", "each shell argument must be a string", (*skp, i))
                    return None
                text = case_key(arg)
                c.template(text, (*skp, i))
                argv.append(text)
            if use_shell:
                c.sink.error("shell-string", "use_shell: true takes a command line string, not "
                             "an argv list", (*kp, "use_shell"))
            from ._template_checks import shell_code_items

            for i in shell_code_items(argv):
                _shell_quoting(c, argv[i], (*skp, i))
            shell = tuple(argv)
        else:
            c.shape_error("wrong-type", f"shell must be an argv list, not {type_name(raw)}", skp)
            return None
    else:
        call = c.hook(m["call"], (*kp, "call"))
        if call is None:
            return None
    params = None
    if "with" in m:
        if call is None:
            c.sink.error("with-without-call", "'with' passes parameters to a 'call' hook; a "
                         "shell action takes its values in its argv", (*kp, "with"), at_key=True)
            return None
        from ._stepcalls import call_params

        params = call_params(c, call, m["with"], (*kp, "with"))
        if params is None:
            return None
    cwd = c.string(m["cwd"], (*kp, "cwd"), "cwd", template=True) if "cwd" in m else None
    stdin = c.string(m["stdin"], (*kp, "stdin"), "stdin", template=True,
                     non_empty=False) if "stdin" in m else None
    env: dict[str, str] = {}
    if "env" in m:
        em = c.mapping(m["env"], (*kp, "env"), "env")
        for k, v in (em or {}).items():
            bad = _env_key_problem(str(k))
            if bad:  # the OS refuses it when the run starts the process
                c.sink.error("invalid-name", f"env key {str(k)[:60]!r} {bad}",
                             (*kp, "env", k), at_key=True)
                continue
            if isinstance(v, (dict, list)) or v is None:
                c.shape_error("wrong-type", f"env value '{k}' must be a string", (*kp, "env", k))
                continue
            text = case_key(v)
            c.template(text, (*kp, "env", k))
            env[str(k)] = text
    allow = False
    if "allow_nonzero_exit" in m:
        allow = bool(c.boolean(m["allow_nonzero_exit"], (*kp, "allow_nonzero_exit"),
                               "allow_nonzero_exit"))
    cap = DEFAULT_OUTPUT_CAP
    if "output_cap" in m:
        cap = c.integer(m["output_cap"], (*kp, "output_cap"), "output_cap", 1,
                        MAX_OUTPUT_CAP) or DEFAULT_OUTPUT_CAP
    parse = c.string(m["parse"], (*kp, "parse"), "parse", template=True) if "parse" in m else None
    return ActionSpec(shell=shell, use_shell=use_shell, call=call, cwd=cwd, env=env,
                      stdin=stdin, allow_nonzero_exit=allow, output_cap=cap, parse=parse,
                      params=params)


def _env_key_problem(key: str) -> str | None:
    if not key:
        return "is empty; name the environment variable"
    if "\0" in key:
        return "contains a NUL byte, which no environment variable can hold"
    if "=" in key:
        return "contains '=', which ends an environment variable's name"
    return None


def _shell_quoting(c: Checker, code: str, kp: KeyPath) -> None:
    from ._template_checks import shell_quoting_problems

    for problem in shell_quoting_problems(code):
        c.sink.warning("shell-quoting", problem, kp)


def _notify(c: Checker, body: Any, kp: KeyPath) -> NotifySpec | None:
    if isinstance(body, str):
        body = {"message": body}
    m = c.mapping(body, kp, "notify")
    if m is None:
        return None
    kind = m.get("kind", "progress")
    if kind not in ("progress", "final"):
        c.sink.error("invalid-value", f"notify kind must be 'progress' or 'final', not "
                     f"'{kind}'", (*kp, "kind"), hint=did_you_mean(str(kind),
                                                                    ("progress", "final")))
        return None
    message = c.string(m["message"], (*kp, "message"), "message", template=True) if (
        "message" in m) else None
    channels: list[str] = []
    raw = m.get("channels", [])
    if not isinstance(raw, list):
        c.sink.error("invalid-value", "notify channels must be a list of channel names from "
                     ".wfrun/config.yaml (notify: channels:)", (*kp, "channels"))
        return None
    for i, name in enumerate(raw):
        channel = c.ident(name, (*kp, "channels", i), "channel")
        if channel is None:
            return None
        if channel in channels:
            c.sink.error("invalid-value", f"channel '{channel}' is named twice",
                         (*kp, "channels", i))
            return None
        channels.append(channel)
        c.channels.append(((*kp, "channels", i), channel))
    if message is None:
        return None
    return NotifySpec(kind=kind, message=message, channels=tuple(channels))


def _checkpoint(c: Checker, body: Any, kp: KeyPath) -> CheckpointSpec | None:
    if body is None:
        return CheckpointSpec()
    if isinstance(body, str):
        body = {"summary": body}
    m = c.mapping(body, kp, "checkpoint")
    if m is None:
        return None
    summary = c.string(m["summary"], (*kp, "summary"), "summary", template=True) if (
        "summary" in m) else None
    return CheckpointSpec(summary=summary)


def _fail_spec(c: Checker, body: Any, kp: KeyPath) -> FailSpec | None:
    if isinstance(body, str):
        body = {"message": body}
    m = c.mapping(body, kp, "fail")
    if m is None:
        return None
    message = c.string(m["message"], (*kp, "message"), "message", template=True) if (
        "message" in m) else None
    code = DEFAULT_FAIL_CODE
    if "code" in m:
        raw = m["code"]
        if not isinstance(raw, str):
            return None  # the shape check said so
        if not FAIL_CODE_RE.match(raw):
            c.sink.error("invalid-value", "fail code must be a word of letters, digits and _ "
                         f"(like tests_failed), not {raw!r}", (*kp, "code"))
            return None
        code = raw
    if message is None:
        return None
    return FailSpec(message=message, code=code)



def _literal(value: Any) -> str:
    # A non-string literal (a number, a list) is an expression that yields itself.
    return "{{ " + json.dumps(value) + " }}"


def _agent_row(c: Checker, body: Any, kp: KeyPath) -> Parsed | None:
    spec = _agent(c, body, kp)
    return Parsed(spec) if spec is not None else None


def _decision_row(c: Checker, body: Any, kp: KeyPath) -> Parsed | None:
    spec, targets = _decision(c, body, kp)
    return Parsed(spec, targets) if spec is not None else None


def _compute_row(c: Checker, body: Any, kp: KeyPath) -> Parsed | None:
    spec = _compute(c, body, kp)
    return Parsed(spec) if spec is not None else None


def _action_row(c: Checker, body: Any, kp: KeyPath) -> Parsed | None:
    spec = _action(c, body, kp)
    return Parsed(spec) if spec is not None else None


def _notify_row(c: Checker, body: Any, kp: KeyPath) -> Parsed | None:
    spec = _notify(c, body, kp)
    return Parsed(spec) if spec is not None else None


def _checkpoint_row(c: Checker, body: Any, kp: KeyPath) -> Parsed | None:
    spec = _checkpoint(c, body, kp)
    return Parsed(spec) if spec is not None else None


def _fail_row(c: Checker, body: Any, kp: KeyPath) -> Parsed | None:
    spec = _fail_spec(c, body, kp)
    return Parsed(spec) if spec is not None else None


AGENT = KindDef(
    "agent", "An agent step: the prompt goes to the agent, which submits JSON output.", "●",
    {"anyOf": [TEMPLATE, obj({"prompt": TEMPLATE, "output": JSON_SCHEMA, "reminders": REMINDERS},
                             ("prompt",), "An agent step: the prompt goes to the agent, which "
                             "submits JSON output.")]},
    AGENT_KEYS, _agent_row)
DECISION = KindDef(
    "decision", "An agent step that picks one of `choices`; a mapping builds the switch.", "●",
    obj({"question": TEMPLATE,
         "choices": {"anyOf": [
             {"type": "array", "minItems": 1, "items": WORD},
             {"type": "object", "minProperties": 1,
              "additionalProperties": {"type": "string", "pattern": ID_PATTERN}}]},
         "field": {"type": "string", "pattern": ID_PATTERN},
         "reminders": REMINDERS}, ("question", "choices"),
        "An agent step that picks one of `choices`; a mapping builds the switch."),
    DECISION_KEYS, _decision_row, runs_as="agent")
COMPUTE = KindDef(
    "compute", "A sandboxed Jinja expression, or a Python hook.", "ƒ",
    {"anyOf": [TEMPLATE, {"type": "object", "additionalProperties": False,
                          "properties": {"expr": {}, "call": HOOK},
                          "oneOf": [{"required": ["expr"]}, {"required": ["call"]}]}]},
    COMPUTE_KEYS, _compute_row)
ACTION = KindDef(
    "action", "A side effect: `shell` (argv list) or `call` (a hook, with parameters).", "$",
    {**obj({"shell": {"anyOf": [{"type": "array", "minItems": 1, "items": WORD},
                                {"type": "string"}]},
            "use_shell": {"type": "boolean"},
            "call": HOOK,
            "with": {"type": "object", "description": "Parameters for the `call` hook, each "
                     "value a template rendered natively."},
            "cwd": TEMPLATE,
            "env": {"type": "object", "additionalProperties": WORD},
            "stdin": TEMPLATE,
            "allow_nonzero_exit": {"type": "boolean"},
            "output_cap": {"type": "integer", "minimum": 1, "maximum": MAX_OUTPUT_CAP},
            "parse": TEMPLATE}, (),
           "A side effect: `shell` (argv list) or `call` (a hook, with parameters)."),
     "oneOf": [{"required": ["shell"]}, {"required": ["call"]}]},
    ACTION_KEYS, _action_row, effects=True)
NOTIFY = KindDef(
    "notify", "A progress or final message to the run's origin session.", "!",
    {"anyOf": [TEMPLATE, obj({"kind": {"enum": ["progress", "final"]}, "message": TEMPLATE,
                              "channels": {"type": "array", "uniqueItems": True,
                                           "items": {"type": "string",
                                                     "pattern": ID_PATTERN}}},
                             ("message",))]},
    NOTIFY_KEYS, _notify_row)
CHECKPOINT = KindDef(
    "checkpoint", "Ends the run waiting; `wfrun answer` continues it.", "◆",
    {"anyOf": [{"type": "null"}, TEMPLATE, obj({"summary": TEMPLATE})]},
    CHECKPOINT_KEYS, _checkpoint_row, ends="wait")
FAIL = KindDef(
    "fail", "Ends the run failed on purpose (exit 1) with this message and code.", "✗",
    {"anyOf": [TEMPLATE, obj(
        {"message": TEMPLATE, "code": {"type": "string", "pattern": FAIL_CODE_RE.pattern}},
        ("message",), "Ends the run failed on purpose (exit 1) with this message and code.")]},
    FAIL_KEYS, _fail_row, ends="fail", retries=False,
    retry_fix="remove `retry:`: a fail node fails on purpose, and again the same way")
# Made by the include flattening (graph.py), never written in a file.
INCLUDE_ENTRY = KindDef("include_entry", "Entering an included workflow.", "↘", {})
INCLUDE_EXIT = KindDef("include_exit", "Leaving an included workflow by a named exit.", "↗", {})

BUILTIN_KINDS: tuple[KindDef, ...] = (AGENT, DECISION, COMPUTE, ACTION, NOTIFY, CHECKPOINT, FAIL,
                                      INCLUDE_ENTRY, INCLUDE_EXIT)
