"""SQL92 expressions against message properties: RocketMQ's grammar, precedence and three-valued results, and the
expressions it refuses, each with where."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.filter import FilterRefused, build_filter, wire_properties
from txmq.filter.sql import MAX_DEPTH, MAX_EXPRESSION_CHARS, MAX_TOKENS, CompiledCache, SqlFilterError, compile_sql
from txmq.message import MessageExt, encode_message

SELECTS = [
    # comparisons: a string property read as the number it meets
    ("a > 5", {"a": "6"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a >= 5 AND a <= 5", {"a": "5"}, True),
    ("a < -1", {"a": "-2"}, True),
    ("a > 5", {"a": "5.5"}, False),  # an integer literal wants an integer (Long.valueOf fails: no match)
    ("a > 5.0", {"a": "5.5"}, True),
    # a decimal as Java's Double.valueOf reads it
    ("a > 5.0", {"a": "7.5f"}, True),  # a float suffix
    ("a > 5.0", {"a": " 0x1p3 "}, True),  # hexadecimal 8.0, blanks trimmed
    ("a > 5.0", {"a": "Infinity"}, True),
    ("a > 5.0", {"a": "infinity"}, False),  # spelt as Java spells it only
    ("a > 5.0", {"a": "1_000"}, False),  # no underscores
    ("a > 5.0", {"a": "\u0667"}, False),  # an Arabic-Indic seven: ASCII digits only
    ("a > b", {"a": "7d", "b": "5"}, True),
    ("a > 5", {"a": "x"}, False),
    ("a > 5", {"a": "9223372036854775808"}, False),  # beyond a long: Long.valueOf fails
    ("a < 0", {"a": "-00009223372036854775808"}, True),  # leading zeros, the least long
    ("a > 5", {}, False),  # NULL: unknown, not a match
    ("a = 10L", {"a": "10"}, True),
    ("a = 1.5E1", {"a": "15"}, True),
    ("a = 'x'", {"a": "x"}, True),
    ("a = 'it''s'", {"a": "it's"}, True),
    ("a <> 'x'", {"a": "y"}, True),
    ("a <> 'x'", {}, False),
    ("b = TRUE", {"b": "true"}, True),
    ("b = FALSE", {"b": "yes"}, True),  # Boolean.valueOf: anything but "true" is false
    ("a = b", {}, True),  # RocketMQ: two NULLs are equal
    ("a = 1 OR b = 'x'", {"a": "abc", "b": "x"}, False),  # an evaluation error fails the whole expression
    # BETWEEN, IN, NULL tests
    ("a BETWEEN 1 AND 3", {"a": "3"}, True),
    ("a BETWEEN 1 AND 3", {"a": "4"}, False),
    ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
    ("a NOT BETWEEN 1 AND 3", {}, False),
    ("TAGS IN ('x', 'y')", {"TAGS": "y"}, True),
    ("TAGS NOT IN ('x', 'y')", {"TAGS": "y"}, False),
    ("TAGS NOT IN ('x', 'y')", {}, False),
    ("a IS NULL", {}, True),
    ("a IS NOT NULL", {"a": ""}, True),
    # RocketMQ 5's string tests: FALSE for a missing property, either way
    ("a CONTAINS 'bc'", {"a": "abcd"}, True),
    ("a NOT CONTAINS 'bc'", {"a": "abcd"}, False),
    ("a NOT CONTAINS 'bc'", {}, False),
    ("a STARTSWITH 'ab'", {"a": "abcd"}, True),
    ("a NOT STARTSWITH 'ab'", {"a": "xabcd"}, True),
    ("a ENDSWITH 'cd'", {"a": "abcd"}, True),
    ("a NOT ENDSWITH 'cd'", {"a": "abc"}, True),
    ("a CONTAINS ''", {"a": "abc"}, False),
    # logic, precedence, three values
    ("a > 5 AND b = 'x' OR c = 1", {"c": "1"}, True),
    ("(a > 5 OR b = 'x') AND c = 1", {"c": "1"}, False),
    ("NOT (a = 1)", {"a": "2"}, True),
    ("NOT (a = 1)", {}, False),  # NOT unknown is unknown
    ("a = 1 OR TRUE", {}, True),
    ("a = 1 AND FALSE", {}, False),
    ("TRUE", {}, True),
    ("flag", {"flag": "true"}, False),  # a property as a boolean: a string is never TRUE
    # keywords in any case, comments, names that start with a keyword
    ("a=1 and b between 1 and 2 or c is not null", {"c": "z"}, True),
    ("a = 1 /* note */ AND b = 2 -- the end", {"a": "1", "b": "2"}, True),
    ("notify = 'x' AND isbn = 'y' AND $id = 'z'", {"notify": "x", "isbn": "y", "$id": "z"}, True),
]


@pytest.mark.parametrize(("expression", "props", "selected"), SELECTS)
def test_expression_selects_as_rocketmq_does(expression, props, selected):
    assert compile_sql(expression)(props) is selected


REFUSED = [
    ("a >", "unexpected end of expression", 1, 4),
    ("a > 'x'", "cannot be compared", 1, 5),
    ("a > TRUE", "cannot be compared", 1, 5),
    ("a = NULL", "IS NULL", 1, 5),
    ("NOT a > 5", "cannot be compared", 1, 1),  # (NOT a) > 5: NOT binds tighter, as in RocketMQ
    ("5", "boolean", 1, 1),
    ("NOT 5", "boolean", 1, 5),
    ("a BETWEEN 3 AND 1", "first bound", 1, 1),
    ("'x' IN ('a')", "property", 1, 1),
    ("a IN (1)", "expected a string", 1, 7),
    ("a = = 1", "unexpected '='", 1, 5),
    ("a # 1", "unexpected character '#'", 1, 3),
    ("a = 1 AND\n  b >", "unexpected end", 2, 6),
    ("a = 1 AND\n  b ! 2", "unexpected character '!'", 2, 5),
    ("a IS 5", "expected NOT or NULL", 1, 6),
    ("a = 99999999999999999999", "beyond a long", 1, 5),
]


@pytest.mark.parametrize(("expression", "reason", "line", "column"), REFUSED)
def test_bad_expression_is_refused_with_its_position(expression, reason, line, column):
    with pytest.raises(SqlFilterError) as info:
        compile_sql(expression)
    assert reason in info.value.reason
    assert (info.value.line, info.value.column) == (line, column)
    assert f"line {line}, column {column}" in str(info.value)


def test_size_and_nesting_are_bounded():
    """A peer's expression must not exhaust the stack (evaluation recurses per level) nor grow without bound."""
    with pytest.raises(SqlFilterError, match="nested deeper"):
        compile_sql("NOT " * (MAX_DEPTH + 1) + "a")
    with pytest.raises(SqlFilterError, match="longer than"):
        compile_sql("a = 1 OR " * (MAX_EXPRESSION_CHARS // 9) + "a = 1")
    # AND and OR chains are flat, however long; parentheses add no level
    terms = MAX_TOKENS // 4
    assert compile_sql(" OR ".join(f"a = {i}" for i in range(terms)))({"a": str(terms - 1)})
    assert compile_sql("(" * 500 + "a = 1" + ")" * 500)({"a": "1"})


@pytest.mark.parametrize(("unit", "sep"), [("a > 1.0", " OR "), ("a IN ('x', 'y', 'z')", " AND "), ("(", ""),
                                          ("NOT", " "), ("/* a comment */ 'it''s'", " = ")])
def test_tokens_are_bounded_where_the_lexer_gets_to(unit, sep):
    """What a compile costs is its tokens, however the text is made: the one past ``MAX_TOKENS`` is refused where
    it stands, the rest of the text unread."""
    text = sep.join([unit] * (MAX_EXPRESSION_CHARS // (len(unit) + len(sep))))
    with pytest.raises(SqlFilterError) as info:
        compile_sql(text)
    assert info.value.reason == f"more than {MAX_TOKENS} tokens"
    assert info.value.line == 1 and 0 < info.value.column < len(text)
    within = "a IS NOT NULL AND a IN (" + ", ".join(f"'{i}'" for i in range(MAX_TOKENS // 2 - 4)) + ")"
    assert compile_sql(within)({"a": "0"})  # exactly MAX_TOKENS: 8 and two per item less one
    with pytest.raises(SqlFilterError, match=f"more than {MAX_TOKENS} tokens at line 1, column {len(within) + 2}"):
        compile_sql(within[:-1] + ", 'x')")  # the 1,025th token is 'x'


def test_compiled_cache_keeps_refusals_and_bounds_entries_and_characters():
    """Like RocketMQ's parse cache, a refusal is kept as a compiled expression is (a client repeating a bad one
    costs a lookup), each raised anew; the least recently used go first beyond the entries or the characters."""
    cache = CompiledCache(entries=3, chars=40)
    cache.get("a = 1")
    with pytest.raises(SqlFilterError) as first:
        cache.get("a >")
    with pytest.raises(SqlFilterError) as again:
        cache.get("a >")
    assert isinstance(cache.kept["a >"], SqlFilterError)
    assert first.value is not again.value and str(first.value) == str(again.value)
    assert again.value.__context__ is None and cache.kept["a >"].__traceback__ is None
    cache.get("a = 1")  # used again: now the newest
    cache.get("b = 2")
    cache.get("c = 3")  # a fourth entry: the least recently used, "a >", goes
    assert list(cache.kept) == ["a = 1", "b = 2", "c = 3"]
    long = "d = '" + "x" * 25 + "'"  # 31 characters: 46 in all, over 40 until two go
    cache.get(long)
    assert list(cache.kept) == ["c = 3", long] and cache.kept_chars == 36


def test_filter_reads_properties_from_the_wire_form():
    msg = MessageExt("T", b"body", {"TAGS": "x", "a": "7", "UNIQ_KEY": "u"}, born_host=("127.0.0.1", 1),
                     store_host=("127.0.0.1", 2))
    wire = encode_message(msg)
    assert wire_properties(wire) == msg.properties
    record = build_filter("SQL92", "TAGS = 'x' AND a > 5", sql_enabled=True).record
    assert record is not None and record(wire)
    assert not build_filter("SQL92", "a > 7", sql_enabled=True).record(wire)


def test_build_filter_refuses_what_the_broker_cannot_filter_by():
    with pytest.raises(FilterRefused) as off:
        build_filter("SQL92", "a > 1", sql_enabled=False)
    assert off.value.disabled and "enablePropertyFilter" in str(off.value)
    with pytest.raises(FilterRefused) as bad:
        build_filter("SQL92", "a >", sql_enabled=True)
    assert not bad.value.disabled and "line 1, column 4" in str(bad.value)
    with pytest.raises(FilterRefused, match="not supported"):
        build_filter("CLASS", "x", sql_enabled=True)
    tags = build_filter(None, "A || B", sql_enabled=False)
    assert tags.record is None and tags.tags is not None


_PIECES = ["a", "b", "TAGS", "'x'", "''", "1", "-", "+", "2.5", "1e3", "99999999999999999999", "NULL", "TRUE", "NOT",
           "AND", "OR", "IS", "IN", "BETWEEN", "CONTAINS", "STARTSWITH", "(", ")", ",", "=", "<>", ">", "<=", "/*",
           "*/", "--", "\n", "#", "'"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=12), st.dictionaries(st.sampled_from(["a", "b", "TAGS"]),
                                                                        st.sampled_from(["1", "x", "2.5", ""])))
def test_any_text_compiles_or_is_refused_and_never_breaks_evaluation(pieces, props):
    """A peer's expression: a SqlFilterError or a matcher, never another exception, here or when it runs."""
    try:
        matches = compile_sql(" ".join(pieces))
    except SqlFilterError:
        return
    assert matches(props) in (True, False)
