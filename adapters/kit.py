"""What every platform adapter needs and would otherwise write again.

- :class:`Dropped` — why a payload did not become an event (normalizers return it).
- :func:`describe` — one line for an exception, the form every adapter logs.
- :func:`open_with_retries` — the start-up probe (getMe, login, bot info): retried with
  backoff while the platform is unreachable, given up at once when it refuses the
  credentials, and always ended by one :class:`~tether.errors.GatewayError` line that
  names what failed, so ``tether run`` prints one line instead of a traceback. An
  unreachable platform is given up within :data:`OPEN_DEADLINE_S`: the start fails fast
  and a service manager's restart takes over, instead of a start that seems to hang.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple, TypeVar

import structlog

from tether.backoff import equal_jitter
from tether.errors import GatewayError

T = TypeVar("T")

log = structlog.get_logger("tether.adapters")
#: The longest a start-up probe keeps trying a platform it cannot reach (seconds).
OPEN_DEADLINE_S = 5.0


class Dropped(NamedTuple):
    """Why a payload did not become an event. It is still acknowledged (or its offset
    advanced): redelivering it could never make it an event.

    ``log_event`` is ``{platform}.ignored`` (left out by policy: a bot, another bot's
    command) or ``{platform}.skipped`` (cannot be handled: malformed, unsupported).
    """

    log_event: str
    reason: str


def describe(exc: BaseException) -> str:
    """``Type: message`` — enough to tell a timeout from a refusal in one log field."""
    return f"{type(exc).__name__}: {exc}"


async def open_with_retries(
    platform: str,
    attempts: int,
    connect: Callable[[], Awaitable[T]],
    *,
    refused: Callable[[BaseException], str | None],
    unreachable: str,
    give_up: Callable[[], Awaitable[None]] | None = None,
    base: float = 1.0,
    cap: float = 30.0,
    deadline: float = OPEN_DEADLINE_S,
) -> T:
    """Run ``connect`` until it succeeds, at most ``attempts`` times and ``deadline``
    seconds (an attempt is cut off there, and no retry is begun that would end past it).

    ``refused(exc)`` returns the error line when ``exc`` means the credentials were
    rejected (no retry can help), else None. ``unreachable`` names the call that kept
    failing. ``give_up`` releases what ``connect`` left open before the error is raised.
    """
    give_up_at = time.monotonic() + deadline
    for attempt in range(1, attempts + 1):
        try:
            async with asyncio.timeout(max(give_up_at - time.monotonic(), 0.0)):
                return await connect()
        except Exception as exc:
            message = refused(exc)
            delay = equal_jitter(attempt, base, cap)
            if message is None and attempt < attempts and time.monotonic() + delay < give_up_at:
                log.warning(f"{platform}.open_retry", error=describe(exc), retry_in_s=delay)
                await asyncio.sleep(delay)
                continue
            if give_up is not None:
                await give_up()
            why = describe(exc)
            if isinstance(exc, TimeoutError) and time.monotonic() >= give_up_at:
                why = f"no answer within {deadline:g} s"
            raise GatewayError(
                message or f"platforms.{platform}: cannot reach {unreachable}: {why}"
            ) from None
    raise GatewayError(f"{platform}: open was never attempted (attempts={attempts})")
