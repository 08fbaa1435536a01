"""``bench/latency.py --short`` and ``bench/scale.py --short`` (what ``make bench-latency SHORT=1`` and ``make
bench-scale SHORT=1`` run) start their servers, measure, stop them and print their tables: the benches keep
working. Never a speed: the figures are in docs/benchmarks.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
MS = r"[\d,]+(?:\.\d+)?"
ROW4 = rf"{MS} / {MS} / {MS} / {MS}"


def run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(BENCH / script), "--short", *args], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("producer", ["thread", "asyncio"])
def test_the_latency_bench_prints_its_tables(producer: str) -> None:
    out = run("latency.py", "--txmq-producer", producer)
    assert re.search(r"^latency at fixed offered rates, 256 B", out, re.M), out
    assert ("AsyncProducer on asyncio" in out) == (producer == "asyncio"), out
    for system in ("txmq-sync", "txmq-async"):
        # every message of the run arrived (sustained), both percentile columns are numbers
        assert re.search(rf"^\| {system} \| 1,000 \| {ROW4} \| {ROW4} \| yes \|$", out, re.M), out
        assert re.search(rf"^\| {system} transactions \| 100 \| {ROW4} \| {MS} / {MS} \| 200/200 \|$", out,
                         re.M), out


def test_the_scale_bench_prints_its_curves() -> None:
    out = run("scale.py")
    for curve, first in (("topics", "1"), ("groups", "1"), ("connections", "10"), ("log", r"0\.\d+")):
        block = re.search(rf"^{curve}:\n\|.*\|\n\|(?:---\|)+\n((?:\|.*\|\n?){{4}})", out, re.M)
        assert block, out
        rows = block.group(1).strip().splitlines()
        assert len(rows) == 4 and re.match(rf"^\| {first} \|", rows[0]), rows
        for i, row in enumerate(rows):
            cells = [cell.strip() for cell in row.strip("|").split("|")]
            if curve == "topics":  # first-send CPU is shown for 100 first sends or more (/proc counts 10 ms ticks)
                first_send = cells.pop(3)
                assert first_send != "-" if i == len(rows) - 1 else re.fullmatch(r"-|[\d,.]+", first_send), row
                # what a queue added costs, over the first point: none there, a figure at every later one
                per_queue = [cells.pop(12), cells.pop(12), cells.pop(12)]
                assert all(c == "-" if i == 0 else re.fullmatch(r"-?[\d,.]+", c) for c in per_queue), row
            assert "-" not in cells[1:] or curve == "connections", row
    # the sends' CPU, the collector's share of it and the thorough checkpoint's, each a column of its own; the RSS,
    # its anonymous part and the index files' pages (which follow the messages), each per queue added too
    assert re.search(r"^\| topics \| queues \| create ms/topic \| first send µs CPU \| broker CPU µs/msg \| "
                     r"of it collector µs/msg \| thorough checkpoint CPU s \| thorough in window \| "
                     r"µs/msg with thorough \| sends/s \| RSS MB \| of it anonymous MB \| of it index pages MB \| "
                     r"RSS KB/queue added \| anonymous KB/queue added \| RSS KB/queue added, index pages out \|", out,
                     re.M), out
