"""A failure that goes on (the store down for minutes): said once, then counted.

A store outage fails every sweep, every lane's attempt and every reply's mark, again and
again for as long as it lasts. A log line with a traceback for each of them buries the
one line an operator needs under hundreds of copies of it, and fills the journal. A
:class:`Streak` logs the first failure in full (with its traceback), counts the ones after
it, says the count once every ``every`` seconds while the streak lasts (the same event
with ``repeated=N``: the failures since the line before), and at the first success after
it, how many there were in all and for how long (its ``recovered`` event). One streak per
kind of failure, shared by everything that meets it: a hundred lanes failing on one
outage are one streak, not a hundred.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import structlog

from tether.redaction import redactor

#: Seconds between two lines of one streak: the count, while the failures go on.
SUMMARY_EVERY = 60.0


class Streak:
    """One kind of repeated failure, logged as ``event``; ``recovered`` names its end."""

    def __init__(
        self,
        log: structlog.typing.FilteringBoundLogger,
        event: str,
        *,
        recovered: str,
        every: float = SUMMARY_EVERY,
        traceback: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.event, self.recovered = event, recovered
        self._log, self._every, self._traceback, self._clock = log, every, traceback, clock
        #: Failures since the streak began (0: none now).
        self.failures = 0
        self._unsaid = 0  # failures since the last line
        self._began = self._said = 0.0

    def failed(self, exc: BaseException | None = None, **fields: Any) -> None:
        """One more failure (``exc``: by default the exception being handled)."""
        exc = exc if exc is not None else sys.exc_info()[1]
        error = redactor.scrub(f"{type(exc).__name__}: {exc}")[:500] if exc else None
        now = self._clock()
        self.failures += 1
        if self.failures == 1:
            self._began = self._said = now
            trace = {"exc_info": exc} if self._traceback and exc is not None else {}
            self._log.error(self.event, error=error, **fields, **trace)
            return
        self._unsaid += 1
        if now - self._said >= self._every:
            self._say(now, error=error, **fields)

    def passed(self) -> None:
        """It worked: a streak that was on ends, with one line saying how long it lasted."""
        if not self.failures:
            return
        self._log.info(
            self.recovered,
            failures=self.failures,
            duration_s=round(self._clock() - self._began, 3),
        )
        self.failures = self._unsaid = 0

    def flush(self) -> None:
        """Stopping while the failures go on: say the count not yet said."""
        if self._unsaid:
            self._say(self._clock())

    def _say(self, now: float, **fields: Any) -> None:
        self._log.error(
            self.event,
            repeated=self._unsaid,
            failures=self.failures,
            since_s=round(now - self._began, 3),
            **fields,
        )
        self._said, self._unsaid = now, 0
