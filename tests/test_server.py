"""The serving process's collector settings (``txmq.server.tune_gc``)."""

from __future__ import annotations

import gc

from txmq.server import tune_gc


def test_tune_gc_freezes_startup_objects_and_keeps_the_thresholds() -> None:
    before = gc.get_threshold()
    startup_object: list[list[int]] = [[]]  # tracked by the collector
    try:
        tune_gc()
        assert gc.get_freeze_count() > 0
        assert not any(o is startup_object for o in gc.get_objects())  # frozen: out of every generation
        assert gc.get_threshold() == before
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
