"""Templates validate need not parse: every tag a simple expression over names.

Jinja's parser costs ~1 ms a text, and a workflow's templates are mostly plain
substitutions (`{{ input.task }}`, `{{ outputs.plan | tojson }}`) or small sums
(`{{ outputs.count + 1 }}`, `{{ input.a ~ '-' ~ input.b }}`): a 5,000-node chain of
those spent 3/4 of its compile parsing them (issue 34 item 18). A text whose every
tag matches the grammar below always parses, and what the checks would learn from
its tree is read off the text:

    tag     = "{{" [literal op] term {op [literal op] term} [op literal] "}}"
    term    = name {"." name} {"|" filter}       a name that is not a keyword,
    literal = integer | 'string' | "string"       a constant or a global
    op      = + - * / // % ~ == != < <= > >= and or

- syntax: none (each token is one Jinja token, in an order its grammar accepts);
- names read: each term's first name; references: `input|outputs|results.KEY`;
- budget: no two literals meet at an operator and a literal takes no filter, so no
  part of the text is constant but single literals: nothing to try under the budget.

Anything else (blocks, comments, calls, subscripts, `**`, whitespace control, a
keyword or global as a name) takes the full parse.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

# Jinja's constants and keywords as names, and the sandbox's globals (whose values
# would make a part constant): such a text takes the full parse.
_NOT_A_NAME = frozenset({
    "and", "or", "not", "in", "is", "if", "else", "for", "recursive",
    "true", "false", "none", "True", "False", "None",
    "range", "lipsum", "dict", "joiner", "cycler", "namespace"})
_ID = r"[A-Za-z_]\w*\b"  # whole: `upperand` is no filter `upper` + `and`
_NAME = rf"(?!(?:{'|'.join(sorted(_NOT_A_NAME))})\b){_ID}"
_TERM = rf"{_NAME}(?:\.{_ID})*(?:\s*\|\s*{_ID})*"
_LITERAL = r"""(?:0|[1-9][0-9]*|'[^'\\{}%#\n]*'|"[^"\\{}%#\n]*")(?![\w.'"])"""
_OP = r"(?://|==|!=|<=|>=|[-+*/%~<>]|(?:and|or)\b)"
_TAG = re.compile(
    rf"\{{\{{\s*(?:{_LITERAL}\s*{_OP}\s*)?{_TERM}"
    rf"(?:\s*{_OP}\s*(?:{_LITERAL}\s*{_OP}\s*)?{_TERM})*"
    rf"(?:\s*{_OP}\s*{_LITERAL})?\s*\}}\}}", re.ASCII)
_TAG_START = re.compile(r"\{[{%#]")
# In a matched tag: a string (skipped), a filter (skipped), or a term's dotted name.
_TOKEN = re.compile(rf"""'[^']*'|"[^"]*"|\|\s*{_ID}|(?<![\w.])({_ID})((?:\.{_ID})*)""",
                    re.ASCII)
_OPERATOR_WORDS = frozenset({"and", "or"})

#: The context mappings whose keys validate checks (input keys, node ids).
ROOTS = ("input", "outputs", "results")
# Mapping methods on those: `outputs.items()` iterates, it names no node (the sandbox
# resolves `outputs.items` to the method, whatever the nodes are called).
MAPPING_METHODS = ("items", "keys", "values", "get")


class Names(NamedTuple):
    """What the reference check reads of a text: the names it reads and its
    `root.key` references as (root, key, line)."""
    free: frozenset[str]
    refs: tuple[tuple[str, str, int], ...]


def _tags(text: str) -> list[re.Match[str]] | None:
    """Every tag of `text` when each is simple, else None."""
    tags: list[re.Match[str]] = []
    pos = 0
    while True:
        start = _TAG_START.search(text, pos)
        if start is None:
            return tags
        tag = _TAG.match(text, start.start())
        if tag is None:
            return None
        tags.append(tag)
        pos = tag.end()


def only_simple_tags(text: str) -> bool:
    """Whether every tag of `text` is simple (the parse can be skipped)."""
    return simple_names(text) is not None


@lru_cache(maxsize=65536)  # the syntax, budget and reference checks each ask
def simple_names(text: str) -> Names | None:
    """The names and references of a text whose every tag is simple, else None."""
    tags = _tags(text)
    if tags is None:
        return None
    free: set[str] = set()
    refs: list[tuple[str, str, int]] = []
    for tag in tags:
        for token in _TOKEN.finditer(text, tag.start() + 2, tag.end() - 2):
            root = token.group(1)
            if root is None or root in _OPERATOR_WORDS:  # a term never starts with one
                continue
            free.add(root)
            key = token.group(2)[1:].split(".", 1)[0]
            if key and root in ROOTS and key not in MAPPING_METHODS:
                refs.append((root, key, text.count("\n", 0, token.start()) + 1))
    return Names(frozenset(free), tuple(refs))
