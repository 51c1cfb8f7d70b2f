"""The two failures a handler can signal; anything else is treated as Retryable.

Handlers raise :class:`Retryable` for transient trouble (a timeout, a 503) and
:class:`Fatal` when another attempt cannot help (a 400, bad input). The pipeline turns
them into ``retry_wait`` with backoff or a dead letter.
"""

from __future__ import annotations


class Retryable(Exception):
    """Try the event again later; ``retry_after`` (seconds) overrides the computed backoff."""

    def __init__(self, message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Fatal(Exception):
    """Do not try again: dead-letter the event with a snapshot."""
