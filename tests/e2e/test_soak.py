"""The soak (bench/soak.py) in short: about 45 s of mixed load against a real name server and broker, with the broker
restarted (SIGTERM) at half time. The hour-long run's figures are in docs/reliability.md; speed is never asserted."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


def load_soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("soak", SOAK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["soak"] = module
    spec.loader.exec_module(module)
    return module


soak = load_soak()


def run_soak(args: list[str], timeout: float) -> tuple[int, str, str]:
    """Run the bench; past ``timeout`` it gets SIGTERM, which stops the servers it started, then SIGKILL."""
    proc = subprocess.Popen([sys.executable, str(SOAK), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        pytest.fail(f"the soak did not end within {timeout} s:\n{out[-4000:]}\n{err[-4000:]}")
    return proc.returncode, out, err


@pytest.mark.timeout(360)
def test_short_soak(tmp_path: Path) -> None:
    report = tmp_path / "soak.json"
    started = time.monotonic()
    code, out, err = run_soak(["--duration", "45", "--interval", "6", "--rate", "50", "--tx-rate", "10",
                               "--delay-rate", "5", "--delay-levels", "1,2,3", "--tx-timeout-ms", "2000",
                               "--tx-check-interval-ms", "2000", "--workdir", str(tmp_path / "soak"),
                               "--json", str(report)], timeout=300)
    assert code == 0, f"{out[-6000:]}\n{err[-4000:]}"
    assert time.monotonic() - started >= 45
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["elapsed", "load1", "rss_MiB"])
    rows = [line for line in lines[header + 1:] if line[:1] == " " and line.split()[0].count(":") == 2]
    assert len(rows) >= 7, out  # six interval lines and the one after the drain, at least
    assert any(line.startswith("# broker restarted (SIGTERM)") for line in lines), out
    assert "correctness: passed" in lines, out
    assert not [line for line in lines if line.lstrip().startswith("FAIL")], out

    figures = json.loads(report.read_text())
    samples = figures["samples"]
    assert len(samples) >= 6
    # The broker's figures were read (the restart may blank one line) and load ran through the whole run.
    assert sum(s["rss_MiB"] is not None and s["fds"] and s["threads"] for s in samples) >= len(samples) - 1
    assert samples[-1]["sent"] > samples[0]["sent"] > 0 and samples[-1]["consumed"] > samples[0]["consumed"]
    assert figures["restart"]["old_pid"] != figures["restart"]["new_pid"]
    assert all(figures["acked"][kind] > 0 for kind in ("p", "t", "d"))
    assert {"COMMIT", "ROLLBACK", "UNKNOWN"} <= set(figures["checks"])  # check-backs answered each way
    assert figures["broker_transactions"]["pending"] == 0 and figures["missing"] == 0 and figures["early"] == 0
    assert figures["passed"] is True
    assert set(figures["slopes_per_hour"]) == {"whole run", "before restart", "after restart"}


def test_ledger_flags_what_the_checks_fail_on() -> None:
    """The soak's checks can fail: a rolled-back transaction, a delayed message before its due time and a body no
    sender made are each recorded; an on-time delivery and a committed one are not."""
    led = soak.Ledger()
    filler = b"x" * 20
    led.attempt(soak.DELAY, 7, due=100.0)
    led.consume(soak.body(soak.DELAY, 7, filler), now=99.0)  # a second early
    led.consume(soak.body(soak.DELAY, 7, filler), now=100.5)
    rolled_back = next(s for s in range(10) if soak.final(s) is soak.ROLLBACK)
    committed = next(s for s in range(10) if soak.final(s) is soak.COMMIT)
    led.attempt(soak.TX, 9)
    led.consume(soak.body(soak.TX, rolled_back, filler), now=1.0)
    led.consume(soak.body(soak.TX, committed, filler), now=1.0)
    led.consume(b"not a soak message", now=1.0)
    led.consume(soak.body(soak.DELAY, 8, filler), now=1.0)  # never sent
    led.consume(soak.body(soak.PLAIN, 0, filler), now=1.0)  # never sent
    assert led.early == [(7, 1.0)]
    assert led.rollback_consumed == [rolled_back]
    assert led.strangers == 3
    assert led.tracks[soak.DELAY].duplicates() == 1


def test_lag_counts_what_is_due_and_not_consumed() -> None:
    led = soak.Ledger()
    filler = b"x" * 20
    for seq in range(3):
        led.attempt(soak.PLAIN, seq)
        led.acked(soak.PLAIN, seq, visible=True)
    led.attempt(soak.DELAY, 0, due=50.0)
    led.acked(soak.DELAY, 0, visible=False)
    led.consume(soak.body(soak.PLAIN, 1, filler), now=1.0)
    led.consume(soak.body(soak.PLAIN, 1, filler), now=1.0)  # a duplicate is not consumed twice
    assert led.lag(now=10.0) == 2  # the delayed message is not due yet
    assert led.lag(now=50.0) == 3
    led.consume(soak.body(soak.DELAY, 0, filler), now=50.0)
    assert led.lag(now=60.0) == 2
    assert led.tracks[soak.PLAIN].missing(lambda s: True) == [0, 2]


def test_check_answers() -> None:
    """A transaction undecided at its first check is decided at its second; the others at once, by their rule."""
    led = soak.Ledger()
    led.attempt(soak.TX, 20)
    undecided = next(s for s in range(20) if soak.undecided_at_first_check(s))
    decided = next(s for s in range(20) if soak.executed(s) is soak.UNKNOWN and not soak.undecided_at_first_check(s))
    assert led.check_answer(decided) is soak.final(decided)
    assert led.check_answer(undecided) is soak.UNKNOWN
    assert led.check_answer(decided) is soak.final(decided)  # a check of a lower number after a higher one
    assert led.check_answer(undecided) is soak.final(undecided)
    assert sum(led.checks.values()) == 4


def test_transaction_outcomes_cover_each_path() -> None:
    seqs = range(12)
    assert {soak.executed(s) for s in seqs} == {soak.COMMIT, soak.ROLLBACK, soak.UNKNOWN}
    unknown = [s for s in seqs if soak.executed(s) is soak.UNKNOWN]
    assert {soak.final(s) for s in unknown} == {soak.COMMIT, soak.ROLLBACK}
    assert any(soak.undecided_at_first_check(s) for s in unknown)
    assert not any(soak.undecided_at_first_check(s) for s in seqs if soak.executed(s) is not soak.UNKNOWN)


def test_slope_per_hour() -> None:
    assert soak.slope_per_hour([(0, 100.0), (1800, 101.0), (3600, 102.0)]) == pytest.approx(2.0)
    assert soak.slope_per_hour([(0, 5.0), (60, None), (120, 5.0), (180, 5.0)]) == pytest.approx(0.0)
    assert soak.slope_per_hour([(0, 1.0), (60, 2.0)]) is None  # too few points to say
