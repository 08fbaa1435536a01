"""The compiled hot path (setup.py's ``COMPILED_MODULES``): built, fresh, and the same as its interpreted source.

A build older than its ``.py`` would shadow the edited source, and a module that was not built would run the
benchmarks' figures interpreted: both fail here, so the suite always runs what the source says, compiled.
Each module's interpreted twin (the same ``.py`` run by the interpreter) must give the same results on a few
cases of its own, so the two can never drift.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import importlib
import importlib.machinery
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.compiled import INTERPRETED, ROOT, compiled_modules, load_interpreted
from txmq.acl.model import Action, Needs
from txmq.errors import CorruptRecordError, InvalidMessageError, RemoteProtocolError
from txmq.message import MessageConst, MessageExt
from txmq.remoting.codes import LanguageCode, SerializeType
from txmq.remoting.command import RemotingCommand

MODULES = compiled_modules()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_is_built_from_its_current_source(name: str) -> None:
    module = importlib.import_module(name)
    source = MODULES[name]
    built = Path(module.__file__ or "")
    if INTERPRETED:  # TXMQ_INTERPRETED=1 runs the suite on the sources on purpose
        assert built == source
        return
    assert built.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), (
        f"{name} runs from {built}, not compiled: run make (pip install -e .)")
    newest = max(p.stat().st_mtime for p in (source, source.with_suffix(".pxd")) if p.exists())
    assert built.stat().st_mtime >= newest, f"{built.name} is older than {source.name}: run make to rebuild it"


def _outcome(fn, *args, **kwargs) -> object:
    """What a call gives: its result, or its exception's type name and message (the twins raise their own
    exception classes only where they define them)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        return (type(exc).__name__, str(exc))


def _same(name: str, fn_name: str, cases: list[tuple], convert=lambda r: r) -> None:
    compiled, interpreted = importlib.import_module(name), load_interpreted(name)
    for args in cases:
        want = _outcome(getattr(interpreted, fn_name), *args)
        got = _outcome(getattr(compiled, fn_name), *args)
        assert convert(got) == convert(want), (fn_name, args)


def test_headers_parse_the_same_interpreted() -> None:
    values = ["0", "42", "-7", "+3", "2147483647", "2147483648", "9223372036854775807", "9223372036854775808",
              "", "1.5", "x", "١٢", "0" * 30, "-9223372036854775808"]
    _same("txmq.remoting.headers", "parse_int", [(v, "f") for v in values])
    _same("txmq.remoting.headers", "parse_int32", [(v, "f") for v in values])
    _same("txmq.remoting.headers", "parse_bool", [(v, "f") for v in ["true", "FALSE", "1", "0", "yes", ""]])


_SEND_EXT = {"producerGroup": "g", "topic": "t", "queueId": "2", "bornTimestamp": "1700000000000", "flag": "",
             "properties": "", "unitMode": "1", "maxReconsumeTimes": ""}


@pytest.mark.parametrize("ext", [
    _SEND_EXT,
    {k: v for k, v in _SEND_EXT.items() if k != "topic"},  # required field missing
    {**_SEND_EXT, "queueId": "2147483648"},  # beyond an Int32
    {**_SEND_EXT, "batch": "maybe"},
])
def test_request_headers_parse_the_same_interpreted(ext: dict[str, str]) -> None:
    import txmq.remoting.request_headers as compiled

    interpreted = load_interpreted("txmq.remoting.request_headers")
    for name in ("SendMessageRequestHeader", "PullMessageRequestHeader", "EndTransactionRequestHeader"):
        def parsed(module, name=name) -> object:
            header = getattr(module, name).from_ext(ext)
            return [(f.name, getattr(header, f.name)) for f in dataclasses.fields(header)], header.to_ext()

        assert _outcome(parsed, compiled) == _outcome(parsed, interpreted)
        assert [(f.name, f.wire, f.kind, f.required) for f in getattr(compiled, name)._spec()] == \
            [(f.name, f.wire, f.kind, f.required) for f in getattr(interpreted, name)._spec()]


def _frames() -> bytes:
    from txmq.remoting.codec import encode_command

    cmds = [RemotingCommand(10, LanguageCode.JAVA, 399, 7, 0, None, {"topic": "t", "queueId": "1"}, b"body"),
            RemotingCommand(0, opaque=8, flag=1, remark="ok", ext_fields={"msgId": "AB"},
                            serialize_type=SerializeType.ROCKETMQ),
            RemotingCommand(34, opaque=9, body=b"x" * 300)]
    return b"".join(encode_command(c) for c in cmds)


def _decode_all(module, data: bytes, step: int) -> list:
    dec = module.FrameDecoder(max_frame_size=1 << 20)
    out = []
    for i in range(0, len(data), step):
        dec.receive_data(data[i : i + step])
        while (cmd := dec.next_command()) is not None:
            out.append((cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields,
                        cmd.body, cmd.serialize_type))
    return out


@pytest.mark.parametrize("data", [
    _frames(),
    b"\0\0\0\x0c\0\0\0\x02{}xxxxxx",  # JSON without a code
    b"\0\0\0\x08\x01\0\0\x04abcd",  # binary header truncated
    b"\0\0\0\x08\x05\0\0\x00abcd",  # unknown serialization type
    b"\x7f\0\0\0",  # too long
    b"\x80\0\0\0",  # too long, its length's high bit set (a C int's sign when compiled)
    b"\xff\xff\xff\xff",
])
def test_codec_decodes_the_same_interpreted(data: bytes) -> None:
    import txmq.remoting.codec as compiled

    interpreted = load_interpreted("txmq.remoting.codec")
    for step in (1, 7, len(data)):
        assert _outcome(_decode_all, compiled, data, step) == _outcome(_decode_all, interpreted, data, step)


def _messages() -> list[MessageExt]:
    return [
        MessageExt("t", b"hello", {MessageConst.TAGS: "a", MessageConst.KEYS: "k1 k2"}, queue_id=3, queue_offset=9,
                   commit_log_offset=1234, sys_flag=4, born_timestamp=1_700_000_000_000, born_host=("10.0.0.1", 5),
                   store_timestamp=1_700_000_000_001, store_host=("127.0.0.1", 10911), reconsume_times=2,
                   prepared_transaction_offset=77),
        MessageExt("ü" * 10, b"", {}),
        MessageExt("t", b"x", {}, flag=1 << 40),  # does not fit FLAG
        MessageExt("t" * 128, b"x", {}),  # topic too long
        MessageExt("t", b"x", {"p": "v" * 40000}),  # properties too long
        MessageExt("t", b"x", {}, born_host=("::1", 1)),  # not IPv4
    ]


def test_message_layout_is_the_same_interpreted() -> None:
    _same("txmq.message", "encode_message", [(m,) for m in _messages()])
    wire = __import__("txmq.message").message.encode_message(_messages()[0])
    decoded = lambda r: (r[0].topic, r[0].body, r[0].properties, r[0].queue_offset, r[0].born_host, r[1]) \
        if isinstance(r, tuple) and len(r) == 2 and not isinstance(r[0], str) else r  # noqa: E731
    _same("txmq.message", "decode_message", [(wire,), (wire[:-1],), (wire[:90],), (b"\0" * 100,),
                                             (wire[:8] + b"\0" + wire[9:],)], decoded)
    _same("txmq.message", "string_to_properties", [("a\x01b\x02c\x01d\x02",), ("",), ("x\x02y\x01\x01z",),
                                                    ("\x01",), ("\x02\x02a\x01\x02b",), ("a\x011\x02a\x012",),
                                                    ("k\x01v\x01w",), ("\x01v\x02",)])
    _same("txmq.message", "create_offset_msg_id", [(("10.1.2.3", 10911), 2**40), (("h", 1), 0)])
    _same("txmq.message", "java_string_hash", [("TagA",), ("",), ("ü€",)])


def test_record_is_the_same_interpreted() -> None:
    from txmq.message import encode_message

    wire = encode_message(_messages()[0])

    def stored(module, offset: int) -> object:
        rec = module.encode_record(_messages()[0])
        module.set_physical_offset(rec, offset)
        module.seal(rec)
        return bytes(rec), module.to_wire(rec), _outcome(module.check_record, rec, offset), \
            _outcome(module.check_record, rec, offset + 1), _outcome(module.check_record, rec[:-1] + b"\0", offset)

    import txmq.store.record as compiled

    interpreted = load_interpreted("txmq.store.record")
    assert stored(compiled, 1234) == stored(interpreted, 1234)
    assert stored(compiled, 1234)[1] == wire


def test_refusals_name_the_peer() -> None:
    """The compiled codec raises the package's own errors, as the interpreted one does."""
    from txmq.remoting.codec import decode_json_header
    from txmq.store.record import check_record

    with pytest.raises(RemoteProtocolError):
        decode_json_header(b"[1]")
    with pytest.raises(CorruptRecordError):
        check_record(b"\0" * 200, 0)
    with pytest.raises(InvalidMessageError):
        __import__("txmq.message").message.encode_message(_messages()[3])


def test_send_header_is_the_same_interpreted() -> None:
    """The send header's written ``__init__`` keeps the dataclass's defaults, repr, eq and fields (with the types and
    defaults the generic spec reads); compiled, it is an extension type, its fields C members (no ``__dict__``)."""
    def made(module) -> object:
        cls = module.SendMessageRequestHeader
        h = cls("g", "T", queue_id=3, max_reconsume_times=5)
        return (repr(h), h == cls("g", "T", queue_id=3, max_reconsume_times=5), h == cls("g", "T"),
                repr(dataclasses.replace(h, topic="U")), [(f.name, str(f.type), f.default) for f in
                                                          dataclasses.fields(cls)], h.to_ext(), h.to_v2_ext())

    compiled = importlib.import_module("txmq.remoting.request_headers")
    assert made(compiled) == made(load_interpreted("txmq.remoting.request_headers"))
    bare = compiled.SendMessageRequestHeader("g", "T")
    defaulted = [f for f in dataclasses.fields(bare) if f.default is not dataclasses.MISSING]
    assert len(defaulted) == 11 and all(getattr(bare, f.name) == f.default for f in defaulted)
    if not INTERPRETED:
        assert not hasattr(compiled.SendMessageRequestHeader("g", "T"), "__dict__")


def test_every_header_copies_and_pickles_with_its_fields() -> None:
    """Compiled, ``Header`` is an extension type: the dataclasses built on it (slots, no ``__dict__``) must copy and
    pickle with their fields, as the interpreted ones do, not through the base's generated pickling, which knows
    none of them."""
    import copy
    import pickle

    import txmq.remoting.request_headers as rh

    samples = {"str": "x", "int": 7, "Int32": 7, "bool": True}
    classes = [c for c in vars(rh).values()
               if isinstance(c, type) and issubclass(c, rh.Header) and c is not rh.Header
               and dataclasses.is_dataclass(c)]
    assert len(classes) > 10
    for cls in classes:
        fields = dataclasses.fields(cls)
        h = cls(**{f.name: samples[str(f.type).replace(" | None", "")] for f in fields
                   if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING})
        want = [(f.name, getattr(h, f.name)) for f in fields]
        for again in (copy.copy(h), copy.deepcopy(h), pickle.loads(pickle.dumps(h))):
            assert type(again) is cls
            assert [(f.name, getattr(again, f.name, "<missing>")) for f in fields] == want, cls.__name__


def test_put_results_are_the_same_interpreted() -> None:
    """The put results' written ``__init__`` keeps what the dataclass gave: defaults, repr, eq, ``stored``; compiled
    (extension types, results.pxd) they keep its fields in their order."""
    def made(module) -> object:
        ar = module.AppendMessageResult(1, 2, "ID", 3, 4)
        ok = module.PutMessageResult(module.PutMessageStatus.PUT_OK, ar)
        late = module.PutMessageResult(module.PutMessageStatus.FLUSH_DISK_TIMEOUT, ar, remark="late")
        refused = module.PutMessageResult(module.PutMessageStatus.MESSAGE_ILLEGAL)
        twin = module.PutMessageResult(module.PutMessageStatus.PUT_OK, module.AppendMessageResult(1, 2, "ID", 3, 4))
        same = ok == twin
        return (repr(ar), repr(ok), ar.msg_num, same, ok.stored, late.stored,
                refused.stored, refused.remark, dataclasses.replace(late, remark="r").remark,
                [f.name for f in dataclasses.fields(ar)], [f.name for f in dataclasses.fields(ok)])

    import txmq.store.results as compiled

    assert made(compiled) == made(load_interpreted("txmq.store.results"))
    if not INTERPRETED:  # their directives (no_gc) are on the classes in results.py, where Cython takes them from
        appended = compiled.AppendMessageResult(1, 2, "I", 3, 4)
        result = compiled.PutMessageResult(compiled.PutMessageStatus.PUT_OK, appended)
        assert not gc.is_tracked(result) and not gc.is_tracked(result.append_result)


def test_commands_topics_and_codes_are_the_same_interpreted() -> None:
    """``RemotingCommand``'s written ``__init__`` keeps the dataclass's defaults, repr and eq; topic rules and
    language names (compiled: every send asks) answer as their source does."""
    def made(module) -> object:
        cmd = module.RemotingCommand(10, opaque=7, ext_fields={"a": "b"})
        bare = module.RemotingCommand(11)
        return (repr(cmd), repr(bare), bare.ext_fields, bare.language.name, bare.serialize_type.name,
                cmd == module.RemotingCommand(10, opaque=7, ext_fields={"a": "b"}), cmd == bare,
                dataclasses.replace(cmd, flag=1).flag, bare.ext_fields is not module.RemotingCommand(11).ext_fields,
                [f.name for f in dataclasses.fields(cmd)])

    import txmq.remoting.command as command

    assert made(command) == made(load_interpreted("txmq.remoting.command"))
    topics = [("t",), ("",), (" ",), ("a" * 128,), ("bad topic",), ("%RETRY%g",), ("t\n",), ("é",), ("a|b-c_D9",)]
    _same("txmq.topic", "check_topic", topics)
    _same("txmq.topic", "check_group", topics)
    _same("txmq.remoting.codes", "language_from_name", [("JAVA",), ("CPP",), ("NOPE",), ("",)],
          lambda r: getattr(r, "name", r))


def test_stats_and_the_request_dispatcher_are_the_same_interpreted() -> None:
    """The broker's per-put counting and its request dispatcher (compiled: every send passes both) count and hand
    requests on as their source does."""
    def counted(module) -> object:
        stats = module.BrokerStats()
        stats.put("t", "normal", 256)
        stats.put("t", "normal", 5000, count=3)
        stats.put("u", "transaction", 0)
        for size in (1024, 1025, 4096, 4 * 1024 * 1024, 4 * 1024 * 1024 + 1):  # each bucket's edges
            stats.put("edges", "normal", size)
        stats.get("t", "g", 2, 512)
        return (sorted(stats.totals().items()), stats.puts[("t", "normal")].size_buckets,
                stats.puts[("edges", "normal")].size_buckets)

    assert counted(importlib.import_module("txmq.broker.stats")) == counted(load_interpreted("txmq.broker.stats"))

    def dispatched(module) -> object:
        table = module.RequestTable("a broker")
        table.add(module.RequestSpec(10, lambda cmd: cmd.ext_fields["x"], lambda parsed: None,
                                     lambda conn, cmd, parsed: ("sent", conn, cmd.code, parsed)))
        dispatch = module.RequestDispatcher(table)
        refused = dispatch("conn", RemotingCommand(9999, opaque=3))
        return dispatch("conn", RemotingCommand(10, ext_fields={"x": "y"})), refused.code, refused.remark, \
            refused.opaque

    assert dispatched(importlib.import_module("txmq.remoting.registry")) == dispatched(
        load_interpreted("txmq.remoting.registry"))


def test_send_checks_are_the_same_interpreted(tmp_path: Path) -> None:
    """The broker core's send checks (compiled: every send of either protocol asks them) refuse and accept as their
    source does: each answer's refusal kind and message, or what it returns."""
    from txmq.broker.config import BrokerConfig
    from txmq.broker.core.refusal import Refusal
    from txmq.broker.core.topics import TopicService
    from txmq.broker.stats import BrokerStats
    from txmq.broker.topic_config_manager import TopicConfigManager
    from txmq.store.config import StoreConfig
    from txmq.topic import PermName, TopicConfig

    def answer(r: object) -> object:
        return (r.kind.name, r.message) if isinstance(r, Refusal) else getattr(r, "topic_name", r)

    async def checked(module, root: Path) -> list[object]:
        config = BrokerConfig(store=StoreConfig(max_message_size=1000))
        manager = TopicConfigManager(root, auto_create=True, default_queue_nums=4, delay_levels=18)
        await manager.update(TopicConfig("t", 2, 2))
        await manager.update(TopicConfig("read_only", 1, 1, PermName.PERM_READ))

        def too_far(props: dict[str, str]) -> int:
            raise InvalidMessageError("timer message illegal: beyond timerMaxDelaySec")

        timers = SimpleNamespace(checked_deliver_ms=too_far, divert=too_far)
        sends = module.SendService(config, None, TopicService(manager, config), BrokerStats(), None, None, timers,
                                   None)
        out = [answer(sends.topic_of(topic, size, batch, SimpleNamespace(default_topic=base,
                                                                         default_topic_queue_nums=nums)))
               for topic, size, batch, base, nums in [
            ("t", 10, False, "TBW102", 4), ("bad topic", 10, False, "TBW102", 4),
            ("RMQ_SYS_TRANS_HALF_TOPIC", 10, False, "TBW102", 4), ("t", 1001, True, "TBW102", 4),
            ("read_only", 10, False, "TBW102", 4), ("new_one", 10, False, "TBW102", 2),
            ("other", 10, False, "no_such_default", 4), ("%RETRY%g", 10, False, "TBW102", None)]]
        out.append(manager.get("new_one").write_queue_nums)
        cfg = manager.get("t")
        out += [answer(sends.queue_of(cfg, q)) for q in (0, 1, 2, 7)] + [0 <= sends.queue_of(cfg, -1) < 2]
        half = MessageExt("t", b"x", {"TRAN_MSG": "true"}, born_timestamp=1_700_000_000_000)
        old = MessageExt("t", b"x", {}, born_timestamp=1)
        out += [answer(sends.accept(half, True)), answer(sends.accept(old, False))]
        timed = [MessageExt("t", b"x", {"TIMER_DELAY_SEC": "9"}, born_timestamp=1_700_000_000_000),
                 MessageExt("t", b"x", {"TIMER_DELIVER_MS": "9", "TRAN_MSG": "true"}, born_timestamp=1_700_000_000_000)]
        out += [answer(sends.accept(m, i == 1)) for i, m in enumerate(timed)]
        batches = [[], [(0, b"x" * 1001, {})], [(0, b"x", {"DELAY": "2"})], [(0, b"x", {"TIMER_DELAY_MS": "5"})],
                   [(0, b"x", {"TRAN_MSG": "true"}), (0, b"y", {})], [(0, b"x", {}), (0, b"y", {})]]
        out += [answer(sends.accept_batch(b, {}, 0, 0)) for b in batches]
        bomb, fits = zlib.compress(b"\0" * 5000), zlib.compress(b"y" * 900)  # over and within maxMessageSize (1000)
        out += [answer(sends.accept_batch([(0, body, {})], {}, 0, 1)) for body in (bomb, b"junk", fits[:-3], fits)]
        out += [answer(sends.accept(MessageExt("t", body, {}, born_timestamp=1_700_000_000_000, sys_flag=1), False))
                for body in (bomb, b"junk", fits)]
        half_batch = {"TRAN_MSG": "true", "UNIQ_KEY": "b"}
        out += [answer(sends.accept_batch(b, p, 0, 0)) for b, p in [
            ([(0, b"x" * 400, {"UNIQ_KEY": "u"})], half_batch), ([(0, b"x", {})], half_batch),
            ([(0, b"x", {"UNIQ_KEY": "u"})], {"TRAN_MSG": "true"}), ([(0, b"x", {"UNIQ_KEY": "u"})], half_batch)]]
        out.append(answer(sends.accept_batch([(0, b"x", {})], {}, 1, 0)))
        config.is_slave, config.reject_transaction_message = True, True  # type: ignore[misc]
        out += [answer(sends.topic_of("t", 10, False, None)), answer(sends.accept(half, True))]
        out += [answer(module.reserved_refusal(p)) for p in ({}, {"TXMQ_OP": "x"}, {"TXMQ_HALF_BATCH": "1"},
                                                                 {"TXMQ_TIMER_FROM": "1"})]
        out += [module.message_kind(*k) for k in ((True, 0, False), (False, 2, True), (False, 0, True),
                                                  (False, 0, False), (False, 0, True, True), (True, 0, False, True))]
        out += [module.is_timed(p) for p in ({}, {"TIMER_DELAY_SEC": "1"}, {"TIMER_DELIVER_MS": "1"})]
        await asyncio.gather(*manager.pending.values())  # the topics the sends created, durable
        return out

    (tmp_path / "c").mkdir()
    (tmp_path / "i").mkdir()
    compiled = asyncio.run(checked(importlib.import_module("txmq.broker.core.send"), tmp_path / "c"))
    assert compiled == asyncio.run(checked(load_interpreted("txmq.broker.core.send"), tmp_path / "i"))
    assert ("TOPIC_NOT_EXIST", "topic[other] not exist, apply first please! (autoCreateTopicEnable is true)") in \
        compiled and "new_one" in compiled and "%RETRY%g" in compiled
    assert ("ILLEGAL_DELIVERY_TIME", "timer message illegal: beyond timerMaxDelaySec") in compiled
    assert compiled[-9:] == ["transaction", "delay", "fifo", "normal", "delay", "transaction", False, True, True]


_POLICIES = [("Topic:orders", "Pub", "Deny", ()), ("Topic:ord*", "Pub|Sub", "Allow", ("10.0.0.0/8",)),
             ("Group:g", "Sub", "Allow", ()), ("Topic:*", "All", "Allow", ()), ("*", "Get", "Allow", ())]


def test_acl_checks_are_the_same_interpreted(tmp_path: Path) -> None:
    """Signatures, decisions, plain_acl.yml and the gate (compiled: every request under ACL passes them) answer as
    their source does, remembered decisions included."""
    import txmq.acl.signer as signer

    cmd = RemotingCommand(310, ext_fields={"b": "t", "a": "g", "_UNIQUE_KEY_QUERY": "q"}, body=b"body")
    signer.AclClientRPCHook(signer.SessionCredentials("aclKey01", "aclSecret01"))(cmd)
    good = cmd.ext_fields["Signature"]
    variants = [dict(cmd.ext_fields, Signature=s) for s in ("", "!!!!", "é", good[:-1], good + "=", good.lower())]
    variants += [{k: v for k, v in cmd.ext_fields.items() if k != "Signature"}, dict(cmd.ext_fields, a="h")]

    def checked(module) -> object:
        key = module.hmac_key("aclSecret01")
        cmds = [cmd, RemotingCommand(310, ext_fields=cmd.ext_fields, body=b"other")]
        cmds += [RemotingCommand(310, ext_fields=ext, body=cmd.body) for ext in variants]
        return ([module.signature_matches(key, c) for c in cmds], module.request_content(cmd.ext_fields, cmd.body),
                module.sign(key, b"x"), module.grpc_signature(key, "20261127T000000Z"))

    assert checked(signer) == checked(load_interpreted("txmq.acl.signer"))
    assert checked(signer)[0][:3] == [True, False, False]

    def decided(module) -> object:
        entries = tuple(module.PolicyEntry(module.Resource.parse(k), frozenset(map(module.Action.parse, a.split("|"))),
                                           module.Decision.parse(d), module.SourceIps(ips))
                        for k, a, d, ips in _POLICIES)
        acl = module.Acl("u", {module.PolicyType.CUSTOM: entries[:3], module.PolicyType.DEFAULT: entries[3:]})
        needs = module.Needs().topic("orders", module.Action.PUB).topic("ordinal", module.Action.SUB) \
            .topic("%RETRY%g", module.Action.PUB).topic("other", module.Action.PUB).cluster(module.Action.GET)
        hosts = ("10.0.0.1", "192.168.1.1", "not-an-ip")
        return ([acl.allows(r, a, h) for _ in range(2) for r, a in needs.wants for h in hosts], needs.describe(),
                [r.key for r, _ in needs.wants], [module.decide(entries, r, a, "10.0.0.1") for r, a in needs.wants])

    assert decided(importlib.import_module("txmq.acl.model")) == decided(load_interpreted("txmq.acl.model"))

    import txmq.acl.config as config

    def read(module) -> object:
        matchers = [module.RemoteAddressMatcher(p) for p in ("*", "192.168.1.{5,6}", "10.0.1-20.*", "10.0.0.0/8")]
        return [[m.match(h) for m in matchers] for h in ("192.168.1.5", "10.0.3.4", "10.0.30.4", "::1", "x")], \
            [_outcome(module.parse_perm, p) for p in ("PUB|SUB", "deny", "Sub", "all")]

    assert read(config) == read(load_interpreted("txmq.acl.config"))

    (tmp_path / "plain_acl.yml").write_text("globalWhiteRemoteAddresses: [10.9.*.*]\naccounts:\n"
                                            "  - accessKey: aclKey01\n    secretKey: aclSecret01\n"
                                            "    whiteRemoteAddress: 192.168.1.5\n    topicPerms: [t1=PUB]\n")

    def gated(module) -> object:
        from txmq.acl.store import AuthStore

        gate = module.AccessValidator(AuthStore(config.AclFile(tmp_path / "plain_acl.yml")), "broker")
        out = []
        for host in ("10.9.1.2", "192.168.1.5", "127.0.0.1", "[::1]"):
            conn = SimpleNamespace(remote_address=f"{host}:4000", attrs={})
            for ext in (cmd.ext_fields, variants[-1], {**variants[-2], "AccessKey": "nobody"}):
                identity = gate.admit(conn, RemotingCommand(310, ext_fields=ext, body=cmd.body))
                if isinstance(identity, RemotingCommand):
                    out.append((identity.code, identity.remark))
                    continue
                for topic in ("t1", "t2"):
                    refusal = gate.permit(conn, cmd, identity, Needs().topic(topic, Action.PUB))
                    out.append(None if refusal is None else (refusal.code, refusal.remark))
        return out

    assert gated(importlib.import_module("txmq.acl.validator")) == gated(load_interpreted("txmq.acl.validator"))


def test_index_files_are_the_same_interpreted(tmp_path: Path) -> None:
    """The compiled put stores bytes into the map itself: both builds write the same file, keys with hashes and
    offsets across the sign bit and 32-bit boundaries included, and read the same chains back."""
    import txmq.store.index as compiled

    interpreted = load_interpreted("txmq.store.index")
    puts = [("T", [f"k{i}", "shared"], (i * 2**31) + i, 1_700_000_000_000 + i * 997) for i in range(300)]
    files = {}
    for module in (compiled, interpreted):
        root = tmp_path / module.__name__.replace(".", "_") / str(id(module))
        service = module.IndexService(str(root), 7, 1000)
        service.put("T", ["first"], 0, 1_700_000_000_000)
        for topic, keys, phy, ts in puts:
            service.put(topic, keys, phy, ts)
        found = [service.lookup("T", key, 10) for key in ("k7", "shared", "first", "absent")]
        service.dirty_files()
        files[module] = ([p.read_bytes() for p in sorted((root / "index").iterdir())], found)
        service.close()
    assert files[compiled] == files[interpreted]
    assert files[compiled][1][0] == [7 * 2**31 + 7]
    data = files[compiled][0][0]  # entry 1 in RocketMQ's layout: keyHash, phyOffset, timeDiff, prevIndex
    assert compiled.ENTRY.unpack_from(data, compiled.HEADER_SIZE + 7 * 4 + compiled.ENTRY_SIZE) == (
        compiled.key_hash("T", "first"), 0, 0, 0)
    assert compiled.ENTRY.unpack_from(data, compiled.HEADER_SIZE + 7 * 4 + 4 * compiled.ENTRY_SIZE)[1:3] == (
        2**31 + 1, 0)


def test_segments_are_the_same_interpreted(tmp_path: Path) -> None:
    """Segment writes (one pwritev per IOV_MAX parts) and lookups by offset, compiled (every group's append and
    consume-queue run call them) and interpreted, give the same files and the same answers."""
    import txmq.store.mapped_file as compiled

    interpreted = load_interpreted("txmq.store.mapped_file")
    seen = {}
    for module in (compiled, interpreted):
        queue = module.MappedFileQueue(str(tmp_path / str(id(module))), 4096)
        first, second = queue.create(0), queue.create(4096)
        first.write([b"a" * 3] * (module.IOV_MAX + 5), 10)  # more parts than one pwritev takes
        second.write([bytearray(b"xyz"), memoryview(b"12")], 4090)
        refused = _outcome(second.write, [b"123"], 4094)
        found = [getattr(queue.find(o), "file_from_offset", None) for o in (0, 4095, 4096, 8191, 8192, -1)]
        seen[module] = (first.read(0, 8192), second.read(4088, 100), first.last_nonzero(), refused[0], found,
                        first.end_offset, [mf.file_from_offset for mf in queue.files_from(4096)])
        for mf in queue.files:
            mf.close()
    assert seen[compiled] == seen[interpreted]
    assert seen[compiled][4] == [0, 0, 4096, 4096, None, None]


def test_none_for_a_typed_argument_raises_instead_of_crashing() -> None:
    import subprocess
    import sys

    calls = ["txmq.message.encode_message(None)", "txmq.message.message_parts(None)",
             "txmq.store.record.encode_record(None)", "txmq.remoting.codec.encode_command(None)",
             "txmq.remoting.codec.encode_json_header(None)"]
    code = ("from tests.compiled import install_source_first; install_source_first()\n"  # TXMQ_INTERPRETED=1 as here
            "import txmq.message, txmq.remoting.codec, txmq.store.record\n") + "".join(
        f"try:\n    {call}\nexcept (AttributeError, TypeError):\n    pass\n" for call in calls)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr.decode()[-300:]
