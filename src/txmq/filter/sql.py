"""SQL92 subscription expressions: RocketMQ's selector grammar (``filter/.../SelectorParser.jj``), parsed once
by lark's LALR parser and compiled to nested closures that the pull path calls per message.

The grammar and its precedence are RocketMQ's: ``OR`` < ``AND`` < ``=``, ``<>``, ``IS [NOT] NULL`` < ``>``,
``>=``, ``<``, ``<=``, ``[NOT] BETWEEN``, ``[NOT] IN``, ``[NOT] CONTAINS|STARTSWITH|ENDSWITH`` < unary ``+``,
``-``, ``NOT``. So ``NOT a = 1`` reads ``(NOT a) = 1``, as in RocketMQ; write ``NOT (a = 1)``.

Evaluation is RocketMQ's three-valued logic over the message's properties (all strings): a missing property is
NULL, a comparison with NULL is unknown, and only a TRUE result matches. A string property compared with a number
is read as that number's type (``a > 5`` needs an integer in ``a``; ``a > 5.0`` takes any decimal); one that does
not read as a number makes the whole expression not match, as RocketMQ's evaluation error does.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lark import Lark, Token, Transformer_NonRecursive, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken, VisitError

Props = Mapping[str, str]
Matcher = Callable[[Props], bool]
Evaluation = Callable[[Props], bool | None]

# RocketMQ bounds none of these (its parser is Java, about a microsecond a token). Here a compile runs on the
# broker's loop at about 10 µs a token, so the tokens bound what one subscription, heartbeat or pull costs it.
MAX_EXPRESSION_CHARS = 16_384  # one subscription's text: what is lexed and kept
MAX_TOKENS = 1_024  # one subscription's names, literals, operators and parentheses: ~500 IN items, ~250 comparisons
MAX_DEPTH = 64  # nesting (NOT, -): evaluation recurses once per level
# What is kept, compiled or refused: RocketMQ's parse cache keeps 100 expressions and their refusals. A compiled
# expression takes up to about 50 bytes per character of its text, so the characters bound the cache's memory.
COMPILED_CACHE = 256
COMPILED_CACHE_CHARS = 262_144

KEYWORDS = ("NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS", "STARTSWITH",
             "ENDSWITH")
_GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr (_OR and_expr)*
?and_expr: eq_expr (_AND eq_expr)*
?eq_expr: cmp_expr
    | eq_expr "=" cmp_expr -> eq
    | eq_expr "<>" cmp_expr -> ne
    | eq_expr _IS _NULL -> is_null
    | eq_expr _IS _NOT _NULL -> is_not_null
?cmp_expr: unary
    | cmp_expr ">" unary -> gt
    | cmp_expr ">=" unary -> ge
    | cmp_expr "<" unary -> lt
    | cmp_expr "<=" unary -> le
    | cmp_expr _CONTAINS string -> contains
    | cmp_expr _NOT _CONTAINS string -> not_contains
    | cmp_expr _STARTSWITH string -> startswith
    | cmp_expr _NOT _STARTSWITH string -> not_startswith
    | cmp_expr _ENDSWITH string -> endswith
    | cmp_expr _NOT _ENDSWITH string -> not_endswith
    | cmp_expr _BETWEEN unary _AND unary -> between
    | cmp_expr _NOT _BETWEEN unary _AND unary -> not_between
    | cmp_expr _IN "(" string ("," string)* ")" -> in_
    | cmp_expr _NOT _IN "(" string ("," string)* ")" -> not_in
?unary: primary
    | "+" unary
    | "-" unary -> neg
    | _NOT unary -> not_
?primary: string
    | DECIMAL -> decimal
    | FLOAT -> float_
    | _TRUE -> true
    | _FALSE -> false
    | _NULL -> null
    | ID -> prop
    | "(" or_expr ")"
string: STRING

FLOAT.3: /[0-9]+\.[0-9]*([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+/
DECIMAL.2: /(0|[1-9][0-9]*)[lL]?/
STRING: /'(''|[^'])*'/
ID: /[A-Za-z_$][A-Za-z0-9_$]*/
%ignore /[ \t\n\r\f]+/
%ignore /--[^\n\r]*/
%ignore /\/\*(.|\n|\r)*?\*\//
""" + "\n".join(f"_{k}.2: /{k}(?![A-Za-z0-9_$])/i" for k in KEYWORDS)

_READABLE = {"ID": "a property name", "STRING": "a string", "DECIMAL": "a number", "FLOAT": "a number",
             "$END": "the end"}


class SqlFilterError(ValueError):
    """An expression RocketMQ's grammar refuses, with where (1-based line and column; 0 when not known)."""

    def __init__(self, reason: str, line: int = 0, column: int = 0) -> None:
        where = f" at line {line}, column {column}" if line > 0 else ""
        super().__init__(f"invalid SQL92 expression: {reason}{where}")
        self.reason, self.line, self.column = reason, line, column

    def fresh(self) -> SqlFilterError:
        """The same refusal, not yet raised."""
        return SqlFilterError(self.reason, self.line, self.column)


class Unknown(Exception):
    """A value that cannot be compared (a property that does not read as the number it meets): RocketMQ's
    evaluation error, after which the message does not match."""


@functools.cache
def _parser() -> Lark:
    return Lark(_GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=False)


def compile_sql(text: str) -> Matcher:
    """The matcher of one expression: True for the properties of a message it selects. Raises SqlFilterError."""
    root = compile_root(text)

    def matches(props: Props) -> bool:
        try:
            return root(props) is True
        except Unknown:
            return False

    return matches


class CompiledCache:
    """The expressions compiled or refused, most recently used last (RocketMQ's ``SelectorParser`` parse cache):
    a subscription named again, by each pull or heartbeat, costs a lookup; a refusal is kept too, so a client that
    repeats a bad expression does not have it parsed again. At most ``entries`` of them and ``chars`` characters
    of text in all: the least recently used go first."""

    def __init__(self, entries: int = COMPILED_CACHE, chars: int = COMPILED_CACHE_CHARS) -> None:
        self.entries, self.chars = entries, chars
        self.kept: OrderedDict[str, Evaluation | SqlFilterError] = OrderedDict()
        self.kept_chars = 0

    def get(self, text: str) -> Evaluation:
        """The compiled ``text``, compiling it when it is not kept; raises its SqlFilterError."""
        found = self.kept.get(text)
        if found is None:
            try:
                found = _compile(text)
            except SqlFilterError as exc:  # kept without its traceback and context: they hold the parser's state
                found = exc.fresh()
            self._keep(text, found)
        else:
            self.kept.move_to_end(text)
        if isinstance(found, SqlFilterError):
            raise found.fresh()  # each raise its own: the kept one must not gather the callers' frames
        return found

    def _keep(self, text: str, found: Evaluation | SqlFilterError) -> None:
        self.kept[text] = found
        self.kept_chars += len(text)
        while len(self.kept) > self.entries or self.kept_chars > self.chars:
            oldest, _ = self.kept.popitem(last=False)
            self.kept_chars -= len(oldest)


_CACHE = CompiledCache()


def compile_root(text: str) -> Evaluation:
    """The expression's three-valued evaluation (TRUE, FALSE, None for unknown), which raises ``Unknown`` for a
    value that cannot be compared (the message then does not match). Raises SqlFilterError. Compiled once while
    the broker's cache keeps it."""
    return _CACHE.get(text)


def _compile(text: str) -> Evaluation:
    if len(text) > MAX_EXPRESSION_CHARS:
        raise SqlFilterError(f"longer than {MAX_EXPRESSION_CHARS} characters")
    if not text.strip():
        raise SqlFilterError("empty expression")
    try:
        tree = _parse(text)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text) from None
    try:
        node = _Compiler().transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, SqlFilterError):
            raise exc.orig_exc from None
        raise
    return _as_boolean(node).fn


def _parse(text: str) -> Tree[Token]:
    """The expression's tree, fed token by token: beyond ``MAX_TOKENS`` it is refused where the lexer got to, so
    a compile costs at most that many tokens, however the text is made."""
    parser = _parser().parse_interactive(text)
    last = None
    for count, last in enumerate(parser.iter_parse(), 1):
        if count > MAX_TOKENS:
            raise SqlFilterError(f"more than {MAX_TOKENS} tokens", last.line or 0, last.column or 0)
    tree: Tree[Token] = parser.feed_eof(last)
    return tree


def _syntax_error(exc: UnexpectedInput, text: str) -> SqlFilterError:
    line, column = max(exc.line, 0), max(exc.column, 0)
    if isinstance(exc, UnexpectedCharacters):
        return SqlFilterError(f"unexpected character {exc.char!r}", line, column)
    if isinstance(exc, UnexpectedToken) and exc.token.type != "$END":
        expected = sorted({_readable(name) for name in exc.accepts or exc.expected})
        return SqlFilterError(f"unexpected {exc.token.value!r}, expected {' or '.join(expected)}", line, column)
    lines = text.splitlines() or [""]
    return SqlFilterError("unexpected end of expression", len(lines), len(lines[-1]) + 1)


def _readable(terminal: str) -> str:
    if terminal in _READABLE:
        return _READABLE[terminal]
    if terminal.startswith("_") and terminal[1:] in KEYWORDS:
        return terminal[1:]
    pattern = _parser().get_terminal(terminal).pattern
    return repr(pattern.value) if pattern.type == "str" else terminal


# --- compiled nodes -----------------------------------------------------------------------------------------

_NO_VALUE = object()


@dataclass(slots=True, frozen=True)
class _Node:
    """A compiled sub-expression: ``fn`` evaluates it. ``boolean``: it yields TRUE, FALSE or NULL (RocketMQ's
    BooleanExpression); ``const``: its value when it is a literal; ``prop``: the name when it is a property."""

    fn: Callable[[Props], Any]
    line: int
    column: int
    depth: int = 1
    boolean: bool = False
    const: Any = _NO_VALUE
    prop: str | None = None

    @property
    def is_const(self) -> bool:
        return self.const is not _NO_VALUE


def _constant(value: Any, line: int, column: int) -> _Node:
    return _Node(lambda _p: value, line, column, boolean=value is None or type(value) is bool, const=value)


def _as_boolean(node: _Node) -> _Node:
    """RocketMQ's ``asBooleanExpression``: a property becomes a boolean cast (a string is never TRUE); any other
    value that is not boolean is refused."""
    if node.boolean:
        return node
    if node.prop is not None:
        name = node.prop

        def cast(p: Props) -> bool | None:
            v = p.get(name)
            return None if v is None else v is True

        return _Node(cast, node.line, node.column, node.depth, boolean=True)
    raise SqlFilterError("expression will not result in a boolean value", node.line, node.column)


_INTEGER = re.compile(r"[+-]?0*([0-9]{1,19})\Z")  # at most 19 significant digits: a long's, before the range
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_SHORT_DIGITS = 18  # digits that are always a long: the pull path's ``int`` without the checks


def _long(text: str) -> int:
    """Java's ``Long.valueOf``: an optional sign and digits within a long, else ``Unknown`` (a longer run of digits
    must not reach ``int``, which refuses over 4,300 with a ValueError of its own)."""
    if _INTEGER.match(text):
        value = int(text)
        if _LONG_MIN <= value <= _LONG_MAX:
            return value
    raise Unknown


_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)\Z")
_HEX_DOUBLE = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?\Z")
_JAVA_BLANKS = "".join(map(chr, range(33)))  # what Java's String.trim removes


def _double(text: str) -> float:
    """Java's ``Double.valueOf``: blanks trimmed, ASCII digits, ``NaN``, ``Infinity``, a ``f``/``d`` suffix,
    hexadecimal with a binary exponent; else ``Unknown`` (Python's ``float`` takes underscores, ``inf`` and other
    digits, and refuses suffixes). A finite number in ASCII without underscores, which both read alike, takes
    Python's ``float`` alone: the pull path's common case."""
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(value) and text.isascii() and "_" not in text:
            return value
    if not _DOUBLE.match(text):
        text = text.strip(_JAVA_BLANKS)
        if _HEX_DOUBLE.match(text):
            try:
                return float.fromhex(text.rstrip("fFdD"))
            except OverflowError:
                return float("-inf" if text.startswith("-") else "inf")
        if not _DOUBLE.match(text):
            raise Unknown
    return float(text.rstrip("fFdD"))


def _number(text: str, like: Any) -> int | float:
    """A property read as the type of the number it meets (Java's ``Long.valueOf`` / ``Double.valueOf``)."""
    return _long(text) if type(like) is int else _double(text)


def _coerce(lv: Any, rv: Any) -> tuple[Any, Any] | None:
    """Two non-NULL values made comparable as RocketMQ converts them (strings to the other side's type), or None
    when they never compare (a boolean and a number)."""
    tl, tr = type(lv), type(rv)
    if tl is tr:
        return lv, rv
    if tl is str:
        return (lv.lower() == "true", rv) if tr is bool else (_number(lv, rv), rv)
    if tr is str:
        return (lv, rv.lower() == "true") if tl is bool else (lv, _number(rv, lv))
    if tl is bool or tr is bool:
        return None
    return lv, rv


def _ordering(op: Callable[[Any, Any], bool], left: _Node, right: _Node) -> Callable[[Props], bool | None]:
    lf, rf = left.fn, right.fn
    if left.prop is not None and right.is_const:  # the common shape, ``a > 5``: one lookup, one conversion
        name, c = left.prop, right.const
        if type(c) is int:

            def prop_vs_int(p: Props) -> bool | None:
                v = p.get(name)
                if v is None:
                    return None
                return op(int(v) if len(v) <= _SHORT_DIGITS and v.isdigit() and v.isascii() else _long(v), c)

            return prop_vs_int

        def prop_vs_const(p: Props) -> bool | None:
            v = p.get(name)
            return None if v is None else op(_number(v, c), c)

        return prop_vs_const

    def ordering(p: Props) -> bool | None:
        lv = lf(p)
        if lv is None:
            return None
        rv = rf(p)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:  # RocketMQ compares two strings only as numbers
            lv, rv = _number(lv, 0.0), _number(rv, 0.0)
        pair = _coerce(lv, rv)
        return None if pair is None else op(*pair)

    return ordering


def _equal(left: _Node, right: _Node) -> Callable[[Props], bool | None]:
    lf, rf = left.fn, right.fn
    if left.prop is not None and right.is_const and type(right.const) is str:  # ``a = 'x'``
        name, c = left.prop, right.const

        def prop_is(p: Props) -> bool | None:
            v = p.get(name)
            return None if v is None else v == c

        return prop_is

    def equal(p: Props) -> bool | None:
        lv, rv = lf(p), rf(p)
        if lv is None:
            return True if rv is None else None
        if rv is None:
            return False
        pair = _coerce(lv, rv)
        return pair is not None and pair[0] == pair[1]

    return equal


def _negated(fn: Callable[[Props], bool | None]) -> Callable[[Props], bool | None]:
    def negated(p: Props) -> bool | None:
        v = fn(p)
        return None if v is None else not v

    return negated


def _string_test(name: str, left: _Node, search: str, negate: bool) -> Callable[[Props], bool]:
    """CONTAINS, STARTSWITH, ENDSWITH and their NOTs: FALSE for a NULL or non-string value and for an empty
    search string, either way (RocketMQ 5)."""
    test = {"contains": str.__contains__, "startswith": str.startswith, "endswith": str.endswith}[name]
    lf = left.fn

    def string_test(p: Props) -> bool:
        v = lf(p)
        if type(v) is not str or not search:
            return False
        return test(v, search) is not negate

    return string_test


def _all(fns: list[Callable[[Props], bool | None]]) -> Callable[[Props], bool | None]:
    if len(fns) == 2:  # the common AND, and BETWEEN: no loop
        first, second = fns

        def both(p: Props) -> bool | None:
            x = first(p)
            if x is False:
                return False
            y = second(p)
            if y is False:
                return False
            return None if x is None or y is None else True

        return both

    def all_of(p: Props) -> bool | None:
        unknown = False
        for f in fns:
            v = f(p)
            if v is False:
                return False
            if v is None:
                unknown = True
        return None if unknown else True

    return all_of


def _any(fns: list[Callable[[Props], bool | None]]) -> Callable[[Props], bool | None]:
    def any_of(p: Props) -> bool | None:
        unknown = False
        for f in fns:
            v = f(p)
            if v is True:
                return True
            if v is None:
                unknown = True
        return None if unknown else False

    return any_of


_ORDER = {"gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le}
_SYMBOL = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}


def _check_ordered(node: _Node) -> None:
    """RocketMQ's ``checkLessThanOperand``: only numbers and non-boolean values are ordered."""
    if node.is_const and (type(node.const) not in (int, float)):
        raise SqlFilterError(f"value {_show(node.const)} cannot be compared", node.line, node.column)
    if node.boolean:
        raise SqlFilterError("a boolean value cannot be compared", node.line, node.column)


def _show(value: Any) -> str:
    if value is None:
        return "NULL"
    if type(value) is bool:
        return "TRUE" if value else "FALSE"
    return repr(value)


@v_args(meta=True)
class _Compiler(Transformer_NonRecursive):
    """Tree to ``_Node``, bottom up without recursion (a long expression must not exhaust the stack); each rule
    checks what RocketMQ checks when it builds the expression."""

    def _node(self, meta: Any, fn: Callable[[Props], Any], children: list[_Node], **kw: Any) -> _Node:
        depth = 1 + max((c.depth for c in children), default=0)
        if depth > MAX_DEPTH:
            raise SqlFilterError(f"nested deeper than {MAX_DEPTH} levels", meta.line, meta.column)
        return _Node(fn, meta.line, meta.column, depth, **kw)

    # literals and properties
    def string(self, meta: Any, children: list[Token]) -> _Node:
        raw = children[0].value
        return _constant(raw[1:-1].replace("''", "'"), meta.line, meta.column)

    def decimal(self, meta: Any, children: list[Token]) -> _Node:
        value = int(children[0].value.rstrip("lL"))
        if value >= 1 << 63:
            raise SqlFilterError(f"{children[0].value} is beyond a long", meta.line, meta.column)
        return _constant(value, meta.line, meta.column)

    def float_(self, meta: Any, children: list[Token]) -> _Node:
        value = float(children[0].value)
        if value == float("inf"):
            raise SqlFilterError(f"{children[0].value} is beyond a double", meta.line, meta.column)
        return _constant(value, meta.line, meta.column)

    def true(self, meta: Any, _children: list[Any]) -> _Node:
        return _constant(True, meta.line, meta.column)

    def false(self, meta: Any, _children: list[Any]) -> _Node:
        return _constant(False, meta.line, meta.column)

    def null(self, meta: Any, _children: list[Any]) -> _Node:
        return _constant(None, meta.line, meta.column)

    def prop(self, meta: Any, children: list[Token]) -> _Node:
        name = str(children[0].value)
        return _Node(lambda p: p.get(name), meta.line, meta.column, prop=name)

    # unary
    def neg(self, meta: Any, children: list[_Node]) -> _Node:
        (x,) = children
        if x.is_const:
            if type(x.const) not in (int, float):
                raise SqlFilterError(f"{_show(x.const)} cannot be negated", x.line, x.column)
            return _constant(-x.const, meta.line, meta.column)
        xf = x.fn

        def negate(p: Props) -> int | float | None:
            v = xf(p)
            return -v if type(v) in (int, float) else None

        return self._node(meta, negate, children)

    def not_(self, meta: Any, children: list[_Node]) -> _Node:
        return self._node(meta, _negated(_as_boolean(children[0]).fn), children, boolean=True)

    # logic
    def or_expr(self, meta: Any, children: list[_Node]) -> _Node:
        return self._node(meta, _any([_as_boolean(c).fn for c in children]), children, boolean=True)

    def and_expr(self, meta: Any, children: list[_Node]) -> _Node:
        return self._node(meta, _all([_as_boolean(c).fn for c in children]), children, boolean=True)

    # equality
    def _equality(self, meta: Any, children: list[_Node], negate: bool) -> _Node:
        left, right = children
        for side in children:
            if side.is_const and side.const is None:
                raise SqlFilterError("NULL cannot be compared (use IS NULL)", side.line, side.column)
        if left.is_const and right.is_const and left.boolean != right.boolean:
            raise SqlFilterError(f"{_show(left.const)} cannot be compared with {_show(right.const)}",
                                 meta.line, meta.column)
        fn = _equal(left, right)
        return self._node(meta, _negated(fn) if negate else fn, children, boolean=True)

    def eq(self, meta: Any, children: list[_Node]) -> _Node:
        return self._equality(meta, children, False)

    def ne(self, meta: Any, children: list[_Node]) -> _Node:
        return self._equality(meta, children, True)

    def is_null(self, meta: Any, children: list[_Node]) -> _Node:
        xf = children[0].fn
        return self._node(meta, lambda p: xf(p) is None, children, boolean=True)

    def is_not_null(self, meta: Any, children: list[_Node]) -> _Node:
        xf = children[0].fn
        return self._node(meta, lambda p: xf(p) is not None, children, boolean=True)

    # comparison
    def _order(self, meta: Any, children: list[_Node], name: str) -> _Node:
        for side in children:
            _check_ordered(side)
        return self._node(meta, _ordering(_ORDER[name], *children), children, boolean=True)

    def gt(self, meta: Any, children: list[_Node]) -> _Node:
        return self._order(meta, children, "gt")

    def ge(self, meta: Any, children: list[_Node]) -> _Node:
        return self._order(meta, children, "ge")

    def lt(self, meta: Any, children: list[_Node]) -> _Node:
        return self._order(meta, children, "lt")

    def le(self, meta: Any, children: list[_Node]) -> _Node:
        return self._order(meta, children, "le")

    def between(self, meta: Any, children: list[_Node]) -> _Node:
        value, low, high = children
        for bound in (low, high):
            if bound.is_const and bound.const is None:
                raise SqlFilterError("the bounds of BETWEEN cannot be NULL", bound.line, bound.column)
        for side in children:
            _check_ordered(side)
        if low.is_const and high.is_const and low.const > high.const:
            raise SqlFilterError(f"BETWEEN {_show(low.const)} AND {_show(high.const)}: the first bound is above "
                                 "the second", meta.line, meta.column)
        fn = _all([_ordering(operator.ge, value, low), _ordering(operator.le, value, high)])
        return self._node(meta, fn, children, boolean=True)

    def not_between(self, meta: Any, children: list[_Node]) -> _Node:
        value, low, high = children
        for side in children:
            _check_ordered(side)
        fn = _any([_ordering(operator.lt, value, low), _ordering(operator.gt, value, high)])
        return self._node(meta, fn, children, boolean=True)

    def _in(self, meta: Any, children: list[_Node], negate: bool) -> _Node:
        left, *items = children
        if left.prop is None:
            raise SqlFilterError("IN needs a property on its left", left.line, left.column)
        name, values = left.prop, frozenset(item.const for item in items)

        def member(p: Props) -> bool | None:
            v = p.get(name)
            return None if v is None else (v in values) is not negate

        return self._node(meta, member, [left], boolean=True)

    def in_(self, meta: Any, children: list[_Node]) -> _Node:
        return self._in(meta, children, False)

    def not_in(self, meta: Any, children: list[_Node]) -> _Node:
        return self._in(meta, children, True)

    def _string(self, meta: Any, children: list[_Node], name: str, negate: bool) -> _Node:
        left, search = children
        return self._node(meta, _string_test(name, left, search.const, negate), [left], boolean=True)

    def contains(self, meta: Any, children: list[_Node]) -> _Node:
        return self._string(meta, children, "contains", False)

    def not_contains(self, meta: Any, children: list[_Node]) -> _Node:
        return self._string(meta, children, "contains", True)

    def startswith(self, meta: Any, children: list[_Node]) -> _Node:
        return self._string(meta, children, "startswith", False)

    def not_startswith(self, meta: Any, children: list[_Node]) -> _Node:
        return self._string(meta, children, "startswith", True)

    def endswith(self, meta: Any, children: list[_Node]) -> _Node:
        return self._string(meta, children, "endswith", False)

    def not_endswith(self, meta: Any, children: list[_Node]) -> _Node:
        return self._string(meta, children, "endswith", True)
