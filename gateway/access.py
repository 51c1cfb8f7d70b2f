"""Who may talk to the bot: allow lists, admins, pairing, and a per-sender flood limit.

``Access`` is a middleware on the root router, so it sees every handled event with the
route it resolved to. Senders matched by ``access.allow`` (or approved by pairing) are
served; an unknown sender in a DM gets a one-time pairing code and nothing else, until
the owner runs ``tether pair approve CODE``; everyone else is ignored with a log line.
The console (the operator at the terminal) and cron fires (no sender) are always served.

``Throttle`` runs at the inbox, at arrival time: a flood from one sender beyond the rate
limit is stored but marked, handled as a no-op, and answered with one notice.
"""

from __future__ import annotations

import fnmatch
import re
import secrets
import time
from typing import Any

import structlog

from tether.config.schema import AccessConfig, RateLimitConfig
from tether.events import Event
from tether.gateway import metrics
from tether.gateway.context import Context
from tether.gateway.ratelimit import TokenBucket
from tether.gateway.routing import NextHandler, Route, Router
from tether.memory.roles import PairingStore

log = structlog.get_logger("tether.access")

#: Platforms whose events come from the operator or from Tether itself.
TRUSTED_PLATFORMS = frozenset({"console", "cron"})
_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
THROTTLED = "throttled"
THROTTLE_NOTICE = "You are sending messages faster than I can take them; I skipped some."


class Patterns:
    """``platform:id`` patterns with ``*`` wildcards, compiled once into one regex."""

    def __init__(self, patterns: list[str]) -> None:
        self.everyone = "*" in patterns
        joined = "|".join(fnmatch.translate(p) for p in patterns)
        self._regex = re.compile(joined) if patterns else None

    def match(self, event: Event) -> bool:
        """Does the sender's ``platform:user`` or the chat's ``platform:chat`` match?"""
        if self.everyone:
            return True
        if self._regex is None:
            return False
        if self._regex.match(f"{event.platform}:{event.conversation.chat_id}"):
            return True
        return event.sender is not None and bool(
            self._regex.match(f"{event.platform}:{event.sender.id}")
        )


class Access:
    def __init__(self, config: AccessConfig, store: PairingStore) -> None:
        self.config = config
        self.store = store
        self.allow = Patterns([*config.allow, *config.admins])
        self.admins = Patterns(config.admins)

    def is_admin(self, event: Event) -> bool:
        return event.platform in TRUSTED_PLATFORMS or (
            event.sender is not None and self.admins.match(event)
        )

    async def admitted(self, event: Event) -> bool:
        if event.platform in TRUSTED_PLATFORMS or event.sender is None:
            return True
        if self.allow.match(event):
            return True
        pairing = await self.store.pairing(event.platform, event.sender.id)
        return pairing is not None and pairing.status == "approved"

    async def __call__(self, handler: NextHandler, event: Event, data: dict[str, Any]) -> Any:
        ctx: Context = data["ctx"]
        route: Route = data["route"]
        if route.admin and not self.is_admin(event):
            ctx.log.warning("access.refused", route=route.name, sender=_who(event))
            await ctx.reply("Only the bot's admins can do that.")
            return None
        if await self.admitted(event):
            return await handler(event, data)
        if not (self.config.pairing and event.conversation.chat_type == "dm"):
            ctx.log.info("access.denied", sender=_who(event))
            return None
        request = await ctx.step("access.pairing", lambda: self._request(event))
        if request["new"]:
            ctx.log.info("access.pairing_requested", sender=_who(event), code=request["code"])
            await ctx.reply(
                "I don't know you yet. Ask the owner of this bot to run:\n"
                f"tether pair approve {request['code']}",
                quote=False,
            )
        else:
            ctx.log.info("access.pending", sender=_who(event))
        return None

    async def _request(self, event: Event) -> dict[str, Any]:
        assert event.sender is not None
        code = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(8))
        found = await self.store.request_pairing(
            event.platform, event.sender.id, event.sender.name, code
        )
        return {"code": found.code, "new": found.code == code}


def access_router(access: Access) -> Router:
    """Built-in commands for access: ``/whoami`` for everyone, ``/approve CODE`` for admins."""
    router = Router("access")

    @router.command("whoami")
    async def whoami(ctx: Context) -> None:
        event = ctx.event
        sender = event.sender.id if event.sender else "-"
        await ctx.reply(
            f"user {event.platform}:{sender}, chat {event.platform}:{event.conversation.chat_id}"
        )

    @router.command("approve", admin=True)
    async def approve(ctx: Context) -> None:
        code = ctx.event.args.strip()
        found = await ctx.step("approve", lambda: _approve(access.store, code))
        if found:
            await ctx.reply(f"Approved {found}.")
        else:
            await ctx.reply(f"No pairing request with code {code!r}.")

    return router


async def _approve(store: PairingStore, code: str) -> str | None:
    found = await store.approve_pairing(code) if code else None
    return f"{found.platform}:{found.user_id} ({found.name})" if found else None


def _who(event: Event) -> str:
    return f"{event.platform}:{event.sender.id}" if event.sender else event.platform


class Throttle:
    """Per-sender token buckets, decided at arrival; marks the excess instead of dropping.

    The decision travels with the event (``meta["throttled"]``), so a re-run after a
    crash repeats it instead of deciding again.
    """

    def __init__(self, config: RateLimitConfig) -> None:
        self.config = config
        self._buckets: dict[str, TokenBucket] = {}
        self._noticed: set[str] = set()
        self._swept = time.monotonic()

    def mark(self, events: list[Event]) -> list[Event]:
        if not self.config.messages:
            return events
        return [self._mark(event) for event in events]

    def _mark(self, event: Event) -> Event:
        if event.sender is None or event.platform in TRUSTED_PLATFORMS:
            return event
        who = _who(event)
        bucket = self._buckets.get(who)
        if bucket is None:
            rate = self.config.messages / self.config.per_seconds
            bucket = self._buckets[who] = TokenBucket(rate, self.config.messages)
            self._forget_idle()
        if bucket.delay() <= 0:
            bucket.take()
            self._noticed.discard(who)
            return event
        notice = who not in self._noticed
        self._noticed.add(who)
        metrics.THROTTLED.labels(event.platform).inc()
        log.warning("event.throttled", key=event.key, sender=who, notice=notice)
        return event.model_copy(
            update={"meta": {**event.meta, THROTTLED: "notice" if notice else "drop"}}
        )

    def _forget_idle(self) -> None:
        """Drop full buckets now and then, so one-off senders do not accumulate."""
        now = time.monotonic()
        if now - self._swept < self.config.per_seconds:
            return
        self._swept = now
        for who, bucket in list(self._buckets.items()):
            if bucket.delay() <= 0 and bucket.tokens >= bucket.burst - 1e-9:
                del self._buckets[who]
