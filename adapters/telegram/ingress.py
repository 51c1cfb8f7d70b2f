"""Updates in: Tether's own getUpdates loop, or a webhook route. Acknowledged after commit.

python-telegram-bot is the API client here, not the runtime. Its Updater confirms a batch
as soon as it is in memory, so a crash loses it; here the next getUpdates offset is asked
for only after the batch *and* the offset committed to the inbox in one transaction, and
a webhook post is answered 200 only after its commit. An update that cannot become an
event is still confirmed (logged as ``telegram.skipped`` or ``telegram.ignored``):
delivering it again could never make it one.

The only offset the poller sends is the one that confirms the batch it committed last
(its top update_id + 1), and only while Telegram may still hold that batch. Every other
poll, the first after a start among them, has no offset: it confirms nothing and answers
from the oldest update Telegram holds. A stored offset is never sent, because after a week
without updates Telegram restarts its ids at random, often below it, and "an update is
considered confirmed as soon as getUpdates is called with an offset higher than its
update_id": an offset kept from before would confirm every new update away unseen. A
batch the last run committed but did not confirm comes back and is taken as the
duplicate it is. Keys carry the epoch (:mod:`.epochs`), so a restarted id is not taken
for an old update.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp.web_response import Response  # not aiohttp.web: 2 MB, for a server
from telegram.error import Conflict, TelegramError

from tether.adapters.kit import Dropped, describe
from tether.adapters.telegram.epochs import QUIET, Choice, Epochs, offset_cursor
from tether.adapters.telegram.http import BotClient
from tether.adapters.telegram.normalize import update_id
from tether.adapters.untrusted import Malformed, header, load_json, unstorable
from tether.backoff import equal_jitter
from tether.config.schema import TelegramConfig
from tether.events import Event

if TYPE_CHECKING:
    from aiohttp import web

    from tether.adapters.base import Ingress

log = structlog.get_logger("tether.telegram")

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"

#: An update and the epoch it arrived in → an Event, or why not.
Normalize = Callable[[Any, int], Event | Dropped]
AfterAccept = Callable[[Sequence[Event], Sequence[bool]], None]


@dataclass(frozen=True, slots=True)
class Pace:
    """How long ingress waits: between failed calls, and between tries for the long poll."""

    backoff_base: float = 1.0
    backoff_max: float = 30.0
    standby_interval: float = 2.0

    def delay(self, failures: int) -> float:
        return equal_jitter(failures, self.backoff_base, self.backoff_max)


class UpdateIngress:
    """One bot's updates into the inbox, by ``config.mode``: polling or a webhook.

    ``connected`` is what readiness reports; ``polling`` is True while this instance
    holds the long poll (always, on a store only one process uses). ``clock`` is the
    time epochs are decided by (tests move it a week on).
    """

    def __init__(
        self,
        bot: BotClient,
        config: TelegramConfig,
        *,
        normalize: Normalize,
        after_accept: AfterAccept,
    ) -> None:
        self.bot = bot
        self.config = config
        self.normalize = normalize
        self.after_accept = after_accept
        self.connected = False
        self.polling = False
        self.pace = Pace()
        self.clock: Callable[[], float] = time.time
        self._epochs: Epochs | None = None
        self._inbox: Ingress | None = None
        self._task: asyncio.Task[None] | None = None
        self._secret = (
            config.webhook.secret_token.get_secret_value().encode()
            if config.webhook.secret_token
            else None
        )

    def start(self, inbox: Ingress, bot_id: int, pace: Pace) -> None:
        """Begin polling, or register the webhook (the route already listens)."""
        self._epochs = Epochs(bot_id)
        self._inbox, self.pace = inbox, pace
        if self.config.mode == "webhook":
            self._task = asyncio.create_task(self._register_webhook(), name="telegram-webhook")
        else:
            self._task = asyncio.create_task(self._poll(inbox, bot_id), name="telegram-poll")

    async def stop(self) -> None:
        self._inbox = None
        self.connected = False
        self.polling = False
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # -- polling --------------------------------------------------------------------

    async def _take_poll(self, inbox: Ingress, bot_id: int) -> None:
        """Several instances on one shared store: one long-polls (it holds an advisory
        lock), the others stand by and take over when its process dies and the lock goes
        with its connection. Telegram would answer a second poller with 409 anyway."""
        waiting = False
        while not await inbox.try_lock(f"telegram:{bot_id}:poll"):
            if not waiting:
                log.info("telegram.standby", reason="another instance holds the long poll")
                waiting = True
            self.connected = True  # standing by is healthy: sends still go out from here
            await asyncio.sleep(self.pace.standby_interval)
        if waiting:
            log.info("telegram.takeover")
        self.polling = True

    async def _poll(self, inbox: Ingress, bot_id: int) -> None:
        """fetch → accept the batch and its offset in one transaction → fetch with the
        offset that confirms it; after an empty answer, fetch with no offset."""
        await self._take_poll(inbox, bot_id)
        # A webhook left set (an earlier webhook-mode run) makes getUpdates answer 409.
        # drop_pending_updates=False: the backlog is still ours to answer.
        await self._until_ok(
            "deleteWebhook", lambda: self.bot.delete_webhook(drop_pending_updates=False)
        )
        cursor = offset_cursor(bot_id)
        log.info("telegram.polling", timeout_s=self.config.poll_timeout)
        failures = 0
        # The offset that confirms the batch committed last, and when it was committed.
        confirm: tuple[int, float] | None = None
        while True:
            offset = confirm[0] if confirm and self.clock() - confirm[1] < QUIET else None
            try:
                batch = await self.bot.get_update_dicts(
                    offset, self.config.poll_timeout, self.config.allowed_updates
                )
            except Conflict as exc:
                failures += 1
                self.connected = False
                delay = self.pace.delay(failures)
                if failures == 1 or failures % 10 == 0:
                    log.warning(
                        "telegram.conflict",
                        error=describe(exc),
                        hint="another process polls this bot, or a webhook is set",
                        failures=failures,
                        retry_in_s=delay,
                    )
                await asyncio.sleep(delay)
                continue
            except Exception as exc:  # network, 5xx, bad JSON: the loop must outlive them
                failures += 1
                self.connected = False
                delay = self.pace.delay(failures)
                log.warning(
                    "telegram.poll_failed", error=describe(exc), failures=failures, retry_in_s=delay
                )
                await asyncio.sleep(delay)
                continue
            if failures:
                log.info("telegram.poll_recovered", failures=failures)
                failures = 0
            self.connected = True
            if not batch:
                confirm = None  # that call confirmed the last batch: nothing left to confirm
                continue
            try:
                confirm = (await self._ingest(inbox, cursor, batch), self.clock())
            except Exception as exc:
                # Not stored, so not confirmed: the same batch comes back on the next call.
                failures += 1
                delay = self.pace.delay(failures)
                log.error(
                    "telegram.accept_failed",
                    error=describe(exc),
                    updates=len(batch),
                    retry_in_s=delay,
                )
                await asyncio.sleep(delay)

    async def _ingest(self, inbox: Ingress, cursor: str, batch: list[Any]) -> int:
        """Commit one getUpdates batch, its offset and its epoch together; return the
        offset that confirms the batch."""
        choice = await self._choose(inbox)
        events: list[Event] = []
        top: int | None = None
        for item in batch:
            number = update_id(item)
            if number is not None:
                top = number if top is None else max(top, number)
            outcome = self.normalize(item, choice.epoch.number)
            if isinstance(outcome, Event):
                events.append(outcome)
            else:
                _log_dropped(outcome, number)
        if top is None:
            raise ValueError(f"a batch of {len(batch)} updates without a single update_id")
        accepted = await inbox.accept(events, cursors={cursor: str(top), **choice.cursors})
        self._committed(choice)
        self.after_accept(events, accepted)
        return top + 1

    # -- webhook --------------------------------------------------------------------

    async def _register_webhook(self) -> None:
        """setWebhook once the HTTP server listens (the gateway starts it before ingress)."""
        url = self.config.webhook.url
        assert url is not None and self._secret is not None  # the config validator ensures it
        secret = self._secret.decode()
        await self._until_ok(
            "setWebhook",
            lambda: self.bot.set_webhook(
                url,
                allowed_updates=self.config.allowed_updates,
                secret_token=secret,
                drop_pending_updates=False,
            ),
        )
        self.connected = True
        log.info("telegram.webhook_set", url=url, path=self.config.webhook.path)

    async def webhook(self, request: web.Request) -> Response:
        """Verify, parse, commit, and only then 200 (Telegram retries anything else).

        The secret header is compared as the bytes that arrived, before the body is
        parsed. A body that is not an update at all (not UTF-8 JSON, nested too deep, no
        ``update_id``) is 400: Telegram never sends one. An update that cannot be used
        (normalize skips it, or it holds text no store accepts) is acknowledged with 200
        and logged as skipped: Telegram retries every non-2xx, in order, so refusing it
        would only hold the chat's next updates back. A failed commit is 503: not
        stored, so Telegram must deliver it again.
        """
        given = header(request, SECRET_HEADER) or b""
        if self._secret is None or not hmac.compare_digest(given, self._secret):
            log.warning(
                "telegram.webhook_forbidden",
                reason="wrong secret token" if given else "missing secret token",
                remote=request.remote,
            )
            return Response(status=403, text="forbidden")
        inbox = self._inbox
        if inbox is None:  # not started yet, or stopping: Telegram will deliver it again
            return Response(status=503, text="not ready")
        try:
            data = load_json(await request.read())
        except Malformed as exc:
            log.warning("telegram.webhook_malformed", reason=str(exc))
            return Response(status=400, text="not JSON")
        number = update_id(data)
        if number is None:
            log.warning("telegram.webhook_malformed", reason="not an update (no update_id)")
            return Response(status=400, text="not an update")
        try:
            choice = await self._choose(inbox)
        except Exception as exc:  # the store failed: nothing decided, nothing stored
            log.error("telegram.accept_failed", update_id=number, error=describe(exc))
            return Response(status=503, text="not stored, deliver again")
        outcome = self.normalize(data, choice.epoch.number)
        if isinstance(outcome, Event) and (reason := unstorable(outcome)):
            outcome = Dropped("telegram.skipped", reason)
        events = [outcome] if isinstance(outcome, Event) else []
        if not isinstance(outcome, Event):
            _log_dropped(outcome, number)
        try:  # mostly without a cursor: a shared store then batches concurrent posts
            accepted = await inbox.accept(events, choice.cursors or None)
        except Exception as exc:  # the store failed: not committed, so not acknowledged
            log.error("telegram.accept_failed", update_id=number, error=describe(exc))
            return Response(status=503, text="not stored, deliver again")
        self._committed(choice)
        self.after_accept(events, accepted)
        return Response(text="ok")

    # -- helpers --------------------------------------------------------------------

    async def _choose(self, inbox: Ingress) -> Choice:
        assert self._epochs is not None  # set by start(), before any update is taken
        return await self._epochs.choose(inbox, self.clock())

    def _committed(self, choice: Choice) -> None:
        if self._epochs is not None:
            self._epochs.committed(choice)

    async def _until_ok(self, what: str, call: Callable[[], Awaitable[Any]]) -> None:
        """A setup call (deleteWebhook, setWebhook) retried with backoff until it works."""
        failures = 0
        while True:
            try:
                await call()
                return
            except TelegramError as exc:
                failures += 1
                delay = self.pace.delay(failures)
                log.warning(
                    "telegram.call_failed",
                    call=what,
                    error=describe(exc),
                    failures=failures,
                    retry_in_s=delay,
                )
                await asyncio.sleep(delay)


def _log_dropped(dropped: Dropped, number: int | None) -> None:
    emit = log.info if dropped.log_event == "telegram.ignored" else log.warning
    emit(dropped.log_event, update_id=number, reason=dropped.reason)
