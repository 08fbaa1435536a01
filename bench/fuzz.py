"""The long fuzz campaign of a live txmq server (the short one is ``tests/fuzz/test_campaign.py``).

    .venv/bin/python bench/fuzz.py [--count 20000] [--seed 11] [--duration 600] [--families frames,grpc]

Runs each family of ``tests/fuzz/campaign.py`` against its own fresh ``txmq server`` (free ports, a temporary
store): ``--count`` inputs per family or ``--duration`` seconds, whichever comes first, checking after every
``--check-every`` inputs that the server still serves a new producer's send and a new consumer's pull. Prints,
per family and in total: inputs by kind, responses by code, connections the server closed, requests left
unanswered, probes, server restarts needed, RSS before and after, and every invariant broken (with the first
details). Exits 1 when an invariant broke. Same family, seed and count: same inputs.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

# bench/grpc.py would shadow the grpc package: take this folder off the path; the campaign lives in tests/fuzz, a
# package of the repository's root.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

from tests.fuzz.campaign import FAMILIES, Figures, run_campaign  # noqa: E402

from txmq import bench  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=20_000, help="inputs per family")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds per family at most")
    parser.add_argument("--check-every", type=int, default=200)
    parser.add_argument("--families", default=",".join(FAMILIES), help=f"some of {', '.join(FAMILIES)}")
    args = parser.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
          f"{platform.python_implementation()} {platform.python_version()}, seed {args.seed}, "
          f"count {args.count}, duration {args.duration:.0f}s per family")
    results: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="txmq-fuzz-") as tmp:
        for family in args.families.split(","):
            figures = run_campaign(family, Path(tmp) / family, seed=args.seed, count=args.count,
                                   max_s=args.duration, check_every=args.check_every,
                                   progress=sys.stderr.isatty())
            print(figures.summary(), flush=True)
            results.append(figures)
    inputs = sum((f.inputs for f in results), Counter())
    print(f"total: {sum(inputs.values())} inputs in {sum(f.seconds for f in results):.0f}s, "
          f"{sum(f.probes for f in results)} probes, {sum(f.restarts for f in results)} restarts, "
          f"closed by server {sum(f.closed_by_server for f in results)}, "
          f"unanswered {sum(f.unanswered for f in results)}; broken: "
          + (", ".join(sorted({f"{f.family}/{k}" for f in results for k in f.violations})) or "nothing"))
    return 1 if any(f.violations for f in results) else 0


if __name__ == "__main__":
    bench.run(main)
