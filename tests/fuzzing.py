"""Structure-aware mutations of the valid definitions under fixtures/ (issue 10's fuzz
suite), shared by tests/unit/compiler/test_fuzz_definitions.py (hypothesis, a few
hundred cases) and bench/fuzz_definitions.py (10,000+ cases through the real CLI).

A case starts from a valid fixture's data and applies a few mutations to the tree
(drop, rename, retype or duplicate a key; put a hostile value or template somewhere),
then serializes it, and sometimes mutates the text too (a malformed tag, a mapping as
a key, a huge integer, a tab, a NUL, bad UTF-8, truncation, deep nesting, aliases).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures" / "definitions" / "valid"
CONTROLLER_FIXTURES = REPO / "fixtures" / "controllers" / "valid"

HOSTILE_VALUES: list[Any] = [
    None, True, 0, -1, 10**30, 1.5, float("inf"), "", " ", "\t", "x" * 5000, [], {}, [[]],
    {"a": {"b": {"c": None}}}, "{{", "{% for %}", "{{ 7**999999999 }}",
    "{{ lipsum(10**6) }}", "{% for i in range(100000) %}{% for j in range(100000) %}"
    "{% endfor %}{% endfor %}", "{{ 'a' * 10**10 }}", "{{ ''.__class__.__mro__ }}",
    "{{ input.s * input.n }}", "{{ {'a': input.nope} }}", "{{ inptu.x }}",
    "{{ outputs.nosuch.x }}", "$result.nope", "$output.a.b", "./" + "a" * 3000 + ".yaml",
    "../../../../etc/passwd", "./missing.py:fn", "os:system", "1s", "-5m", "99999999h",
    {"$ref": "http://127.0.0.1:9/x.json"}, {"$ref": "#"}, {"type": "strnig"},
    {"pattern": "^(a|aa)+$", "type": "string"}, {"type": "object", "properties": []},
    "\u202e\u0000x", "é" * 100,
]
TEXT_SNIPPETS = [
    '!!float ""', '!!int "0x"', "!!set {a, b}", "!!binary '###'", '!!timestamp "2020-13-45"',
    '!!python/object:os.system "id"', "!!bool maybe", "? [{a: 1}]\n: x", "9" * 5000,
    "&a [*a]", "*nosuch", "[" * 200 + "]" * 200, "{a: 1, a: 2}", "\t", "\x00", "\ufeff",
    "'unterminated", '"\\xZZ"', "- - - -", "key: [1, 2", "%YAML 9.9\n---", "---\n---",
]


# The four classes of compiler crashers of issue 35 item 7, kept as seeds: a 400-digit
# duration (OverflowError, or inf reaching the digest), a NUL in a hook's path, and
# `!!set` where an input, an initial_status or an expression goes.
BIG_DIGITS = "9" * 400
_SET = "__wfrun_fuzz_set__"  # replaced by a `!!set` in the YAML text


def _crasher_value(kind: int, rng: random.Random) -> Any:
    if kind == 0:
        return rng.choice([BIG_DIGITS + rng.choice(["s", "ms", "h", "d"]), int(BIG_DIGITS),
                           f"{BIG_DIGITS}.5", f"1h{BIG_DIGITS}m"])
    if kind == 1:
        return rng.choice(["./ho\x00oks.py:count_steps", "./hooks.py\x00:deploy",
                           "\x00:f", "./a\x00/../hooks.py:summarize"])
    return _SET


def seeded(data: Any, rng: random.Random) -> str:
    """A crasher class put where it crashed: a duration key, a hook, or an input,
    initial_status or compute expression; serialized as YAML."""
    kind = rng.randrange(3)
    keys = {0: ("timeout", "backoff", "max_delay", "resync"), 1: ("call", "reconcile"),
            2: ("input", "initial_status", "expr", "compute", "spec", "default")}[kind]
    paths = [p for p in _paths(data) if p and p[-1] in keys] or [
        p for p in _paths(data) if p and isinstance(_get(data, p[:-1]), dict)]
    if paths:
        path = rng.choice(paths)
        _get(data, path[:-1])[path[-1]] = _crasher_value(kind, rng)
    elif isinstance(data, dict):
        data[rng.choice(keys)] = _crasher_value(kind, rng)
    text = _as_yaml(data)
    sets = ["!!set {a, b}", "!!set {}", "!!set {1, 2.5, x}"]
    return text.replace(_SET, rng.choice(sets))


def fixture_texts() -> list[tuple[str, str]]:
    """(name, text) of every valid workflow fixture."""
    return [(p.stem, p.read_text()) for p in sorted(FIXTURES.glob("*.yaml"))]


def controller_texts() -> list[tuple[str, str]]:
    """(name, text) of every valid controller fixture (compiled as controllers)."""
    return [(f"controller:{p.stem}", p.read_text())
            for p in sorted(CONTROLLER_FIXTURES.glob("*.yaml"))]


def _load(text: str) -> Any:
    from runner.compiler._yamlio import load

    return load(text, "fixture")


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_paths(v, (*prefix, i)))
    return out


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        node = node[part]
    return node


def _typo(word: str, rng: random.Random) -> str:
    if not word:
        return "x"
    i = rng.randrange(len(word))
    op = rng.randrange(3)
    if op == 0:
        return word[:i] + word[i + 1:]
    if op == 1 and len(word) > 1:
        j = min(i + 1, len(word) - 1)
        chars = list(word)
        chars[i], chars[j] = chars[j], chars[i]
        return "".join(chars)
    return word[:i] + rng.choice("abcxyz_-") + word[i:]


def mutate_tree(data: Any, rng: random.Random, steps: int) -> Any:
    data = json.loads(json.dumps(data, default=str))
    for _ in range(steps):
        paths = _paths(data)
        path = rng.choice(paths)
        if not path:
            continue
        parent, key = _get(data, path[:-1]), path[-1]
        op = rng.randrange(6)
        if op == 0:  # drop
            del parent[key]
        elif op == 1 and isinstance(parent, dict) and isinstance(key, str):  # rename
            parent[_typo(key, rng)] = parent.pop(key)
        elif op == 2:  # a hostile value
            parent[key] = rng.choice(HOSTILE_VALUES)
        elif op == 3 and isinstance(parent, dict):  # a copy under another key
            parent[_typo(str(key), rng)] = json.loads(json.dumps(parent[key], default=str))
        elif op == 4:  # wrap in a list or a mapping
            parent[key] = rng.choice([[parent[key]], {"x": parent[key]}])
        else:  # a string value as a template slip
            value = parent[key]
            if isinstance(value, str):
                parent[key] = value + rng.choice([" {{ inptu.x }}", " {{ outputs.zz }}",
                                                  " {{", " {{ 1/0 }}", "{{ input | tojson }}"])
    return data


def mutate_text(text: str, rng: random.Random) -> str | bytes:
    lines = text.split("\n")
    op = rng.randrange(5)
    if op == 0:  # a snippet after some key
        i = rng.randrange(len(lines))
        lines[i] = lines[i] + " " + rng.choice(TEXT_SNIPPETS)
    elif op == 1:  # a line replaced by a snippet
        lines[rng.randrange(len(lines))] = rng.choice(TEXT_SNIPPETS)
    elif op == 2:  # truncated
        return text[:rng.randrange(len(text) + 1)]
    elif op == 3:  # bytes that are not UTF-8
        raw = text.encode()
        at = rng.randrange(len(raw) + 1)
        return raw[:at] + rng.choice([b"\xff", b"\xc3", b"\x00", b"\xed\xa0\x80"]) + raw[at:]
    else:  # indentation broken
        i = rng.randrange(len(lines))
        lines[i] = rng.choice(["\t", " ", "   "]) + lines[i]
    return "\n".join(lines)


def case(rng: random.Random) -> tuple[str, str | bytes]:
    """One fuzz case: (the fixture it came from, the file's text or bytes)."""
    name, text = rng.choice(fixture_texts() + controller_texts())
    kind = rng.randrange(12)
    if kind >= 10:  # the crasher seeds
        return name, seeded(_load(text), rng)
    if kind < 6:
        data = mutate_tree(_load(text), rng, rng.randint(1, 4))
        out: str | bytes = json.dumps(data, ensure_ascii=False, default=str) \
            if rng.random() < 0.5 else _as_yaml(data)
        if kind == 5 and isinstance(out, str):
            out = mutate_text(out, rng)
        return name, out
    return name, mutate_text(text, rng)


def _as_yaml(data: Any) -> str:
    import io

    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    buf = io.StringIO()
    try:
        yaml.dump(data, buf)
    except Exception:  # a value ruamel cannot represent: JSON is YAML too
        return json.dumps(data, default=str)
    return buf.getvalue()


def compile_case(root: Path, index: int, origin: str, text: str | bytes) -> list[Any]:
    """Compile one case the way wfrun would (a controller fixture's mutants as a
    controller, the rest as workflows) under `root`; its diagnostics. Raises what the
    compiler raises; the file is removed afterwards."""
    from runner.compiler import Compiler
    from runner.compiler._controllers import compile_controller
    from runner.compiler._workflows import build_catalog

    controller = origin.startswith("controller:")
    folder = root / ".wfrun" / ("controllers" if controller else "workflows")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"case{index:05d}.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    try:
        if controller:
            result: Any = compile_controller(path)
        else:
            result = Compiler(build_catalog("workflows", root, None)).compile_path(path)
        json.dumps(result.to_json())  # every result must be plain JSON
        return list(result.diagnostics)
    finally:
        path.unlink()
