"""StoreClock: wall-clock stamps for records, and the broker's own elapsed-time account for every age.

A record's STORETIMESTAMP is the wall clock (CLOCK_REALTIME) of the moment it was written, as RocketMQ stamps it:
it is shown to users and searched by (SEARCH_OFFSET_BY_TIMESTAMP). Nothing that waits or ages reads it as is:
first check-backs, orphan ages, delay-level due times and retention count on the **elapsed-time account**, the
milliseconds this store has counted on CLOCK_MONOTONIC, which a step of the wall clock does not move.

The account survives restarts. It is saved (with the monotonic time of the save and the kernel's boot id) at each
checkpoint; an open on the same boot resumes it from the saved value plus the monotonic time that passed since, so
the downtime counts as it did in real time. After a reboot the monotonic clock starts over: the account resumes
from its last saved value, and the downtime is not counted (what fell due meanwhile fires that much later, never
earlier, whatever the wall clock did across the reboot).

**The time line** maps a record to the account: anchors ``(commit-log offset, skew, since)``, each saying that the
records from ``offset`` on were stamped with ``wall = account + skew``, the account being at least ``since`` when
they were written. A record's account time is ``store timestamp - skew`` of the anchor before it, kept between its
anchor's ``since`` and the next anchor's (records are appended in account order), and never past now. A new anchor
is made when the wall clock moved against the account by more than ``TOLERANCE_MS`` (a step, or slewing that added
up): at the group of records being stamped, saved before they are written, with one log line. A slave's records
carry its master's stamps, and its master's anchors come with them (``follow``, from the HA stream): each becomes
one of the slave's, in the slave's account's terms, so a record is aged from when its master wrote it. From a
master that sends none (HA protocol version 3) the slave guesses (``replicated``): a record from the future (the
master's clock ahead, or stepped forward) starts an anchor at its arrival, and one stamped earlier than the record
before it (the master's clock stepped back) an anchor where the record before it was; anchors at arrival are made
at most once a second, and the records between two are counted from no later than the second one (``since``):
what such a slave catches up is aged from its arrival.
Anchors wholly below the log's start are dropped with the segments (``trim``); a truncated tail takes its anchors.

**Marks** are the commit-log offsets where a record is stamped lower than the record before it, whatever the size:
a search by store time looks at each rising stretch between two apart (``steps_back``). An anchor is no such
boundary: a step back under the tolerance makes none, and one made well after the step may still rise. A mark is
made when a group is stamped (saved before its records are written, as an anchor is), when a slave copies a record,
and again for the records recovery reads past the checkpoint (a crash may come between a slave's records and its
mark); a record whose predecessor's stamp is not known (the first one recovery reads, the first a slave copies
after its log was cut) is marked too, which splits a rising stretch at worst. Only a stamp lower than the one
before it makes a mark, and a stretch rises, so that is the highest of its stretch: slewing, NTP's usual
correction, moves the wall clock at another rate and never back, and makes none; each mark is a step back of the
wall clock (or a master's) seen between two groups (one per group at most), or a crash or a cut of a slave's log.
Marks at or below the log's start go with its segments; a truncated tail takes its marks.

File ``clock`` in the store's root (JSON, replaced atomically): ``version``, ``boot`` (the boot id),
``monotonic_ns`` and ``elapsed_ms`` of the last save, ``anchors`` (``[offset, skew_ms, since_ms or null]``),
``marks`` (offsets); a file without ``marks`` (written by a txmq before them) marks its anchors whose skew fell by
more than the tolerance, the steps back it knew. A store without one (new, or written by a txmq before this file)
starts the account at 0 with one anchor at offset 0 and the wall clock's skew: records already in the log age by
their store timestamps, as they did.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from txmq.fileio import write_atomic
from txmq.wallclock import boot_id

log = logging.getLogger("txmq.store")

TOLERANCE_MS = 100  # the wall clock may drift this far from the account before a new anchor is made
ARRIVAL_ANCHOR_EVERY_MS = 1000  # a slave's anchors at arrival, at most this often
VERSION = 1


class StoreClock:
    """The elapsed-time account and the time line of one store. Used on the loop thread; ``save`` may run in the
    checkpoint's worker thread."""

    def __init__(self, root: str) -> None:
        self.path = Path(root) / "clock"
        # Read for every reading of the account and every stamp: tests replace them (a clock that steps, time that
        # passes at once).
        self.monotonic_ns: Callable[[], int] = time.monotonic_ns
        self.wall_ns: Callable[[], int] = time.time_ns
        self._save_lock = threading.Lock()
        self._offsets: list[int] = []  # the anchors, by offset (bisect), and their skew and since
        self._skews: list[int] = []
        self._since: list[int | None] = []
        self._marks: list[int] = []  # ascending
        self._last_arrival_anchor = -ARRIVAL_ANCHOR_EVERY_MS
        self.following = False  # a slave's records mapped by its master's anchors (``follow``), not guessed
        self._held = False  # changes saved once, when ``_saved_once`` ends
        self._unsaved = False
        self.downtime_note = ""
        now_mono = self.monotonic_ns()
        self._base_mono = now_mono
        self._base_elapsed_ms = 0
        try:
            saved = json.loads(self.path.read_bytes())
            if not isinstance(saved, dict) or saved.get("version") != VERSION:
                raise ValueError("an unknown layout")
            elapsed = int(saved["elapsed_ms"])
            away_ns = now_mono - int(saved["monotonic_ns"])
            for offset, skew, since in saved["anchors"]:
                self._append(int(offset), int(skew), None if since is None else int(since))
            marks = saved.get("marks")
            self._marks = sorted({int(m) for m in marks}) if marks is not None else self._anchored_steps_back()
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.error("store clock file %s unreadable (%s): the elapsed-time account starts again", self.path, exc)
            del self._offsets[:], self._skews[:], self._since[:], self._marks[:]
            return
        if saved.get("boot") == boot_id() and boot_id() and away_ns >= 0:
            elapsed += away_ns // 1_000_000
            self.downtime_note = f"{away_ns / 1e9:.1f} s since its last save counted on the monotonic clock"
        else:
            self.downtime_note = "after a reboot: the time the broker was down is not counted"
        self._base_elapsed_ms = elapsed

    # --- readings ---------------------------------------------------------------------------------------

    def elapsed_ms(self) -> int:
        """The account now."""
        return self._base_elapsed_ms + (self.monotonic_ns() - self._base_mono) // 1_000_000

    def wall_ms(self) -> int:
        return self.wall_ns() // 1_000_000

    def elapsed_of(self, offset: int, store_timestamp: int) -> int:
        """The account when the record at commit-log ``offset``, stamped ``store_timestamp``, was written."""
        offsets = self._offsets
        now = self.elapsed_ms()
        if not offsets:
            return now
        i = len(offsets) - 1 if offset >= offsets[-1] else max(0, bisect.bisect_right(offsets, offset) - 1)
        at = store_timestamp - self._skews[i]
        since = self._since[i]
        if since is not None and at < since:
            at = since
        if i + 1 < len(offsets):
            later = self._since[i + 1]
            if later is not None and at > later:
                at = later
        return min(at, now)

    def age_ms(self, offset: int, store_timestamp: int) -> int:
        """How long ago, by the account, the record at ``offset`` was written (never negative)."""
        return max(0, self.elapsed_ms() - self.elapsed_of(offset, store_timestamp))

    def elapsed_of_wall(self, wall_ms: int) -> int:
        """The account at a wall-clock time of the present anchor, never past now (a transaction snapshot written
        before the account existed holds store seconds, not account seconds)."""
        return min(wall_ms - self._skews[-1], self.elapsed_ms()) if self._skews else self.elapsed_ms()

    def steps_back(self) -> list[int]:
        """The commit-log offsets, ascending, where store timestamps step back (the marks), so that a search by store
        time looks at each rising stretch apart."""
        return list(self._marks)

    def _anchored_steps_back(self) -> list[int]:
        """The steps back a clock file without marks knew: anchors whose skew is lower than the one before by more
        than the tolerance."""
        skews = self._skews
        return [offset for i, offset in enumerate(self._offsets) if i and skews[i] < skews[i - 1] - TOLERANCE_MS]

    # --- the time line ----------------------------------------------------------------------------------

    def open(self, end: int) -> None:
        """After recovery, the log ending at ``end``: anchors past it go (the records they were made for were
        truncated), and the wall clock is compared with the account."""
        while self._offsets and self._offsets[-1] > end:
            self._pop()
        self._drop_marks_from(end)
        elapsed = self.elapsed_ms()
        skew = self.wall_ms() - elapsed
        log.info("store clock: elapsed-time account at %.1f s%s", elapsed / 1000,
                 f" ({self.downtime_note})" if self.downtime_note else "")
        if not self._skews:
            self._append(0, skew, None)  # a log without a time line ages by its stamps, as it did
        elif end > self._offsets[-1] or abs(skew - self._skews[-1]) > TOLERANCE_MS:
            # Also when the clock agrees: the records before ``end`` were all written before now, which bounds an
            # anchor a crash kept from being saved (a slave's, made after its records were written).
            moved = skew - self._skews[-1]
            self._anchor(end, skew, elapsed, f"across the restart the wall clock moved {moved / 1000:+.3f} s "
                         "against the store's elapsed time" if abs(moved) > TOLERANCE_MS else "", abs(moved) >= 1000)
        self._save_now()

    def stamp(self, offset: int, previous: int) -> int:
        """The wall-clock time to stamp on records written from ``offset`` on, after one stamped ``previous`` (0: none
        known); makes an anchor there when the wall clock moved against the account since the present one, and a
        mark when it is lower than ``previous``, both saved before returning."""
        wall = self.wall_ms()
        elapsed = self.elapsed_ms()
        skew = wall - elapsed
        marked = self.mark(offset, wall, previous)
        if not self._skews:
            self._anchor(0, skew, None, "", False)
        elif abs(skew - self._skews[-1]) > TOLERANCE_MS:
            self._anchor(offset, skew, elapsed, f"the wall clock moved {(skew - self._skews[-1]) / 1000:+.3f} s "
                         "against the store's elapsed time", abs(skew - self._skews[-1]) >= 1000)
        elif marked:
            self._save_now()
        return wall

    def mark(self, offset: int, store_timestamp: int, previous: int) -> bool:
        """Mark the record at ``offset`` (not saved: the caller saves) when it is stamped lower than the record before
        it, stamped ``previous`` (0: not known, and so marked unless it is the log's first); whether a mark was
        added. Recovery calls it for the records it reads past the checkpoint, before ``open`` saves."""
        if offset <= 0 or (previous and store_timestamp >= previous):
            return False
        marks = self._marks
        i = bisect.bisect_left(marks, offset)
        if i < len(marks) and marks[i] == offset:
            return False
        marks.insert(i, offset)
        return True

    def anchors_for(self, start: int, end: int) -> list[tuple[int, int, int | None]]:
        """The anchors that map the records from ``start`` to ``end``: the one ``start`` is under and those after
        it before ``end`` (what a master sends its slaves with its log)."""
        offsets = self._offsets
        first = max(0, bisect.bisect_right(offsets, start) - 1)
        last = max(bisect.bisect_left(offsets, end), first + 1)
        return list(zip(offsets[first:last], self._skews[first:last], self._since[first:last], strict=True))

    def follow(self, offset: int, anchors: list[tuple[int, int, int | None]], difference: int) -> None:
        """A slave's log continues at ``offset`` with records its master maps by ``anchors`` (``anchors_for``) on
        its own account; ``difference`` is this account minus the master's, or more (never less: records are then
        aged younger than they are, never older). Each master anchor from ``offset`` on becomes one of this time
        line, in this account's terms; the one ``offset`` is under is put at ``offset`` at the first frame of a
        session (the anchor this store's open made there counts the records after it from the open, but its master
        may have written them long before), and later when it maps records more than ``TOLERANCE_MS`` apart from
        the present anchor (a ``difference`` that moved). While following, ``replicated`` guesses nothing."""
        first = not self.following
        self.following = True
        with self._saved_once():  # one save for the frame's anchors, before its records are written (a frame may
            for at, skew, since in anchors:  # carry thousands)
                mine = skew - difference
                if first or at > self._offsets[-1] or abs(mine - self._skews[-1]) > TOLERANCE_MS:
                    # A since is a bound both ways: after its anchor's offset (no earlier) and before it (no later).
                    # The master's for an anchor before ``offset`` is none for the records this log holds before it.
                    since = None if since is None or at < offset else since + difference
                    self._anchor(max(at, offset), mine, since, "", False)
                first = False

    def replicated(self, records: Sequence[tuple[int, int]], previous: int) -> None:
        """A slave's records, ``(offset, store timestamp)`` as its master stamped them, in log order after one stamped
        ``previous`` (0: none known); what they make of the time line saved once (a master whose clock stepped back
        at every group makes every record a mark: a save each rewrote the whole file)."""
        with self._saved_once():
            for offset, store_timestamp in records:
                self._replicated(offset, store_timestamp, previous)
                previous = store_timestamp

    def _replicated(self, offset: int, store_timestamp: int, previous: int) -> None:
        """A mark when the record is stamped lower than ``previous``; unless the master's anchors map its records
        (``follow``), an anchor when the master's clock stepped back more than the tolerance, or the record is from
        the future."""
        if self.mark(offset, store_timestamp, previous):
            self._save_now()
        if self.following:
            return
        if not self._skews:
            self._anchor(0, self.wall_ms() - self.elapsed_ms(), None, "", False)
        elapsed = self.elapsed_ms()
        if previous and store_timestamp < previous - TOLERANCE_MS:
            before = min(previous - self._skews[-1], elapsed)
            self._anchor(offset, store_timestamp - before, before, f"the master's store timestamps went back "
                         f"{(previous - store_timestamp) / 1000:.3f} s", previous - store_timestamp >= 1000)
        elif store_timestamp - self._skews[-1] > elapsed + TOLERANCE_MS and \
                elapsed - self._last_arrival_anchor >= ARRIVAL_ANCHOR_EVERY_MS:
            self._last_arrival_anchor = elapsed
            self._anchor(offset, store_timestamp - elapsed, elapsed, "", False)

    def _anchor(self, offset: int, skew: int, since: int | None, why: str, loud: bool) -> None:
        """A new anchor at ``offset`` (replacing any there or after it), saved; ``why`` logged once, as a warning
        when ``loud`` (a step of a second or more: slewing that added up is only noted)."""
        while self._offsets and self._offsets[-1] >= offset:
            self._pop()  # nothing was written under it since (the log ends at ``offset``)
        self._append(offset, skew, since)
        self._save_now()
        if why:
            (log.warning if loud else log.info)(
                "store clock: %s from commit-log offset %d on: store timestamps follow the wall clock; checks, "
                "delays, orphan ages and retention count elapsed time", why, offset)

    def _append(self, offset: int, skew: int, since: int | None) -> None:
        self._offsets.append(offset)
        self._skews.append(skew)
        self._since.append(since)

    def _pop(self) -> None:
        self._offsets.pop()
        self._skews.pop()
        self._since.pop()

    def trim(self, min_offset: int) -> None:
        """Forget the anchors wholly below the log's start (retention deleted their records), and the marks at or
        below it (they split nothing left)."""
        drop = max(0, bisect.bisect_right(self._offsets, min_offset) - 1)
        unmark = bisect.bisect_right(self._marks, min_offset)
        if drop or unmark:
            del self._offsets[:drop], self._skews[:drop], self._since[:drop], self._marks[:unmark]
            self._save_now()

    def truncate(self, end: int) -> None:
        """The log now ends at ``end``: anchors past it go, and marks at or past it (the record written next there
        is compared again)."""
        cut = bool(self._offsets and self._offsets[-1] > end)
        while len(self._offsets) > 1 and self._offsets[-1] > end:
            self._pop()
        if self._drop_marks_from(end) or cut:
            self._save_now()

    def _drop_marks_from(self, end: int) -> bool:
        """Forget the marks at or past ``end``; whether there were any."""
        keep = bisect.bisect_left(self._marks, end)
        dropped = keep < len(self._marks)
        del self._marks[keep:]
        return dropped

    # --- persistence ------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _saved_once(self) -> Iterator[None]:
        """The time line's changes inside saved once, when it ends (a slave's frame: its anchors, its records)."""
        self._held = True
        try:
            yield
        finally:
            self._held = False
            if self._unsaved:
                self._unsaved = False
                self._save_now()

    def _save_now(self) -> None:
        """``save`` for a change of the time line: one that fails (a full disk) is logged, and the next checkpoint
        saves again; the records it covers age from no later than the next open (its anchor at the log's end)."""
        if self._held:
            self._unsaved = True
            return
        try:
            self.save()
        except OSError as exc:
            log.error("store clock file %s not saved: %s", self.path, exc)

    def save(self) -> None:
        """Write the account and the anchors (any thread): at each checkpoint, and as an anchor is made."""
        with self._save_lock:
            mono = self.monotonic_ns()
            doc = {"version": VERSION, "boot": boot_id(), "monotonic_ns": mono,
                   "elapsed_ms": self._base_elapsed_ms + (mono - self._base_mono) // 1_000_000,
                   "anchors": [list(a) for a in zip(list(self._offsets), list(self._skews), list(self._since),
                                                    strict=False)],
                   "marks": list(self._marks)}
            write_atomic(self.path, json.dumps(doc, separators=(",", ":")).encode())

    @property
    def anchors(self) -> list[tuple[int, int, int | None]]:
        return list(zip(self._offsets, self._skews, self._since, strict=True))
