"""Time passing for a store's elapsed-time account, without waiting: the store, transaction and retention tests age
records this way (their ages never come from the wall clock or from file times)."""

from __future__ import annotations

from txmq.store import DefaultMessageStore


def advance(store: DefaultMessageStore, seconds: float) -> None:
    """Make ``seconds`` pass on the store's monotonic clock (and so on its account) at once, the wall clock
    untouched. Cumulative: the clock keeps running from there."""
    clock = store.clock
    before = clock.monotonic_ns
    shift = int(seconds * 1e9)
    clock.monotonic_ns = lambda: before() + shift


def wall_step(store: DefaultMessageStore, seconds: float) -> None:
    """Step the store's wall clock by ``seconds`` (NTP correcting it, a VM restored), the monotonic clock untouched."""
    clock = store.clock
    before = clock.wall_ns
    shift = int(seconds * 1e9)
    clock.wall_ns = lambda: before() + shift

