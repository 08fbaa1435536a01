"""The calendar, time zones and client skew: a name server, a broker and client processes (driver.py) under a fake
wall clock, each run crossing a boundary while it sends plain, transactional and delayed messages and consumes
them. Every send must succeed (txmq's ids wrapped past day 24.86 of a month: every send failed from the 25th to
the month's end), every message come back once, checks and delays keep their durations."""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.clock.conftest import Faked, utc
from tests.clock.faketime import FakeClock
from tests.clock.probe import BROKER_CONF, INTERVAL_S, SLACK_S, TICK_S

TOPIC = "calendar"
TIMEOUT_S = DELAY_S = 1.0  # shorter than the step campaign's: eight dates and seven clients run one after another
CONF = {**BROKER_CONF, "transactionTimeOut": int(TIMEOUT_S * 1000), "messageDelayLevel": "1s 5s 10s"}
# Each a few seconds before a boundary, so that a run crosses it.
CALENDAR = [
    ("day 24.86 (2^31 ms into the month)", "2027-01-25T20:31:21"),
    ("28-day month end", "2027-02-28T23:59:58"),
    ("30-day month end", "2027-04-30T23:59:58"),
    ("31-day month end and year end", "2027-12-31T23:59:58"),
    ("29-day month end: the leap day", "2028-02-29T23:59:58"),
    ("2038-01-19 (2^31 s)", "2038-01-19T03:14:05"),
    ("past 2106-02-07 06:28:16 (2^32 s)", "2106-02-07T06:28:20"),
]


def figures(outs: list[dict[str, Any]]) -> str:
    """First checks and the delayed deliveries of ``outs``, seconds after sending: the campaign's figures."""
    checks = [c[0] for out in outs for c in out["checks"].values()]
    delays = [d for out in outs for d in out["delayed"]]
    return (f"first check {min(checks):.2f}-{max(checks):.2f} s (n={len(checks)}), delayed {min(delays):.2f}-"
            f"{max(delays):.2f} s (n={len(delays)})")


def judge(out: dict[str, Any], when: dt.datetime, skew_s: float = 0.0) -> None:
    """One driver run: all six messages back once, checks and the delay in their bounds, born timestamps from the
    client's clock (the date plus its skew)."""
    label = out["label"]
    mine = {b: n for b, n in out["bodies"].items() if b.startswith(f"{label}-")}
    assert sorted(mine) == sorted([f"{label}-plain-{i}" for i in range(3)] + [f"{label}-tx-{i}" for i in range(2)]
                                  + [f"{label}-delay-0"]), out
    assert set(mine.values()) == {1}, f"consumed more than once: {out}"
    for body, checks in out["checks"].items():
        assert checks, f"{body} never checked: {out}"
        assert TIMEOUT_S <= checks[0] <= TIMEOUT_S + INTERVAL_S + SLACK_S, f"{body}: {out}"
    assert len(out["delayed"]) == 1 and DELAY_S <= out["delayed"][0] <= DELAY_S + TICK_S + SLACK_S, out
    expected = (when.timestamp() + skew_s) * 1000
    assert all(abs(b - expected) < 120_000 for b in out["born"]), (when, skew_s, out["born"])
    assert len(set(out["ids"])) == len(out["ids"]), out["ids"]


def test_every_date_in_the_calendar_matrix(faked: Faked) -> None:
    """One broker and one client process stepped from date to date (so also steps of years both ways on the
    way), each run crossing its boundary."""
    faked.start(CONF, {TOPIC: 2})
    driver = faked.driver(TOPIC, "calendar")
    ids: list[str] = []
    outs = []
    for n, (_, when) in enumerate(CALENDAR):
        faked.clock.at(utc(when))
        outs.append(out := driver.run(f"d{n}"))
        judge(out, utc(when))
        ids += out["ids"]
    driver.quit()
    print(f"\ncalendar: {figures(outs)}")
    assert len(set(ids)) == len(ids)
    assert not faked.broker_errors()


TIME_ZONES = [
    ("UTC", "2027-03-31T23:59:58"),  # a month end at midnight
    ("Asia/Shanghai", "2027-03-31T15:59:58"),  # local midnight into April while UTC is still in March
    ("America/New_York", "2027-03-14T06:59:58"),  # 02:00 EST becomes 03:00 EDT; and UTC is hours ahead of local
]
SKEWS = [-86400, -3600, 3600, 86400]


def test_client_time_zones_and_skews(faked: Faked, tmp_path) -> None:
    """Clients in UTC, UTC+8 and a US zone with DST, each at the moment its local date and UTC's part; then four
    clients whose clocks are an hour or a day off the broker's, all at once."""
    faked.start(CONF, {TOPIC: 2})
    drivers = [faked.driver(TOPIC, f"tz{n}", tz=tz) for n, (tz, _) in enumerate(TIME_ZONES)]
    outs = []
    for n, (driver, (_, when)) in enumerate(zip(drivers, TIME_ZONES, strict=True)):
        faked.clock.at(utc(when))
        outs.append(out := driver.run(f"tz{n}"))
        judge(out, utc(when))
        driver.quit()
    when = utc("2027-06-30T23:59:58")
    faked.clock.at(when)
    skewed = []
    for n, skew in enumerate(SKEWS):
        clock = FakeClock(tmp_path / f"skew{n}")
        clock.set_offset(faked.clock.offset + skew, settle=False)
        skewed.append((faked.driver(TOPIC, f"skew{n}", clock=clock), skew))
    with ThreadPoolExecutor(len(skewed)) as pool:
        outs += list(pool.map(lambda d: d[0].run(f"skew{SKEWS.index(d[1])}"), skewed))
    for (driver, skew), out in zip(skewed, skews_out := outs[len(TIME_ZONES):], strict=True):
        judge(out, when, skew)
        driver.quit()
    print(f"\ntime zones and skews: {figures(outs)} ({len(skews_out)} skewed clients)")
    assert not faked.broker_errors()
