"""The epoch file (RocketMQ's EpochFileCache): for each master epoch, the commit-log offset where it started.

Two replicas' logs agree up to the end of the last epoch they both have with the same start: the end of an
epoch is where the next one starts, or the log's end. A replica that rejoins a group truncates its log there
before it follows the new master (``consistent_point``), so records the old master never replicated do not
survive a switch (nor come back after the next crash: the truncation is on disk before the stream starts).
"""

from __future__ import annotations

import logging
from pathlib import Path

import orjson

from txmq.fileio import write_atomic

log = logging.getLogger("txmq.ha")

Entries = list[tuple[int, int]]  # (epoch, start offset), epochs increasing, offsets non-decreasing


class EpochFile:
    """``<store>/epochFileCheckpoint``, rewritten atomically (and fsynced) at every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: Entries = []
        if path.exists():
            try:
                self.entries = [(int(e), int(o)) for e, o in orjson.loads(path.read_bytes())]
            except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
                log.error("epoch file %s unreadable (%s): starting without epochs", path, exc)

    @property
    def last_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else 0

    def _save(self) -> None:
        write_atomic(self.path, orjson.dumps(self.entries))

    def append(self, epoch: int, start: int) -> None:
        """A new epoch starts at ``start`` (this replica became master, or follows one that did)."""
        if self.entries and (epoch <= self.entries[-1][0] or start < self.entries[-1][1]):
            raise ValueError(f"epoch {epoch} at {start} does not follow {self.entries[-1]}")
        self.entries.append((epoch, start))
        self._save()
        log.info("epoch %d starts at offset %d", epoch, start)

    def replace(self, entries: Entries) -> None:
        """Take the master's epochs (a slave following it)."""
        if entries != self.entries:
            self.entries = list(entries)
            self._save()

    def truncate_from(self, offset: int) -> None:
        """Forget epochs that start after ``offset`` (the log was truncated there)."""
        kept = [(e, o) for e, o in self.entries if o <= offset]
        if kept != self.entries:
            self.entries = kept
            self._save()


def _end_of(entries: Entries, i: int, log_end: int) -> int:
    return entries[i + 1][1] if i + 1 < len(entries) else log_end


def consistent_point(mine: Entries, my_end: int, theirs: Entries, their_end: int) -> int:
    """Where this log and the master's agree up to: the end of the newest epoch both have with the same start
    (the smaller of its two ends), 0 without a common epoch. With no epochs on either side the logs are from
    before any election: they agree up to the shorter end (the HA handshake's tail check still applies)."""
    if not mine or not theirs:
        return min(my_end, their_end) if not mine and not theirs else 0
    starts = dict(theirs)
    for i in range(len(mine) - 1, -1, -1):
        epoch, start = mine[i]
        if starts.get(epoch) == start:
            j = next(k for k, (e, _) in enumerate(theirs) if e == epoch)
            return min(_end_of(mine, i, my_end), _end_of(theirs, j, their_end))
    return 0
