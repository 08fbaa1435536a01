"""``gctune.paused``: the collector held off for a burst of long-lived objects, and left as it was found."""

from __future__ import annotations

import gc

import pytest

from txmq import gctune


def test_paused_holds_the_collector_off_and_leaves_it_as_it_was_found() -> None:
    assert gc.isenabled()
    with gctune.paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gctune.paused():
        raise RuntimeError("recovery failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with gctune.paused():
            pass
        assert not gc.isenabled()  # (disabled by someone else: not turned on behind their back)
    finally:
        gc.enable()
