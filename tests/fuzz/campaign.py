"""A bounded fuzz campaign against a live ``txmq server`` (name server + broker + gRPC in one process), shared by
``tests/fuzz/test_campaign.py`` (short, CI) and ``bench/fuzz.py`` (long, figures).

A campaign runs one *family* of inputs (``FAMILIES``) against a fresh server whose store sits deep inside a
"jail" directory, and checks after every ``check_every`` inputs and at the end:

* ``serving``: the process is alive and a new producer's send plus a new consumer's pull of that message work
  (a failure restarts the server and counts a restart);
* ``no-half-leak``: no byte the servers sent back (remoting frames, gRPC messages and error details) holds
  the marker that starts every half message's body (halves stored at start, never decided);
* ``closes-bad-frames``: bytes txmq's own decoder refuses make the server close the connection;
* ``no-handler-error``: the server log holds no ERROR line (a handler that raised: a bug, not bad input);
* ``names-stay-in-store``: nothing was created outside the store, and every consume queue directory is a
  legal topic name.

Every input is drawn from ``random.Random(seed)``, so a family, seed and count name one input sequence.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import re
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import orjson

from tests.fuzz.grpc_inputs import GrpcCall, GrpcFuzzer
from tests.fuzz.remoting_inputs import HALF_MARKER, Input, Pools, RemotingFuzzer, make_input
from txmq import Admin, Message, Producer
from txmq.client.pull_consumer import PullConsumer
from txmq.client.transaction import HalfMessageRef
from txmq.errors import RemoteProtocolError, TxmqError
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.launch import ServerProcess, free_port, txmq_command
from txmq.message import MessageConst
from txmq.remoting.codec import FrameDecoder, encode_command
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.topic import check_topic

INVARIANTS = ("serving", "no-half-leak", "closes-bad-frames", "no-handler-error", "names-stay-in-store")
PROBE_TOPIC = "fz_probe"  # never in an input pool: the fuzz cannot delete or re-route it
HALF_GROUP = "fz_half_group"  # never in an input pool: no input can decide, check or resume the halves
HALVES = 6
JAIL_DEPTH = 3  # the store is jail/d1/d2/d3/store: a name climbing 5 levels from consumequeue stays in the jail
_LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")  # a log record's first line starts with its time
STORE_ENTRIES = {"commitlog", "consumequeue", "index", "config", "checkpoint", "clock", "abort", "lock",
                 "timer"}  # its own (timer: the timer index, txmq.broker.timer)
BROKER_CONF = "transactionCheckInterval=1000\ntransactionTimeOut=1000\nmaxMessageSize=262144\n"


@dataclass(slots=True)
class Figures:
    family: str
    seed: int
    inputs: Counter[str] = field(default_factory=Counter)
    responses: Counter[str] = field(default_factory=Counter)
    closed_by_server: int = 0
    unanswered: int = 0
    probes: int = 0
    restarts: int = 0
    rss_kb_before: int = 0
    rss_kb_after: int = 0
    seconds: float = 0.0
    violations: dict[str, list[str]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)  # server log errors by code and exception

    def violate(self, invariant: str, detail: str) -> None:
        found = self.violations.setdefault(invariant, [])
        if len(found) < 20:
            found.append(detail)

    def summary(self) -> str:
        lines = [f"{self.family} seed={self.seed}: {sum(self.inputs.values())} inputs in {self.seconds:.1f}s, "
                 f"{self.probes} probes, {self.restarts} restarts, closed by server {self.closed_by_server}, "
                 f"unanswered {self.unanswered}, RSS {self.rss_kb_before} -> {self.rss_kb_after} KiB",
                 "  inputs: " + ", ".join(f"{k} {v}" for k, v in sorted(self.inputs.items())),
                 "  responses: " + ", ".join(f"{k} {v}" for k, v in sorted(self.responses.items()))]
        lines += [f"  server error x{n}: {k}" for k, n in self.errors.most_common()]
        lines += [f"  VIOLATED {k}: {v[0]}" + (f" (+{len(v) - 1} more)" if len(v) > 1 else "")
                  for k, v in sorted(self.violations.items())]
        return "\n".join(lines)


class FuzzServer:
    """One ``txmq server`` process with its store in a jail, a probe topic and never-decided half messages."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.jail = root / "jail"
        self.store = self.jail.joinpath(*(f"d{i}" for i in range(JAIL_DEPTH))) / "store"
        self.store.mkdir(parents=True, exist_ok=True)
        (root / "home").mkdir(exist_ok=True)
        (root / "broker.conf").write_text(BROKER_CONF)
        env = dict(os.environ, HOME=str(root / "home"), PYTHONUNBUFFERED="1")
        args = txmq_command("server", "--store", str(self.store), "--port", str(free_port()), "--namesrv-port",
                            str(free_port()), "--grpc-port", str(free_port()), "-c", str(root / "broker.conf"))
        self.proc = ServerProcess(args, root / "server.log", env)
        self.halves: list[HalfMessageRef] = []
        self.half_ids: list[str] = []
        self._probe_n = 0

    def start(self) -> None:
        self.proc.start(30)

    def stop(self) -> None:
        self.proc.stop()

    def addr(self, target: str) -> tuple[str, int]:
        host, port = self.proc.addrs[target].rsplit(":", 1)
        return host, int(port)

    def prepare(self, rng: random.Random) -> None:
        """The probe topic, and HALVES half messages whose bodies start with the marker (then the producer goes:
        no live connection of the group, so no check ever shows a half to anyone)."""
        with Admin(self.proc.namesrv) as admin:
            admin.create_topic(PROBE_TOPIC, 2)
            admin.create_topic("fz_t0", 4)
        problem = self.probe()  # also puts plain records first: no small edge offset (0) names a half
        if problem is not None:
            raise RuntimeError(f"the server does not serve before any input: {problem}")
        with Producer(HALF_GROUP, self.proc.namesrv) as producer:
            for i in range(HALVES):
                body = HALF_MARKER + f"-{i}-{rng.getrandbits(64):016x}".encode()
                msg = Message("fz_t0", body, tags="TagA", keys=f"fz-half-key-{i}",
                              properties={MessageConst.TRANSACTION_PREPARED: "true",
                                          MessageConst.PRODUCER_GROUP: HALF_GROUP})
                result = producer.send(msg)
                self.halves.append(HalfMessageRef.of(result))
                self.half_ids += [result.msg_id, result.offset_msg_id]

    def probe(self) -> str | None:
        """A new producer sends to the probe topic and a new consumer pulls that message: None, or what failed."""
        self._probe_n += 1
        body = f"probe-{self._probe_n}-{time.monotonic_ns()}".encode()
        try:
            with Producer("fz_probe_p", self.proc.namesrv, send_timeout_s=5) as producer:
                sent = producer.send(Message(PROBE_TOPIC, body))
            with PullConsumer("fz_probe_c", self.proc.namesrv) as consumer:
                consumer.fetch_subscribe_message_queues(PROBE_TOPIC)  # learns the broker's address
                got = consumer.pull(sent.message_queue, offset=sent.queue_offset, max_nums=1)
        except (TxmqError, OSError, TimeoutError) as exc:
            return f"probe {self._probe_n}: {type(exc).__name__}: {exc}"
        if [m.body for m in got.msgs] != [body]:
            return f"probe {self._probe_n}: pulled {[m.body[:40] for m in got.msgs]} ({got.status}), not {body!r}"
        return None

    def rss_kb(self) -> int:
        with contextlib.suppress(OSError, TypeError):
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def log_size(self) -> int:
        return self.proc.log_path.stat().st_size if self.proc.log_path.exists() else 0

    def log_errors(self, since: int) -> list[str]:
        """ERROR lines logged since byte ``since``, each with the exception line its traceback ends with."""
        with open(self.proc.log_path, "rb") as f:
            f.seek(since)
            lines = f.read().decode("utf-8", "replace").splitlines()
        out = []
        for i, line in enumerate(lines):
            if " ERROR " in line or " CRITICAL " in line:
                tail = itertools.takewhile(lambda t: not _LOG_LINE.match(t), lines[i + 1:])
                exc = [t for t in tail if t and not t.startswith((" ", "Traceback"))]
                out.append(line[:300] + (f" | {exc[-1][:200]}" if exc else ""))
        return out

    def escapes(self) -> list[str]:
        """Paths a request name created outside the store, or consume queues named like no legal topic."""
        out = [str(p) for p in self.jail.rglob("*")
               if not (p.is_relative_to(self.store) or self.store.is_relative_to(p))]
        out += [f"store/{e}" for e in set(os.listdir(self.store)) - STORE_ENTRIES]
        for name in os.listdir(self.store / "consumequeue"):
            try:
                check_topic(name)
            except TxmqError:
                out.append(f"consumequeue/{name!r}")
            else:
                out += [f"consumequeue/{name}/{q!r}" for q in os.listdir(self.store / "consumequeue" / name)
                        if not q.isdigit()]
        return out


# --- running inputs -------------------------------------------------------------------------------------


def send_remoting(addr: tuple[str, int], inp: Input, figures: Figures, wait_s: float = 1.5) -> bytes:
    """Send ``inp`` on a new connection; returns every byte the server sent back. Counts answers by code, server
    closes and unanswered requests, and checks that refused bytes close the connection."""
    received = bytearray()
    closed = False
    dec = FrameDecoder(1 << 26)
    answers = 0
    with socket.create_connection(addr, timeout=5) as s:
        try:
            s.sendall(inp.data)
            if inp.answers == 0 and not inp.must_close:
                s.shutdown(socket.SHUT_WR)  # nothing is owed: let the server see the end
        except OSError:  # the server closed while we were still sending (a refused length prefix, say)
            closed = True
        deadline = time.monotonic() + (wait_s if inp.answers else 3.0)
        while not closed and (answers < inp.answers or inp.must_close or inp.answers == 0):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            s.settimeout(left)
            try:
                data = s.recv(1 << 16)
            except TimeoutError:
                break
            except OSError:
                data = b""
            if not data:
                closed = True
                break
            received += data
            dec.receive_data(data)
            while (cmd := dec.next_command()) is not None:
                if cmd.is_response:
                    answers += 1
                    figures.responses[_code_name(cmd.code)] += 1
                else:  # a request the broker sends a client (NOTIFY_CONSUMER_IDS_CHANGED after a heartbeat)
                    figures.responses[f"server-request:{cmd.code}"] += 1
    if closed and not (inp.answers == 0 and not inp.must_close):
        figures.closed_by_server += 1
    if answers < inp.answers and not closed:
        figures.unanswered += inp.answers - answers
    if inp.must_close and not closed:
        figures.violate("closes-bad-frames", f"{inp.kind}: connection left open after {inp.data[:60]!r}")
    return bytes(received)


def send_grpc(stub: object, call: GrpcCall, figures: Figures) -> bytes:
    """Make ``call``; returns the serialized answers and error details (what a leak would show in)."""
    fn = getattr(stub, call.method)
    out: list[bytes] = []
    try:
        if call.method == "Telemetry":
            answers = list(fn(iter(call.requests), metadata=call.metadata, timeout=1.0))
        elif call.method in ("ReceiveMessage", "PullMessage"):
            answers = list(fn(call.requests[0], metadata=call.metadata, timeout=2.0))
        else:
            answers = [fn(call.requests[0], metadata=call.metadata, timeout=3.0)]
        for a in answers:
            out.append(a.SerializeToString())
            figures.responses[_grpc_status(a)] += 1
    except grpc.RpcError as exc:
        figures.responses[f"rpc:{exc.code().name}"] += 1  # type: ignore[attr-defined]
        out.append(str(exc.details()).encode())  # type: ignore[attr-defined]
    return b"".join(out)


def _grpc_status(answer: object) -> str:
    status = getattr(answer, "status", None)
    if status is None or not answer.HasField("status"):  # type: ignore[attr-defined]
        return "ok:" + type(answer).__name__
    return pb.Code.Name(status.code) if status.code in pb.Code.values() else str(status.code)


def _error_key(line: str) -> str:
    """A log error line without time and peer, to count distinct failures."""
    line = re.sub(r"^\S+ \S+ ERROR ", "", line)
    return re.sub(r"from \S+ ", "", line)[:160]


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


# --- families ------------------------------------------------------------------------------------------

Step = Callable[[], bytes]  # run one input, return what came back


def _remoting_family(server: FuzzServer, rng: random.Random, figures: Figures, frames: bool,
                     pools: Pools | None = None, codes: list[int] | None = None, targets: tuple[str, ...] = ("broker",),
                     mutate_bodies: bool = True) -> Step:
    fuzzer = RemotingFuzzer(rng, pools or Pools(), codes, mutate_bodies)
    addrs = [server.addr(t) for t in targets]

    def step() -> bytes:
        inp = fuzzer.frame() if frames and rng.random() < 0.8 else fuzzer.request()
        figures.inputs[inp.kind] += 1
        answer = send_remoting(rng.choice(addrs), inp, figures)
        # `txmq tx show` (9003) is the operator's view of a transaction, body included (with ACL on, only for admin
        # accounts and the group's own); every other answer is scanned for the half's body. A mutated or pipelined
        # frame may carry it under another input's name: the codes are those the server's own decoder reads.
        return b"" if RequestCode.TXMQ_TX_SHOW in _codes_in(inp.data) else answer
    return step


def _codes_in(data: bytes) -> set[int]:
    """The request codes of the whole frames in ``data``, read by the codec the server reads them with."""
    decoder = FrameDecoder()
    decoder.receive_data(data)
    codes = set()
    try:
        while (cmd := decoder.next_command()) is not None:
            codes.add(cmd.code)
    except RemoteProtocolError:  # the server closes the connection here: nothing after it is answered
        pass
    return codes


def _half_pools(server: FuzzServer) -> Pools:
    """Pools aimed at the stored halves: their offsets (and offsets just inside their records), ids and keys."""
    pools = Pools()
    for ref in server.halves:
        pools.ints += [ref.commit_log_offset, ref.tran_state_table_offset, ref.commit_log_offset + 4,
                       ref.commit_log_offset + 20, ref.commit_log_offset + 100]
    pools.strings += server.half_ids + [f"fz-half-key-{i}" for i in range(HALVES)]
    pools.topics += ["fz_t0"] * 3
    return pools


HALF_CODES = [RequestCode.VIEW_MESSAGE_BY_ID, RequestCode.QUERY_MESSAGE, RequestCode.PULL_MESSAGE,
              RequestCode.END_TRANSACTION, RequestCode.TXMQ_END_TRANSACTION_BATCH, RequestCode.TXMQ_TX_SHOW,
              RequestCode.TXMQ_TX_LIST, RequestCode.TXMQ_TX_RESUME, RequestCode.GET_EARLIEST_MSG_STORETIME,
              RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.QUERY_CONSUMER_OFFSET]


def _send_back_family(server: FuzzServer, rng: random.Random, figures: Figures) -> Step:
    """CONSUMER_SEND_MSG_BACK (36) naming a half's commit-log offset (to the dead-letter queue, or retried after
    delay level 1: the sweep then reads the retry topic), and pulls of that group's retry topic."""
    addr = server.addr("broker")
    groups = ["fz_g0", "fz_g1"]

    def step() -> bytes:
        group = rng.choice(groups)
        if rng.random() < 0.5:
            ext = {"group": group, "offset": str(rng.choice(server.halves).commit_log_offset),
                   "delayLevel": str(rng.choice([-1, 1])), "maxReconsumeTimes": "16"}
            kind, cmd = "send-back-half", RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext)
        else:
            ext = {"consumerGroup": group, "topic": f"%RETRY%{group}", "queueId": "0",
                   "queueOffset": str(rng.randrange(0, 8)), "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0",
                   "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}
            kind, cmd = "pull-retry", RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)
        figures.inputs[kind] += 1
        return send_remoting(addr, make_input(kind, encode_command(cmd)), figures)
    return step


def _path_pools() -> Pools:
    """Names with separators and parent references (none starts with "/", none climbs out of the jail)."""
    names = ["../fzx", "a/../../fzx", "fz/../../../fzx", "..", ".", "./", "fz\\..\\x", "fz%2F..%2Fx",
             "/../../fzx"[1:], "x/" * 3 + "../" * 5 + "fzx", "é/../fzx"]
    return Pools(topics=names, groups=names, strings=names)


PATH_CODES = [RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.SEND_MESSAGE, RequestCode.PULL_MESSAGE,
              RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.HEART_BEAT,
              RequestCode.LOCK_BATCH_MQ, RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.GET_MAX_OFFSET]


def _grpc_family(server: FuzzServer, rng: random.Random, figures: Figures,
                 channels: list[grpc.Channel]) -> Step:
    from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub

    pools = Pools()
    fuzzer = GrpcFuzzer(rng, pools.topics + ["fz_t0"] * 4, pools.groups, pools.strings)
    channel = grpc.insecure_channel(server.proc.grpc)
    channels.append(channel)
    stub = MessagingServiceStub(channel)

    def step() -> bytes:
        call = fuzzer.call()
        figures.inputs[f"grpc:{call.method}"] += 1
        return send_grpc(stub, call, figures)
    return step


FAMILIES = ("frames", "requests", "half-pointers", "send-back-half", "path-names", "grpc")
BOTH_PORTS = ("broker", "namesrv")


def _make_step(family: str, server: FuzzServer, rng: random.Random, figures: Figures,
               channels: list[grpc.Channel]) -> Step:
    if family in ("frames", "requests"):
        return _remoting_family(server, rng, figures, family == "frames", targets=BOTH_PORTS)
    if family == "half-pointers":
        return _remoting_family(server, rng, figures, False, _half_pools(server), [int(c) for c in HALF_CODES])
    if family == "send-back-half":
        return _send_back_family(server, rng, figures)
    if family == "path-names":  # names in extFields and in well-formed bodies: only the names are hostile
        return _remoting_family(server, rng, figures, False, _path_pools(), [int(c) for c in PATH_CODES],
                                mutate_bodies=False)
    if family == "grpc":
        return _grpc_family(server, rng, figures, channels)
    raise ValueError(f"unknown family {family}")


@contextlib.contextmanager
def fuzz_server(root: Path, seed: int) -> Iterator[FuzzServer]:
    server = FuzzServer(root)
    server.start()
    try:
        server.prepare(random.Random(seed))
        yield server
    finally:
        server.stop()


def run_campaign(family: str, root: Path, *, seed: int, count: int, max_s: float, check_every: int = 200,
                 progress: bool = False) -> Figures:
    """Run ``count`` inputs of ``family`` (or fewer, when ``max_s`` is up) against a fresh server under ``root``."""
    figures = Figures(family, seed)
    rng = random.Random(f"{family}/{seed}")
    channels: list[grpc.Channel] = []
    with fuzz_server(root, seed) as server:
        log_from = server.log_size()
        figures.rss_kb_before = server.rss_kb()
        step = _make_step(family, server, rng, figures, channels)
        start = time.monotonic()
        try:
            for n in range(1, count + 1):
                if HALF_MARKER in step():
                    figures.violate("no-half-leak", f"input {n}: a response held a half message's body")
                if n % check_every == 0 or n == count or time.monotonic() - start > max_s:
                    _check_serving(server, figures)
                    if progress:
                        print(f"\r{family}: {n}/{count}", end="", file=sys.stderr, flush=True)
                if time.monotonic() - start > max_s:
                    break
        finally:
            for ch in channels:
                ch.close()
        if HALF_MARKER in sweep(server, figures):
            figures.violate("no-half-leak", "a pull after the inputs read a half message's body")
        figures.seconds = time.monotonic() - start
        figures.rss_kb_after = server.rss_kb()
        for line in server.log_errors(log_from):
            figures.violate("no-handler-error", line)
            figures.errors[_error_key(line)] += 1
        for path in server.escapes():
            figures.violate("names-stay-in-store", path)
    if progress:
        print(file=sys.stderr)
    return figures


def sweep(server: FuzzServer, figures: Figures, *, settle_s: float = 1.5, topics_max: int = 400,
          pulls_per_queue: int = 8) -> bytes:
    """Every message any pull can read now: after ``settle_s`` (delay level 1 is due), the first
    ``pulls_per_queue`` pulls of every queue of every topic the broker knows, from offset 0."""
    time.sleep(settle_s)
    addr = server.addr("broker")
    out = bytearray()
    listing = roundtrip(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
    table = orjson.loads(listing.body)["topicConfigTable"]
    for topic, config in list(table.items())[:topics_max]:
        for queue in range(min(int(config["readQueueNums"]), 16)):
            offset = 0
            for _ in range(pulls_per_queue):
                ext = {"consumerGroup": "fz_sweep", "topic": topic, "queueId": str(queue), "queueOffset": str(offset),
                       "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
                       "subscription": "*", "subVersion": "0"}
                resp = roundtrip(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext))
                out += resp.body
                figures.inputs["sweep-pull"] += 1
                next_offset = int(resp.ext_fields.get("nextBeginOffset", offset))
                if resp.code != ResponseCode.SUCCESS or next_offset <= offset:
                    break
                offset = next_offset
    return bytes(out)


def roundtrip(addr: tuple[str, int], cmd: RemotingCommand) -> RemotingCommand:
    with socket.create_connection(addr, timeout=10) as s:
        s.sendall(encode_command(cmd))
        dec = FrameDecoder(1 << 26)
        while (resp := dec.next_command()) is None or not resp.is_response:
            data = s.recv(1 << 16)
            if not data:
                raise ConnectionError(f"{addr} closed without answering code {cmd.code}")
            dec.receive_data(data)
        return resp


def _check_serving(server: FuzzServer, figures: Figures) -> None:
    figures.probes += 1
    problem = None if server.proc.alive else f"process exited ({server.proc.popen and server.proc.popen.returncode})"
    if problem is None:
        problem = server.probe()
        if problem is not None:
            time.sleep(1.0)
            problem = server.probe() and problem
    if problem is not None:
        figures.violate("serving", problem)
        figures.restarts += 1
        server.proc.kill()
        server.start()
