"""Steps of a running broker's wall clock with work in flight, each followed by a SIGTERM and a SIGKILL restart:
a name server and a broker under a fake clock (faketime.py), the clients in this process on the real clock
(probe.py). What came back is judged in real elapsed time; the broker's retention runs every half second at any
hour with 64 KiB segments, and nothing may be deleted, discarded, lost or delivered twice.

Before the clock rule these failed: -2 min and -1 h held first checks and delayed messages back by the step
(store timestamps never went back, and due times were computed from them; the messages stored after the step
carried the highest stamp ever written, also after the restarts); +1 h checked 2-second timeouts at
once, redelivered every unacknowledged gRPC message at once and discarded one-second-old halves as orphans; +73 h
deleted every full segment of fresh data and discarded UNKNOWN transactions unchecked; a year ahead then corrected
stalled everything for the year, also after the restarts."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.clock.conftest import Faked
from tests.clock.probe import BROKER_CONF, UNKNOWN, Probe
from txmq import Admin, Message, PullConsumer, PullStatus, TransactionProducer

TAG = "steps"
TOPICS = {f"{TAG}_tx": 2, f"{TAG}_delay": 2, f"{TAG}_grpc": 1, f"{TAG}_ping": 1, f"{TAG}_filler": 1,
          f"{TAG}_orphan": 1}
FILLER = 200  # 1 KiB messages: three full 64 KiB segments and more
YEAR = 365 * 24 * 3600
STEPS = {"-2 min": [-120], "+1 h": [3600], "-1 h": [-3600], "+73 h": [73 * 3600],
         "+1 year then corrected": [YEAR, -YEAR]}
FIGURES: dict[str, dict[str, list[float]]] = {}  # step -> kind -> seconds (reported at the end)


class Campaign:
    def __init__(self, faked: Faked) -> None:
        self.faked = faked
        self.probe = Probe(faked.namesrv, faked.grpc_addr, TAG)

    def orphan(self, name: str) -> None:
        """A half whose producer then goes away for good: no check can reach its group."""
        with TransactionProducer(f"p_{TAG}_orphan_{name}", self.probe.checks, self.faked.namesrv) as p:
            assert p.send_message_in_transaction(Message(f"{TAG}_orphan", name.encode())).local_transaction_state \
                == UNKNOWN

    def broker_stats(self) -> dict:
        with Admin(self.faked.namesrv) as admin:
            return admin.stats()["broker-a"]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Campaign]:
    faked = Faked(tmp_path_factory.mktemp("clock-steps"))
    c: Campaign | None = None
    try:
        faked.start(BROKER_CONF, TOPICS)
        c = Campaign(faked)
        for i in range(FILLER):  # acknowledged, never consumed: retention must keep them
            c.probe.plain.send(Message(f"{TAG}_filler", b"%04d" % i + b"f" * 1020))
        assert c.broker_stats()["store"]["segments"] >= 4
        yield c
    finally:
        if c is not None:
            c.probe.close()
        faked.close()
    for step, kinds in FIGURES.items():
        print(f"\n{step}: " + ", ".join(f"{k} {min(v):.2f}-{max(v):.2f} s (n={len(v)})" for k, v in kinds.items() if v))


def filler_left(namesrv: str) -> int:
    with PullConsumer(f"scan_{TAG}", namesrv) as pc:
        [mq] = pc.fetch_subscribe_message_queues(f"{TAG}_filler")
        offset, count = 0, 0
        while True:
            got = pc.pull(mq, "*", offset, 32)
            if got.status != PullStatus.FOUND:
                return count
            count += len(got.msgs)
            offset = got.next_begin_offset


def test_a_73_hour_jump_deletes_no_fresh_segment(campaign: Campaign) -> None:
    """fileReservedTime is 72 h: after the wall clock jumps 73 h ahead, retention (every half second at any hour;
    10 s before cleanResourceInterval was read) must keep every segment of messages written seconds ago."""
    c, faked = campaign, campaign.faked
    segments = c.broker_stats()["store"]["segments"]
    faked.clock.step(73 * 3600)
    time.sleep(11)  # several checkpoints (3 s) and retention passes
    store = c.broker_stats()["store"]
    assert (store["min_offset"], store["segments"]) == (0, segments), store
    assert filler_left(faked.namesrv) == FILLER
    faked.clock.step(-73 * 3600)


def test_an_hour_ahead_makes_no_orphan_of_a_fresh_half(campaign: Campaign) -> None:
    """A half whose producer left is discarded as an orphan transactionTimeOut x transactionOrphanFactor (2 s x 600)
    after it was stored, not because the wall clock jumped an hour."""
    c, faked = campaign, campaign.faked
    c.orphan("fresh")
    faked.clock.step(3600)
    time.sleep(3)  # three check passes
    tx = c.broker_stats()["transactions"]
    assert (tx["discards"], tx["orphans"]) == (0, 0) and tx["pending"] >= 1, tx
    faked.clock.step(-3600)


@pytest.mark.parametrize("name", list(STEPS))
def test_a_step_of_the_brokers_clock_stalls_nothing_hastens_nothing_and_deletes_nothing(campaign: Campaign,
                                                                                       name: str) -> None:
    c, probe, faked = campaign, campaign.probe, campaign.faked
    label = name.replace(" ", "").replace("+", "p").replace("-", "m")
    segments = c.broker_stats()["store"]["segments"]
    c.orphan(label)
    first_round = len(probe.rounds)
    for n, step in enumerate(STEPS[name]):
        r = probe.start_round(f"{label}s{n}")
        faked.clock.step(step, settle=False)  # takes effect within two seconds, while the round is in flight
        probe.finish(r)
    for how in ("TERM", "KILL"):
        r = probe.start_round(f"{label}{how}")
        r.no_earlier = False  # the broker keeps no receive state across a restart: unacknowledged ones come at once
        faked.restart(how)
        r.reachable = probe.reconnected()
        probe.finish(r)
        # Stored (delayed ones delivered, committed ones committed) with the wall clock of the moment, wherever the
        # clock was before: not the highest stamp ever written.
        ahead = {b: round(probe.arrivals.stamp_ahead[b] - faked.clock.offset, 1) for b in r.sent}
        assert all(-30 < a < 30 for a in ahead.values()), ahead
    probe.no_delivery_after_ack()
    stats = c.broker_stats()
    tx = stats["transactions"]
    assert (tx["discards"], tx["orphans"]) == (0, 0), tx  # orphans of this and earlier steps still pending
    assert stats["store"]["min_offset"] == 0 and stats["store"]["segments"] >= segments, stats["store"]
    assert filler_left(faked.namesrv) == FILLER
    assert not faked.broker_errors()
    FIGURES[name] = probe.timings_since(first_round)
