"""Configuration keys, declared once, and Java properties files with RocketMQ's camelCase keys.

Each key is a dataclass field declared with ``key()``: its default, its range or choices and one line for the
docs sit beside it (``Key``). ``declared_keys`` flattens a config and the configs it embeds (``section()``: the
store's in the broker's) into one namespace of broker.conf keys; ``set_keys`` reads values into it, parsing and
checking each once and naming the key of a value it refuses. broker.conf, the broker's command-line flags and
``updateBrokerConfig`` all go through it, as does ``txmq namesrv -c`` for the remoting server's limits;
``txmq.config_doc`` writes docs/configuration.md's tables from the same declarations.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import MISSING, dataclass, field
from enum import Enum
from typing import Any

KEY = "txmq.key"  # field metadata: the field is a config key (``Key``)
SECTION = "txmq.section"  # field metadata: the field embeds a config whose keys are read with its owner's


@dataclass(frozen=True)
class Key:
    """What a key declares beside its default. ``range`` and ``choices`` bound what an operator may give (read
    from broker.conf, a flag or ``updateBrokerConfig``); ``check`` is what any value must satisfy, also when the
    config is built in code: it returns the value to keep (a ratio given as a fraction becomes percent) or raises
    ``ValueError`` saying what is wrong with the value."""

    doc: str  # one line for docs/configuration.md
    name: str = ""  # the broker.conf key when it is not the field's name in camelCase
    range: tuple[float | None, float | None] = (None, None)  # least and most (None: unbounded)
    choices: tuple[str, ...] = ()  # the names a value may be, in any case (an Enum field: its members)
    unit: str = ""  # "ms", "bytes", ...: shown beside the range
    rocketmq: bool = True  # RocketMQ reads this key too; False: txmq's own
    runtime: bool = False  # updateBrokerConfig may change it while the broker runs (read where it is used)
    secret: bool = False  # never in an answer (GET_BROKER_CONFIG)
    check: Callable[[Any], Any] | None = None
    shown: str | None = None  # the default as the docs show it, when not the value itself


def key(default: Any = MISSING, *, doc: str, factory: Callable[[], Any] | None = None, name: str = "",
        range: tuple[float | None, float | None] = (None, None), choices: tuple[str, ...] = (),
        unit: str = "", rocketmq: bool = True, runtime: bool = False, secret: bool = False,
        check: Callable[[Any], Any] | None = None, shown: str | None = None) -> Any:
    """A dataclass field that is a config key: its default (or ``factory``) and its ``Key``."""
    meta = {KEY: Key(doc, name, range, choices, unit, rocketmq, runtime, secret, check, shown)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def section(cls: type, title: str) -> Any:
    """A dataclass field embedding the config ``cls``, whose keys are read from the same file as its owner's."""
    return field(default_factory=cls, metadata={SECTION: (cls, title)})


class ConfigError(ValueError):
    """A value a key refuses; the message names the key as the file spells it."""


_KINDS = {"int": int, "float": float, "bool": bool, "str": str}
_KIND_NAMES = {int: "an integer", float: "a finite number", bool: "true or false"}


@dataclass(frozen=True)
class ConfKey:
    """One key of a config, as read and written: where its field is and how its values are parsed and checked."""

    name: str  # as broker.conf spells it
    path: tuple[str, ...]  # attributes from the outermost config to the field
    kind: type  # int, float, bool, str or an Enum
    default: Any
    key: Key
    section: str  # the docs' table it is listed in

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.kind) if issubclass(self.kind, Enum) else self.key.choices

    def parse(self, raw: Any) -> Any:
        """``raw`` (a string, or a value already of the key's kind) as the key's value: converted, then
        checked against the choices, the range and the key's own check; ConfigError names the key."""
        value = self._convert(raw)
        choices = self.choices
        if choices and not issubclass(self.kind, Enum) and value.upper() not in (c.upper() for c in choices):
            raise ConfigError(f"config {self.name}: {value!r} is not one of {', '.join(choices)}")
        least, most = self.key.range
        if (least is not None and value < least) or (most is not None and value > most):
            span = f"at least {least}" if most is None else f"at most {most}" if least is None \
                else f"between {least} and {most}"
            raise ConfigError(f"config {self.name}: {value} is out of range (it must be {span})")
        return self.checked(value)

    def checked(self, value: Any) -> Any:
        """``value`` through the key's own check."""
        if self.key.check is None:
            return value
        try:
            return self.key.check(value)
        except ValueError as exc:
            raise ConfigError(f"config {self.name}: {value!r} {exc}") from None

    def _convert(self, raw: Any) -> Any:
        kind = self.kind
        if type(raw) is kind:
            return raw
        text = raw.name if isinstance(raw, Enum) else str(raw).lower() if isinstance(raw, bool) else str(raw)
        if issubclass(kind, Enum):
            try:
                return kind[text.strip().upper()]
            except KeyError:
                raise ConfigError(f"config {self.name}: {text.strip()!r} is not one of "
                                  f"{', '.join(self.choices)}") from None
        return convert(text, kind, self.name)

    def get(self, config: Any) -> Any:
        for attr in self.path:
            config = getattr(config, attr)
        return config

    def text(self, value: Any) -> str:
        """A value as broker.conf writes it (GET_BROKER_CONFIG): a whole number without ``.0``."""
        if isinstance(value, Enum):
            return str(value.value)
        if isinstance(value, bool):
            return str(value).lower()
        return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


_DECLARED: dict[type, dict[str, ConfKey]] = {}


def declared_keys(cls: type) -> dict[str, ConfKey]:
    """The keys of the config class ``cls`` and of the configs it embeds, by their names in snake case (how a key
    given as ``brokerName``, ``broker_name`` or ``tls.server.mode`` is found), in declaration order."""
    if cls not in _DECLARED:
        _DECLARED[cls] = _declare(cls)
    return _DECLARED[cls]


def _declare(cls: type) -> dict[str, ConfKey]:
    out: dict[str, ConfKey] = {}
    for conf_key in _walk(cls, (), "", cls.__name__):
        found = _snake(conf_key.name)
        if found in out:
            raise TypeError(f"config key {conf_key.name} is declared twice")
        out[found] = conf_key
    return out


def _walk(cls: type, path: tuple[str, ...], title: str, owner: str) -> Iterator[ConfKey]:
    module = vars(sys.modules[cls.__module__])
    for f in dataclasses.fields(cls):
        if SECTION in f.metadata:
            inner, inner_title = f.metadata[SECTION]
            yield from _walk(inner, (*path, f.name), inner_title, inner.__name__)
        elif KEY in f.metadata:
            declared: Key = f.metadata[KEY]
            kind = (_KINDS.get(f.type) or module.get(f.type)) if isinstance(f.type, str) else f.type
            if not (isinstance(kind, type) and (kind in _KINDS.values() or issubclass(kind, Enum))):
                raise TypeError(f"{owner}.{f.name}: a config key is an int, float, bool, str or Enum")
            default = f.default_factory() if callable(f.default_factory) else f.default
            yield ConfKey(declared.name or _camel(f.name), (*path, f.name), kind, default, declared, title)


def set_keys(config: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Set the keys of ``config`` (and of the configs it embeds) named in ``values``; returns the entries that
    name no key. All or nothing: every value is parsed and checked before any is set, so a refused one
    (ConfigError, naming its key) leaves the config as it was."""
    keys = declared_keys(type(config))
    parsed: list[tuple[ConfKey, Any]] = []
    unknown = {}
    for name, raw in values.items():
        conf_key = keys.get(_snake(name))
        if conf_key is None:
            unknown[name] = raw
        else:
            parsed.append((conf_key, conf_key.parse(raw)))
    for conf_key, value in parsed:
        *outer, attr = conf_key.path
        target = config
        for step in outer:
            target = getattr(target, step)
        setattr(target, attr, value)
    return unknown


def check_declared(config: Any) -> None:
    """Run the ``check`` of each key declared on ``config``'s own class over its value (a config built in code
    passes the checks a value read from broker.conf does; ranges bound only what an operator gives)."""
    for conf_key in declared_keys(type(config)).values():
        if len(conf_key.path) == 1 and conf_key.key.check is not None:
            setattr(config, conf_key.path[0], conf_key.checked(getattr(config, conf_key.path[0])))


def key_values(config: Any) -> dict[str, str]:
    """Every key of ``config`` as broker.conf writes it, secrets left out (GET_BROKER_CONFIG's body)."""
    return {k.name: k.text(k.get(config)) for k in declared_keys(type(config)).values() if not k.key.secret}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def parse_properties(text: str) -> dict[str, str]:
    """A Java properties file as ``java.util.Properties.load`` reads it: ``key=value``, ``key: value`` or
    ``key value``; ``#``/``!`` comment lines; a line ending in an odd number of backslashes goes on with the next
    (whose leading blanks are dropped); ``\\t \\n \\r \\f \\uXXXX`` and ``\\`` before any other character."""
    out: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        line = line.lstrip(" \t\f")
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1] + next(lines, "").lstrip(" \t\f")
        key, value = _split_entry(line)
        out[_unescape(key)] = _unescape(value)
    return out


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_entry(line: str) -> tuple[str, str]:
    """The key ends at the first unescaped ``=``, ``:`` or blank; one ``=``/``:`` may follow blanks after it."""
    i = 0
    while i < len(line) and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", lambda m: chr(int(m.group(1)[1:], 16)) if len(m.group(1)) == 5
                  else _ESCAPES.get(m.group(1), m.group(1)), text, flags=re.S)


def update_fields(obj: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Set the dataclass fields of ``obj`` named by camelCase or snake_case keys, converting strings to each
    field's type (values of other types, as JSON gives them, are kept); returns the entries that name no field."""
    kinds = {f.name: _KINDS.get(str(f.type), str) for f in dataclasses.fields(obj)}
    unknown = {}
    for name, raw in values.items():
        attr = _snake(name)
        if attr in kinds:
            setattr(obj, attr, convert(raw, kinds[attr], name) if isinstance(raw, str) else raw)
        else:
            unknown[name] = raw
    return unknown


def convert(text: str, kind: type, name: str) -> Any:
    """A key's text as an int, float, bool (``true``/``false``, any case) or str; ConfigError names the key."""
    text = text.strip()
    if kind is str:
        return text
    try:
        if kind is bool:
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        value = kind(text)
        if kind is float and not math.isfinite(value):
            raise ValueError(text)
        return value
    except ValueError:
        raise ConfigError(f"config {name}: {text!r} is not {_KIND_NAMES[kind]}") from None


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name.replace(".", "_")).lower()
