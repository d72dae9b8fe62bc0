"""Templates validate need not parse: every tag an expression this module can read.

Jinja's parser costs ~1 ms a text, and a workflow's templates are mostly
expressions: substitutions (`{{ input.task }}`, `{{ outputs.plan | tojson }}`), sums
(`{{ outputs.count + 1 }}`), filters with arguments (`{{ project.root |
default('.') }}`) and dict literals (`{{ {'task': input.task | upper, 'n':
(input.paths | default([])) | length} }}`). A 5,000-node chain of sums spent 3/4 of
its compile parsing them, and a corpus of dict literals half of its validate (issue
34 item 18). A text whose every tag is `{{ expression }}` or a plain `{% for %}`
loop is read here instead, by a recursive descent that mirrors Jinja's own
(`jinja2/parser.py`, precedence level by level) over a subset of its tokens (a
regular expression first for the plainest tags), and what the checks would learn
from its tree is read off the walk:

- syntax: none (every token is one Jinja token, in an order its parser accepts);
- names read: every name loaded that no enclosing loop binds (its targets and
  `loop`); references: `input|outputs|results` `.KEY`,
  `['KEY']` and `.get('KEY')` (not `.items/keys/values/get` themselves);
- budget: no operator, filter, call or `~` whose operands are all constant (those
  the budget check tries), no loop over a constant (whose iterations it counts),
  and at least one name read (else the whole text is a constant it renders).

Anything the descent does not know is left to the full parse: other blocks
(`if`, `set`, a loop's `else` or `recursive`, ...), comments,
whitespace control, `**`, `*args`, slices, floats and integers other than plain
decimals, strings with backslashes or newlines, non-ASCII names, keywords and the
sandbox's globals as names, and any text the descent would refuse (the parse then
reports the error in Jinja's words). `tests/unit/compiler/test_simple_tags.py`
compares the descent with the parse on named and generated texts.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

#: The context mappings whose keys validate checks (input keys, node ids).
ROOTS = ("input", "outputs", "results")
# Mapping methods on those: `outputs.items()` iterates, it names no node (the sandbox
# resolves `outputs.items` to the method, whatever the nodes are called).
MAPPING_METHODS = ("items", "keys", "values", "get")

# Names the descent leaves to the parse: words Jinja's grammar gives a meaning to in
# some position (a name there would be read differently), and the sandbox's globals
# (their values make a part constant, which the budget check would try).
_NOT_A_NAME = frozenset({
    "and", "or", "not", "in", "is", "if", "else", "for", "recursive",
    "range", "lipsum", "dict", "joiner", "cycler", "namespace"})
_CONSTANTS = frozenset({"true", "false", "none", "True", "False", "None"})

# One token inside `{{ }}`, in the order of Jinja's tag rules (integer before name,
# longest operator first). A token Jinja would read longer (`1.5`, `1_0`, `0x1`,
# `abc` followed by a non-ASCII letter) does not match here: the text is left over.
_TOKENS = r"""[ \t\r\n]*(?:
    (?P<end>END)
  | (?P<int>(?:0|[1-9][0-9]*)(?![\w.]))
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)(?![A-Za-z0-9_]|[^\x00-\x7f])
  | (?P<str>'[^'\\\r\n]*'|"[^"\\\r\n]*")
  | (?P<op>//|\*\*|==|!=|<=|>=|[-+*/%~\[\](){}=.:|,<>])
)"""
_TOKEN = re.compile(_TOKENS.replace("END", r"-?\}\}"), re.VERBOSE)  # in {{ }}
_BLOCK_TOKEN = re.compile(_TOKENS.replace("END", r"[-+]?%\}"), re.VERBOSE)  # in {% %}
_TAG_START = re.compile(r"\{[{%#]")
# Most tags are dotted names with filters, joined by operators with single literals
# (`{{ outputs.plan | tojson }}`, `{{ outputs.count + 1 }}`): a regular expression
# reads those ~10x faster than the descent, and finds the same (the names, each
# `root.key`, nothing constant: no two literals meet at an operator, and a literal
# takes no filter). Every other tag goes to the descent.
#     tag  = "{{" [literal op] term {op [literal op] term} [op literal] "}}"
#     term = name {"." name} {"|" filter}
_ID = r"[A-Za-z_][A-Za-z0-9_]*(?![A-Za-z0-9_]|[^\x00-\x7f])"  # whole, as Jinja reads it
_NAME = rf"(?!(?:{'|'.join(sorted(_NOT_A_NAME | _CONSTANTS))})\b){_ID}"
_TERM = rf"{_NAME}(?:\.{_ID})*(?:[ \t\r\n]*\|[ \t\r\n]*{_ID})*"
_LITERAL = r"""(?:0|[1-9][0-9]*|'[^'\\\r\n]*'|"[^"\\\r\n]*")(?![\w.'"])"""
_OP = r"(?://|==|!=|<=|>=|[-+*/%~<>]|(?:and|or)\b)"
_W = r"[ \t\r\n]*"
_SIMPLE = re.compile(
    rf"\{{\{{(?![-+]){_W}(?:{_LITERAL}{_W}{_OP}{_W})?{_TERM}"
    rf"(?:{_W}{_OP}{_W}(?:{_LITERAL}{_W}{_OP}{_W})?{_TERM})*"
    rf"(?:{_W}{_OP}{_W}{_LITERAL})?{_W}\}}\}}", re.ASCII)
# In a tag _SIMPLE matched: a string (skipped), a filter (skipped), or a term's
# dotted name (an operator word is no term: a term never starts with one).
_TERMS = re.compile(rf"""'[^']*'|"[^"]*"|\|{_W}{_ID}|(?<![\w.])({_ID})(?:\.({_ID}))?""",
                    re.ASCII)
_OPERATOR_WORDS = frozenset({"and", "or"})
_CLOSE = {"(": ")", "[": "]", "{": "}"}
# Binary operators by precedence level, as Jinja's parse_or .. parse_math2 nest them
# (`**` is refused by the tokens; `not` is the prefix at level 2).
_NOT, _COMPARE_LEVEL, _CONCAT_LEVEL = 2, 3, 5
_LEVEL = {"or": 0, "and": 1,
          "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3, "in": 3,
          "+": 4, "-": 4, "~": 5, "*": 6, "/": 6, "//": 6, "%": 6}
_PRIMARY_START = frozenset({"name", "str", "int", "(", "[", "{"})


class Names(NamedTuple):
    """What the reference check reads of a text: the names it reads and its
    `root.key` references as (root, key, line)."""
    free: frozenset[str]
    refs: tuple[tuple[str, str, int], ...]


class _Refused(Exception):
    """The descent does not take this text: the full parse reads it."""


class _Tok(NamedTuple):
    kind: str  # "name", "str", "int", "end", or the operator itself
    value: str
    pos: int


class _Expr(NamedTuple):
    """What the checks need of a node: whether it is constant (as the budget check
    judges: literals and containers of them), a bare name or string it is, and
    `root.attr` when it reads an attribute of a context mapping (for `.get('KEY')`)."""
    const: bool
    name: str | None = None
    string: str | None = None
    root_attr: tuple[str, str] | None = None


_CONSTANT = _Expr(True)
_VARIABLE = _Expr(False)


def _tokens(text: str, pos: int, *, block: bool = False) -> tuple[list[_Tok], int]:
    """The tokens of the tag whose `{{` (`{%`) ends at `pos`, and where its `}}`
    (`%}`) ends."""
    toks: list[_Tok] = []
    open_: list[str] = []
    match = (_BLOCK_TOKEN if block else _TOKEN).match
    while True:
        m = match(text, pos)
        if m is None:
            raise _Refused
        kind = m.lastgroup
        assert kind is not None
        start, pos = m.start(kind), m.end()
        if kind == "end":
            if not open_:
                if text[start] in "-+":  # `-}}`, `+%}`: whitespace control, the parse's
                    raise _Refused
                toks.append(_Tok("end", "", start))
                return toks, pos
            # Inside brackets `}}` is two braces, `-}}` a minus, `%}` a modulo and a
            # brace (as Jinja's lexer reads them)
            kind, pos = "op", start + 1
        value = text[start:pos]
        if kind == "op":
            if value in _CLOSE:
                open_.append(_CLOSE[value])
            elif value in (")", "]", "}"):
                if not open_ or open_.pop() != value:
                    raise _Refused
            elif value == "**":
                raise _Refused
            kind = value
        toks.append(_Tok(kind, value, start))


class _Descent:
    """Jinja's expression parser (`Parser.parse_tuple` down to `parse_primary`) over
    one tag's tokens, collecting names and references instead of building a tree."""

    def __init__(self, text: str, toks: list[_Tok], free: set[str],
                 refs: list[tuple[str, str, int]], bound: frozenset[str]) -> None:
        self.text, self.toks, self.i = text, toks, 0
        self.free, self.refs, self.bound = free, refs, bound

    # -- the token stream --

    @property
    def cur(self) -> _Tok:
        return self.toks[self.i]

    def at(self, kind: str, value: str | None = None) -> bool:
        tok = self.toks[self.i]
        return tok.kind == kind and (value is None or tok.value == value)

    def at_word(self, word: str) -> bool:
        return self.at("name", word)

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def expect(self, kind: str) -> _Tok:
        if self.toks[self.i].kind != kind:
            raise _Refused
        return self.take()

    def line(self, tok: _Tok) -> int:
        return self.text.count("\n", 0, tok.pos) + 1

    def risky(self, const: bool) -> _Expr:
        """An operator, filter, call or `~`: constant ones the budget check tries."""
        if const:
            raise _Refused
        return _VARIABLE

    # -- the grammar, as jinja2.parser.Parser --

    def tag(self) -> None:
        self.tuple_(explicit=False)
        self.expect("end")

    def tuple_(self, *, explicit: bool, condexpr: bool = True) -> _Expr:
        items: list[_Expr] = []
        is_tuple = False
        while True:
            if items:
                self.expect(",")
            if self.at("end") or self.at(")"):
                break
            items.append(self.expression() if condexpr else self.binary(0))
            if not self.at(","):
                break
            is_tuple = True
        if not is_tuple:
            if items:
                return items[0]
            if not explicit:
                raise _Refused
        return _Expr(all(e.const for e in items))

    def expression(self) -> _Expr:  # parse_condexpr
        expr1 = self.binary(0)
        while self.at_word("if"):
            self.take()
            expr2 = self.binary(0)
            expr3 = None
            if self.at_word("else"):
                self.take()
                expr3 = self.expression()
            expr1 = _Expr(expr1.const and expr2.const and (expr3 is None or expr3.const))
        return expr1

    def binary(self, least: int) -> _Expr:
        """parse_or down to parse_math2 (levels 0-6, see _LEVEL) by precedence
        climbing: operators of level `least` and up; the trees (and so what is
        constant) are Jinja's: left-assoc, comparisons and `~` chained."""
        if least <= _NOT and self.at_word("not"):  # parse_not: `not` binds above `and`
            self.take()
            left = _Expr(self.binary(_NOT).const)
        else:
            left = self.unary(with_filter=True)
        while True:
            level = self.level()
            if level is None or level < least:
                return left
            if level == _COMPARE_LEVEL:  # a chain, never risky (Compare is no BinExpr)
                const = left.const
                while self.level() == _COMPARE_LEVEL:
                    self.i += 2 if self.at_word("not") else 1
                    const = self.binary(_COMPARE_LEVEL + 1).const and const
                left = _Expr(const)
            elif level == _CONCAT_LEVEL:  # Concat([a, b, ...]): constant only if all are
                const = left.const
                while self.at("~"):
                    self.take()
                    const = self.binary(_CONCAT_LEVEL + 1).const and const
                left = self.risky(const)
            else:  # or, and, + - * / // %: BinExpr (And and Or are BinExprs too)
                self.take()
                right = self.binary(level + 1)
                left = self.risky(left.const and right.const)

    def level(self) -> int | None:
        """The precedence level of the binary operator at the cursor, if one is."""
        tok = self.toks[self.i]
        if tok.kind != "name":
            return _LEVEL.get(tok.kind)
        if tok.value == "not":  # only `not in` continues an expression
            after = self.toks[self.i + 1]
            return _COMPARE_LEVEL if after.kind == "name" and after.value == "in" else None
        return _LEVEL.get(tok.value)

    def unary(self, *, with_filter: bool) -> _Expr:
        if self.cur.kind in ("-", "+"):
            self.take()
            node = _Expr(self.unary(with_filter=False).const)
        else:
            node = self.primary()
        node = self.postfix(node)
        return self.filter_expr(node) if with_filter else node

    def primary(self) -> _Expr:
        tok = self.take()
        if tok.kind == "name":
            if tok.value in _CONSTANTS:
                return _CONSTANT
            if tok.value in _NOT_A_NAME:
                raise _Refused
            if tok.value not in self.bound:
                self.free.add(tok.value)
            return _Expr(False, name=tok.value)
        if tok.kind == "str":
            parts = [tok.value[1:-1]]
            while self.at("str"):  # adjacent strings are one constant
                parts.append(self.take().value[1:-1])
            return _Expr(True, string="".join(parts))
        if tok.kind == "int":
            return _CONSTANT
        if tok.kind == "(":
            node = self.tuple_(explicit=True)
            self.expect(")")
            return node
        if tok.kind == "[":
            return self.list_()
        if tok.kind == "{":
            return self.dict_()
        raise _Refused

    def list_(self) -> _Expr:
        const, first = True, True
        while not self.at("]"):
            if not first:
                self.expect(",")
                if self.at("]"):  # a trailing comma
                    break
            const = self.expression().const and const
            first = False
        self.expect("]")
        return _Expr(const)

    def dict_(self) -> _Expr:
        const, first = True, True
        while not self.at("}"):
            if not first:
                self.expect(",")
                if self.at("}"):  # a trailing comma
                    break
            key = self.expression()
            self.expect(":")
            const = self.expression().const and key.const and const
            first = False
        self.expect("}")
        return _Expr(const)

    def postfix(self, node: _Expr) -> _Expr:
        while True:
            if self.at("."):
                dot = self.take()
                attr = self.expect("name").value  # `x.0` (an item) is left to the parse
                root_attr = None
                if node.name in ROOTS:
                    assert node.name is not None
                    if attr not in MAPPING_METHODS:
                        self.refs.append((node.name, attr, self.line(dot)))
                    root_attr = (node.name, attr)
                node = _Expr(node.const, root_attr=root_attr)
            elif self.at("["):
                bracket = self.take()
                key = self.expression()
                if not self.at("]"):  # slices, tuples of keys: the parse's
                    raise _Refused
                self.take()
                if node.name in ROOTS and key.string is not None:
                    assert node.name is not None
                    self.refs.append((node.name, key.string, self.line(bracket)))
                node = _Expr(node.const and key.const)
            elif self.at("("):
                node = self.call(node)
            else:
                return node

    def call(self, node: _Expr) -> _Expr:
        paren = self.cur
        args, const = self.call_args()
        if node.root_attr is not None and node.root_attr[1] == "get" and args \
                and args[0].string is not None:
            self.refs.append((node.root_attr[0], args[0].string, self.line(paren)))
        return self.risky(node.const and const)

    def call_args(self) -> tuple[list[_Expr], bool]:
        """parse_call_args without `*args`/`**kwargs`: (positional, all constant)."""
        self.expect("(")
        args: list[_Expr] = []
        const, keywords, first = True, False, True
        while not self.at(")"):
            if not first:
                self.expect(",")
                if self.at(")"):  # a trailing comma
                    break
            if self.at("name") and self.toks[self.i + 1].kind == "=":
                self.i += 2
                keywords = True
                const = self.expression().const and const
            else:
                if keywords:  # a positional after a keyword: the parse's error
                    raise _Refused
                arg = self.expression()
                args.append(arg)
                const = arg.const and const
            first = False
        self.expect(")")
        return args, const

    def filter_expr(self, node: _Expr) -> _Expr:
        while True:
            if self.at("|"):
                node = self.filter(node)
            elif self.at_word("is"):
                node = self.test(node)
            elif self.at("("):
                node = self.call(node)
            else:
                return node

    def filter(self, node: _Expr) -> _Expr:
        while self.at("|"):
            self.take()
            self.filter_name()
            const = node.const
            if self.at("("):
                const = self.call_args()[1] and const
            node = self.risky(const)
        return node

    def filter_name(self) -> None:
        self.expect("name")
        while self.at("."):
            self.take()
            self.expect("name")

    def test(self, node: _Expr) -> _Expr:
        self.take()
        if self.at_word("not"):
            self.take()
        self.filter_name()
        const = node.const
        if self.at("("):
            const = self.call_args()[1] and const
        elif self.cur.kind in _PRIMARY_START and not (
                self.cur.kind == "name" and self.cur.value in ("else", "or", "and")):
            if self.at_word("is"):  # "You cannot chain multiple tests with is"
                raise _Refused
            const = self.postfix(self.primary()).const and const
        return _Expr(const)


class _Reader:
    """Jinja's `subparse` for the statements the descent knows: `{{ expression }}`
    and `{% for NAMES in EXPRESSION [if EXPRESSION] %}...{% endfor %}`, with the
    names a loop binds (its targets and `loop`) bound in its body, as the parse's
    scan (template_ast._Scan) binds them."""

    def __init__(self, text: str) -> None:
        self.text, self.pos, self.tags = text, 0, 0
        self.free: set[str] = set()
        self.refs: list[tuple[str, str, int]] = []

    def body(self, bound: frozenset[str], *, in_loop: bool) -> None:
        """The statements from here to the end of the text, or in a loop to its
        `{% endfor %}` (read too)."""
        text = self.text
        while True:
            start = _TAG_START.search(text, self.pos)
            if start is None:
                if in_loop:  # no `endfor`: the parse's error
                    raise _Refused
                return
            at = start.start()
            if text[at + 1] == "#" or text[at + 2:at + 3] in ("-", "+"):
                raise _Refused  # a comment, whitespace control: the parse's
            self.tags += 1
            if text[at + 1] == "%":
                toks, self.pos = _tokens(text, at + 2, block=True)
                first = toks[0]
                if first.kind == "name" and first.value == "endfor" and in_loop \
                        and toks[1].kind == "end":
                    return
                if not (first.kind == "name" and first.value == "for"):
                    raise _Refused  # if, set, macro, raw, ...: the parse's
                self.for_(toks, bound)
                continue
            simple = _SIMPLE.match(text, at)
            if simple is not None:
                for term in _TERMS.finditer(text, at + 2, simple.end() - 2):
                    root, key = term.group(1), term.group(2)
                    if root is None or root in _OPERATOR_WORDS:
                        continue
                    if root not in bound:
                        self.free.add(root)
                    if key and root in ROOTS and key not in MAPPING_METHODS:
                        self.refs.append((root, key, text.count("\n", 0, term.start()) + 1))
                self.pos = simple.end()
                continue
            toks, self.pos = _tokens(text, at + 2)
            _Descent(text, toks, self.free, self.refs, bound).tag()

    def for_(self, toks: list[_Tok], bound: frozenset[str]) -> None:
        """parse_for, for plain names as targets and no `recursive` or `else`."""
        descent = _Descent(self.text, toks, self.free, self.refs, bound)
        descent.i = 1
        targets = {"loop"}
        while True:
            name = descent.expect("name").value
            if name in _NOT_A_NAME or name in _CONSTANTS:
                raise _Refused
            targets.add(name)
            if not descent.at(","):
                break
            descent.take()
        if not descent.at_word("in"):
            raise _Refused
        descent.take()
        if descent.tuple_(explicit=False, condexpr=False).const:
            raise _Refused  # a constant loop: the budget check counts its iterations
        inner = bound | targets
        if descent.at_word("if"):
            descent.take()
            descent.bound = inner
            descent.expression()
        descent.expect("end")
        self.body(inner, in_loop=True)
        # `{% else %}` was refused in the body (not `for`), `recursive` as a name


def _read(text: str) -> Names | None:
    reader = _Reader(text)
    try:
        reader.body(frozenset(), in_loop=False)
    except (_Refused, IndexError):  # IndexError: a token read past the tag's end
        return None
    if reader.tags and not reader.free:  # all constant: the budget check renders it all
        return None
    return Names(frozenset(reader.free), tuple(reader.refs))


def only_simple_tags(text: str) -> bool:
    """Whether every tag of `text` is read here (the parse can be skipped)."""
    return simple_names(text) is not None


@lru_cache(maxsize=65536)  # the syntax, budget and reference checks each ask
def simple_names(text: str) -> Names | None:
    """The names and references of a text whose every tag the descent reads, else
    None (the full parse reads it)."""
    return _read(text)
