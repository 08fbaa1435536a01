"""One log line for a run of failures of a background loop (a slave's copy of its master, the timer index, a
consumer's pulls from one broker), and one when it works again: a loop that retries every second or three must not
log at every try."""

from __future__ import annotations

import logging
from typing import Any


class FailureRun:
    def __init__(self, log: logging.Logger, level: int = logging.WARNING) -> None:
        self.log = log
        self.level = level
        self.failing = False

    def failed(self, msg: str, *args: Any) -> None:
        """A try failed: logged when it is the first of its run."""
        if not self.failing:
            self.log.log(self.level, msg, *args)
        self.failing = True

    def worked(self, msg: str, *args: Any) -> None:
        """A try worked: logged when it ends a run of failures."""
        if self.failing:
            self.log.info(msg, *args)
        self.failing = False
