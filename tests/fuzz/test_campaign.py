"""The short fuzz campaign: each family of hostile inputs against its own live ``txmq server``, then every
invariant of ``campaign.INVARIANTS`` that applies to it, one test each (``bench/fuzz.py`` runs the long one)."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fuzz.campaign import FAMILIES, HALF_MARKER, INVARIANTS, Figures, run_campaign
from tests.fuzz.remoting_inputs import Pools, RemotingFuzzer

SEED = int(os.environ.get("TXMQ_FUZZ_SEED", "11"))
COUNTS = {"frames": 3000, "requests": 3000, "half-pointers": 1500, "send-back-half": 600, "path-names": 1500,
          "grpc": 1200}
MAX_S = 20.0  # per family, whatever the count

def _cases() -> Iterator[object]:
    for family in FAMILIES:
        for invariant in INVARIANTS:
            if invariant == "closes-bad-frames" and family != "frames":
                continue  # only frames carry bytes the decoder refuses
            yield pytest.param(family, invariant, id=f"{family}-{invariant}")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Figures]:
    """The figures of each family's campaign, run once per module on first use."""
    done: dict[str, Figures] = {}

    def get(family: str) -> Figures:
        if family not in done:
            done[family] = run_campaign(family, tmp_path_factory.mktemp(family), seed=SEED, count=COUNTS[family],
                                        max_s=MAX_S)
            print(done[family].summary())
        return done[family]
    return get


@pytest.mark.parametrize(("family", "invariant"), _cases())
def test_campaign(campaign: Callable[[str], Figures], family: str, invariant: str) -> None:
    figures = campaign(family)
    assert sum(figures.inputs.values()) >= COUNTS[family] or figures.seconds >= MAX_S, figures.summary()
    assert figures.probes >= 2 and sum(figures.responses.values()) > 0, figures.summary()
    assert not figures.violations.get(invariant), figures.summary()
    if invariant == "serving":
        assert figures.restarts == 0, figures.summary()


def test_inputs_are_deterministic_per_seed_and_never_carry_the_marker() -> None:
    def inputs(seed: int) -> list[bytes]:
        rng = random.Random(seed)
        fuzzer = RemotingFuzzer(rng, Pools())
        return [(fuzzer.frame() if rng.random() < 0.5 else fuzzer.request()).data for _ in range(300)]

    first = inputs(7)
    assert first == inputs(7) and first != inputs(8)
    assert not any(HALF_MARKER in data for data in first)


def test_the_long_campaign_script_runs_and_prints_its_totals(tmp_path: Path) -> None:
    """``bench/fuzz.py``, as a reader runs it from the repository: a few inputs of one family, its summary and
    totals printed, exit 0 (nothing broken)."""
    done = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[2] / "bench" / "fuzz.py"),
                           "--count", "40", "--families", "frames", "--check-every", "20", "--duration", "30"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"^total: \d+ inputs in \d+s, \d+ probes, .*; broken: nothing$", done.stdout, re.M), done.stdout

