"""The epoch file and the consistent point a rejoining replica truncates its log at."""

from __future__ import annotations

import pytest

from txmq.store.ha.epoch import EpochFile, consistent_point


def test_epoch_file_survives_a_reopen_and_forgets_epochs_after_a_truncation(tmp_path):
    f = EpochFile(tmp_path / "epochFileCheckpoint")
    f.append(1, 0)
    f.append(2, 500)
    f.append(3, 900)
    with pytest.raises(ValueError):
        f.append(3, 1000)
    f.truncate_from(600)
    assert EpochFile(tmp_path / "epochFileCheckpoint").entries == [(1, 0), (2, 500)]
    assert f.last_epoch == 2


def test_consistent_point():
    # The old master wrote 500..800 in epoch 2 alone; the new master took over at 600 in epoch 3.
    old = [(1, 0), (2, 500)]
    new = [(1, 0), (2, 500), (3, 600)]
    assert consistent_point(old, 800, new, 1000) == 600
    # A slave that had less than the new master's start of epoch 3 keeps all it has.
    assert consistent_point(old, 550, new, 1000) == 550
    # Same epochs: the shorter log.
    assert consistent_point(new, 700, new, 1000) == 700
    # Nothing in common: from the start; no epochs on either side: the shorter end.
    assert consistent_point([(4, 0)], 300, new, 1000) == 0
    assert consistent_point([], 300, [], 200) == 200
    # An epoch that started at different offsets does not count.
    assert consistent_point([(1, 0), (2, 400)], 800, new, 1000) == 400
