"""How long to wait for the model, and never longer than ``llm.max_retry_after``.

A provider's ``Retry-After`` is outside input: one 429 saying ``86400`` (or ``inf``) once
put every conversation that called the model into ``retry_wait`` for a day, and a
provider that healed an hour later changed nothing. So every wait on the model side is
bounded here: a key cools for at most the bound (:func:`bounded`), and a provider asking
for more is said out loud once per 429 (``llm.retry_after_capped``, the counter
``tether_llm_retry_after_capped_total{provider}``, and the pool's alert and ``/readyz``
reason until one of its keys answers again).

When no candidate model can answer now (every key cooling, every breaker open), the
call raises :class:`ModelBusy`: a :class:`~tether.errors.Retryable` that says how long
until the earliest one may, and whether that is only the bound (the provider asked for
more). The pipeline then waits for it in ``retry_wait`` if the answer can still come
within ``llm.max_retry_after`` of the event's arrival, and otherwise answers with
``llm.busy_notice`` at once: the person is told, and their next message is tried afresh.
"""

from __future__ import annotations

import math
import time
from email.utils import parsedate_to_datetime
from typing import Any

from prometheus_client import Counter

from tether.errors import Retryable

RETRY_AFTER_CAPPED = Counter(
    "tether_llm_retry_after_capped",
    "429s whose Retry-After asked for longer than llm.max_retry_after (then capped)",
    ["provider"],
)


class ModelBusy(Retryable):
    """No candidate model can answer now; ``retry_after`` says when the earliest may.

    ``capped``: that time is only ``bound`` (every provider asked for longer), so the
    person is better told now than kept waiting; ``bound`` and ``notice`` are the
    ``llm:`` section's ``max_retry_after`` and ``busy_notice`` for the pipeline."""

    def __init__(
        self, message: str, *, retry_after: float, capped: bool, bound: float, notice: str
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        self.capped = capped
        self.bound = bound
        self.notice = notice


def bounded(asked: float, bound: float) -> tuple[float, bool]:
    """``(seconds to wait, whether the provider asked for more than bound)``."""
    return (min(asked, bound), asked > bound)


def retry_after(response: Any) -> float | None:
    """The provider's wait in seconds, ``>= 0`` (``inf`` if it says so), or None when it
    names none we can read: ``retry-after-ms`` (OpenAI), else ``retry-after`` as seconds
    or as an HTTP date."""
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    millis = _seconds(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value = headers.get("retry-after")
    seconds = _seconds(value)
    return seconds if seconds is not None else _date(value)


def _seconds(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return None if math.isnan(seconds) else max(seconds, 0.0)


def _date(value: str | None) -> float | None:
    """An HTTP date (``Wed, 21 Oct 2015 07:28:00 GMT``) as seconds from now."""
    if not value:
        return None
    try:
        when = parsedate_to_datetime(value)
        return max(when.timestamp() - time.time(), 0.0)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
