"""DiskGuard: stop taking writes before the disk is full, as RocketMQ's CleanCommitLogService does.

A put that runs into ENOSPC is undone (nothing stored), but a disk that full also fails the checkpoint and the
files retention would need; refusing puts a little earlier keeps room for all that. Above the warning level
(``diskSpaceWarningLevelRatio``, 90 %) puts are refused until usage falls back under the clean-forcibly level
(``diskSpaceCleanForciblyRatio``, 85 %), so the store does not flap at the threshold; an ENOSPC marks the disk
full at once, whatever the ratio says.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("txmq.store")


def used_percent(path: str) -> float:
    """Used space of the partition holding ``path``, in percent, as ``df`` counts it (space reserved for root
    counts as neither used nor available)."""
    st = os.statvfs(path)
    used = st.f_blocks - st.f_bfree
    total = used + st.f_bavail
    return 100.0 * used / total if total else 100.0


class DiskGuard:
    """Whether the store may write: checked on demand (the caller paces the checks), marked full by ENOSPC."""

    def __init__(self, path: str, warning_percent: float, ok_percent: float) -> None:
        self.path = path
        self.warning_percent = warning_percent
        self.ok_percent = min(ok_percent, warning_percent)
        self.full = False
        self.used = 0.0
        self.reason = ""

    def check(self) -> float:
        """Measure the disk, update ``full``; return the used percent (the last one when it cannot be measured)."""
        try:
            self.used = used_percent(self.path)
        except OSError as exc:
            log.warning("cannot measure the store's disk: %s", exc)
            return self.used
        if self.used > self.warning_percent:
            self._set_full(f"{self.used:.1f} % of the store's disk is used, over diskSpaceWarningLevelRatio "
                           f"{self.warning_percent:g} %")
        elif self.full and self.used <= self.ok_percent:
            self.full = False
            log.warning("the store's disk is %.1f %% used again: puts are accepted", self.used)
        return self.used

    def mark_full(self, why: str) -> None:
        """A write failed for want of space (ENOSPC, EDQUOT): refuse puts until a check finds room again."""
        self._set_full(why)

    def _set_full(self, reason: str) -> None:
        if not self.full:
            log.error("the disk is full (%s): puts are refused until usage is under %g %%", reason, self.ok_percent)
        self.full = True
        self.reason = reason

    @property
    def remark(self) -> str:
        return f"the disk is full ({self.reason}); nothing was stored"
