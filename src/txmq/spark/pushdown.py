"""Spark's filters that the broker evaluates for the batch reader (``DataSourceReader.pushFilters``).

Filters on ``tags``, ``keys`` and property columns (string columns a user's schema adds after the source's own:
Spark passes no filter on ``properties['x']``, a map lookup) whose meaning is the same in Spark and in SQL92
(string equality, ``IN``, ``IS [NOT] NULL``, ``LIKE 'a%'``, ``'%a'``, ``'%a%'`` and their negations) become one
SQL92 expression, ANDed: the broker sends only the messages it selects, and Spark does not evaluate them again.
Ordering comparisons stay with Spark (it orders strings by their characters, RocketMQ by their numbers), and so
does a condition that would take the expression past the broker's bounds (docs/filters.md: 1,024 tokens, 16,384
characters; a long ``isin``).

``store_timestamp >= t`` (or ``> t``) moves an ``earliest`` start to the first offset stored at or after
``t - STEP_MARGIN_MS`` (by store time, per queue: the broker's search looks at each stretch between steps back of
its clock apart; the margin covers the steps under its clock's 100 ms tolerance that it has no mark of: records
stored before its clock file kept marks, or a broker before marks), so no record before that start was stored as
late as ``t``; Spark still evaluates the filter, so the rows are exact.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from txmq.filter.sql import KEYWORDS, SqlFilterError, compile_sql
from txmq.remoting.request_headers import parse_tag_expression
from txmq.spark._common import SourceOptions
from txmq.spark.options import ByTime

# How much earlier than ``t`` a pushed start by store time begins: a broker without marks of the steps back under its
# clock's 100 ms tolerance (for the records of a store before them, or an older broker) answers up to about 200 ms
# of records late
STEP_MARGIN_MS = 1000
_COLUMNS = {("tags",): "TAGS", ("keys",): "KEYS"}
_PROPERTY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")  # what SQL92 can name; other keys stay with Spark
_STRING_TESTS = {StringStartsWith: "STARTSWITH", StringEndsWith: "ENDSWITH", StringContains: "CONTAINS"}


def _property(path: tuple[str, ...], columns: tuple[str, ...]) -> str | None:
    """The SQL92 name of a column path: TAGS, KEYS, or a property column (``properties['x']`` if Spark ever
    passes map lookups) whose name SQL92 can spell."""
    if path in _COLUMNS:
        return _COLUMNS[path]
    if len(path) == 1 and path[0] in columns:
        name = path[0]
    elif len(path) == 2 and path[0] == "properties":
        name = path[1]
    else:
        return None
    return name if _PROPERTY.match(name) and name.upper() not in KEYWORDS else None


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def to_sql(f: Filter, columns: tuple[str, ...] = ()) -> str | None:
    """The SQL92 condition meaning exactly ``f``, or None when the broker cannot evaluate it as Spark does;
    ``columns``: the schema's property columns."""
    negated = isinstance(f, Not)
    inner = f.child if isinstance(f, Not) else f
    name = _property(getattr(inner, "attribute", ()), columns)
    if name is None:
        return None
    value = getattr(inner, "value", None)
    if isinstance(inner, IsNull):
        return f"{name} IS {'NOT ' if negated else ''}NULL"
    if isinstance(inner, IsNotNull):
        return f"{name} IS {'' if negated else 'NOT '}NULL"
    if isinstance(inner, EqualTo) and isinstance(value, str):
        return f"{name} {'<>' if negated else '='} {_literal(value)}"
    if isinstance(inner, In) and value and all(isinstance(v, str) for v in value):
        return f"{name} {'NOT ' if negated else ''}IN ({', '.join(map(_literal, value))})"
    test = _STRING_TESTS.get(type(inner))
    if test is not None and isinstance(value, str) and value:  # RocketMQ's test of '' is FALSE, Spark's TRUE
        return f"{name} {'NOT ' if negated else ''}{test} {_literal(value)}"
    return None


def _stored_since_ms(f: Filter) -> int | None:
    """``t`` of ``store_timestamp >= t`` or ``> t``, in ms (rounded down: a start, Spark keeps the exact test)."""
    if isinstance(f, GreaterThan | GreaterThanOrEqual) and f.attribute == ("store_timestamp",) \
            and isinstance(f.value, datetime):
        return int(f.value.timestamp() * 1000)
    return None


@dataclasses.dataclass(slots=True)
class Pushed:
    """What ``pushFilters`` took: the broker's expression and the start by store time."""

    sql: list[str] = dataclasses.field(default_factory=list)
    stored_since_ms: int | None = None

    def describe(self) -> str:
        parts = [f"sql={' AND '.join(self.sql)}"] if self.sql else []
        if self.stored_since_ms is not None:
            parts.append(f"startingTimestamp>={self.stored_since_ms}")
        return ", ".join(parts) or "nothing"


def push(filters: Iterable[Filter], pushed: Pushed, columns: tuple[str, ...] = (),
         tags: str | None = None) -> Iterator[Filter]:
    """Record in ``pushed`` what the broker takes; yield the filters Spark must still evaluate. ``tags``: the
    source's option, folded into the expression."""
    for f in filters:
        since = _stored_since_ms(f)
        if since is not None:
            pushed.stored_since_ms = max(since, pushed.stored_since_ms or since)
            yield f  # a start only: Spark keeps the exact test
            continue
        cond = to_sql(f, columns)
        if cond is None or not _compiles(_expression([*pushed.sql, cond], tags)):
            yield f
        else:
            pushed.sql.append(cond)


def _expression(conds: list[str], tags: str | None) -> str:
    """The broker's expression: the conditions ANDed, the ``tags`` option first as ``TAGS IN (...)``."""
    tag_list = parse_tag_expression(tags)
    if tag_list is not None:
        conds = [f"TAGS IN ({', '.join(map(_literal, tag_list))})", *conds]
    return " AND ".join(conds)


def _compiles(sql: str) -> bool:
    """Whether the broker takes ``sql``: built from checked parts, it is refused only past the bounds."""
    try:
        compile_sql(sql)
    except SqlFilterError:
        return False
    return True


def apply(opts: SourceOptions, pushed: Pushed) -> SourceOptions:
    """The options with the pushed filters: the SQL92 expression (the ``tags`` option folded in as
    ``TAGS IN (...)``), and an ``earliest`` start (or an earlier ``startingTimestamp``) moved to the time."""
    changes: dict[str, Any] = {}
    if pushed.sql:
        sql = _expression(pushed.sql, opts.tags)
        compile_sql(sql)  # ``push`` took only what compiles: a failure here is a bug, better found on the driver
        changes.update(sql=sql, tags="*")
    since, start = pushed.stored_since_ms, opts.starting
    if since is not None:
        since -= STEP_MARGIN_MS
    earlier = isinstance(start, ByTime) and start.every is not None and since is not None and start.every < since
    if since is not None and (start == "earliest" or earlier):
        changes["starting"] = ByTime(since, {})
    return dataclasses.replace(opts, **changes) if changes else opts
