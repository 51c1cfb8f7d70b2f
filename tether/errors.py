"""The two failures a handler can signal; anything else is treated as Retryable.

Handlers raise :class:`Retryable` for transient trouble (a timeout, a 503) and
:class:`Fatal` when another attempt cannot help (a 400, bad input). The pipeline turns
them into ``retry_wait`` with backoff or a dead letter. :class:`BudgetExceeded` (raised by
``ctx.llm``) is neither: the task stops with a reply and is checkpointed.
"""

from __future__ import annotations


class Retryable(Exception):
    """Try the event again later; ``retry_after`` (seconds) overrides the computed backoff."""

    def __init__(self, message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Fatal(Exception):
    """Do not try again: dead-letter the event with a snapshot."""


class BudgetExceeded(Exception):
    """A token budget would be crossed by the next LLM call, so it was not made.

    Not a failure to retry: the pipeline ends the task with :attr:`reply` (a clear
    message to the user) and checkpoints what the task did so far, its spend included.
    """

    def __init__(self, reply: str, *, budget: str, limit: int, spent: int, needed: int) -> None:
        super().__init__(reply)
        self.reply = reply
        self.budget = budget
        self.limit = limit
        self.spent = spent
        self.needed = needed


class GatewayError(Exception):
    """The gateway cannot start as configured; the message says why, in one line.

    Raised by adapters' ``open`` and by the app's start; the CLI prints it without a
    traceback. It lives here, below both, so adapters need not import the app.
    """
