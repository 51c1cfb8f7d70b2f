"""Who may talk to the bot: allow lists, admins, pairing, and a per-sender flood limit.

``Access`` is a middleware on the root router, so it sees every handled event with the
route it resolved to. Senders matched by ``access.allow`` (or approved by pairing) are
served; an unknown sender in a DM gets a one-time pairing code and nothing else, until
the owner runs ``tether pair approve CODE`` (or an admin sends ``/approve CODE``, which
also tells the person); an unknown sender in a group gets one short hint per chat per
hour, so a newcomer is never met with silence (with ``access.pairing: false`` strangers
are ignored, only logged). The console (the operator at the
terminal) and cron fires (no sender) are always served; on any other platform an event
without a sender is not, whatever the allow list says.

The first run must admit its operator: with no ``access.admins`` and an empty
``access.allow``, the start prints a one-time owner code (stderr and the log), and whoever
sends ``/owner CODE`` first becomes an admin and allowed. Both facts are pairing rows
under reserved platforms (``tether.owner``, ``tether.admin``), so they are durable, need
no schema of their own, and the code survives restarts until it is used.

The per-sender flood limit is not here: it is decided at the inbox, on new events only
(:mod:`tether.gateway.core.throttle`).
"""

from __future__ import annotations

import fnmatch
import re
import secrets
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import structlog

from tether.config.schema import AccessConfig
from tether.events import Conversation, Event, Kind, Sender
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import NextHandler, Route, Router
from tether.keys import TRUSTED_PLATFORMS, is_relay, is_task, sender_name
from tether.memory.operator import PairingStore
from tether.memory.records import Pairing
from tether.messages import say

log = structlog.get_logger("tether.access")

#: Platforms whose events come from the operator or from Tether itself.
#: ``web``: the console's chat page, behind its admin login (adapters/web.py).
_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
#: The pending owner code (one row; ``approved`` once used) and the admins it made.
OWNER = ("tether.owner", "code")
ADMIN = "tether.admin"
#: A person who asked and is still to be told when approved: the DM to tell them in.
DM = "tether.dm"
#: Pairing rows under these platforms are Tether's own bookkeeping, not requests.
RESERVED = "tether."
#: At most one access hint per person per group chat in this many seconds.
HINT_EVERY = 3600.0
HINT = "I only answer people the bot's owner let in. Message me directly to ask for access."
APPROVED_NOTICE = (
    "You're in: the bot's owner approved you. Write to me anytime; /help lists what I can do."
)


class Patterns:
    """``platform:id`` patterns with ``*`` wildcards, compiled once into one regex."""

    def __init__(self, patterns: list[str]) -> None:
        self.everyone = "*" in patterns
        joined = "|".join(fnmatch.translate(p) for p in patterns)
        self._regex = re.compile(joined) if patterns else None

    def match(self, event: Event, *, person: bool = False) -> bool:
        """Does the sender's ``platform:user`` or the chat's ``platform:chat`` match? With
        ``person``, only the sender's: a chat in the list does not make its members match."""
        if self.everyone:
            return True
        if self._regex is None:
            return False
        if not person and self._regex.match(f"{event.platform}:{event.conversation.chat_id}"):
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
        self._hinted: dict[tuple[str, str, str], float] = {}

    async def is_admin(self, event: Event, *, person: bool = False) -> bool:
        """The console and cron; ``access.admins``; whoever claimed the owner code. With
        ``person`` (who may approve a tool call) a chat named in ``access.admins`` does
        not make everyone in it an admin: the sender must be named, or own the bot."""
        if event.platform in TRUSTED_PLATFORMS:
            return True
        if event.sender is None:
            return False
        if self.admins.match(event, person=person):
            return True
        found = await self.store.pairing(ADMIN, sender_name(event))
        return found is not None and found.status == "approved"

    async def announce_owner(self, platforms: Iterable[str]) -> str | None:
        """At start: the owner code to print, while nobody could administer the bot."""
        if self.config.admins or self.config.allow:
            return None
        if all(platform in TRUSTED_PLATFORMS for platform in platforms):
            return None  # the console alone: the operator is already at the terminal
        if any(p.platform == ADMIN for p in await self.store.pairings()):
            return None
        code = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(8))
        found = await self.store.request_pairing(*OWNER, "owner code", code)
        if found.status != "pending":
            return None
        log.warning("access.owner_code", code=found.code)
        print(
            f"tether: nobody is admitted yet; send /owner {found.code} to the bot in a direct"
            " message to become its owner (the code works once)",
            file=sys.stderr,
            flush=True,
        )
        return found.code

    async def claim_owner(self, event: Event, code: str) -> bool:
        """Make the sender of ``/owner CODE`` admin and allowed, if ``code`` is unused.
        The sender's rows are written before the code is spent, so a re-run after a crash
        in between still finds this sender the owner."""
        assert event.sender is not None
        who = sender_name(event)
        admin = await self.store.pairing(ADMIN, who)
        if admin is not None and admin.status == "approved":
            return True
        owner = await self.store.pairing(*OWNER)
        if owner is None or owner.status != "pending" or owner.code != code.strip().upper():
            return False
        for platform, user_id in ((event.platform, event.sender.id), (ADMIN, who)):
            fresh = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(8))
            row = await self.store.request_pairing(platform, user_id, event.sender.name, fresh)
            await self.store.approve_pairing(row.code)
        await self.store.approve_pairing(owner.code)
        await self.store.revoke_pairing(DM, who)  # an owner needs no "you're in" notice
        log.warning("access.owner_claimed", sender=who)
        return True

    async def admitted(self, event: Event) -> bool:
        """Trusted platforms always; a sender the allow list or a pairing approved; never
        an event without a sender elsewhere (a chat pattern in ``allow`` admits the chat's
        people, not whatever arrives there without one). An agent's message relayed in a
        room (``room:`` keys, made by gateway/agent/rooms.py only) is the gateway's own, and
        so is a background task (``task:`` keys): the turn that started it was admitted."""
        if event.platform in TRUSTED_PLATFORMS or is_relay(event.key) or is_task(event.key):
            return True
        if event.sender is None:
            return False
        if self.allow.match(event):
            return True
        pairing = await self.store.pairing(event.platform, event.sender.id)
        return pairing is not None and pairing.status == "approved"

    async def __call__(self, handler: NextHandler, event: Event, data: dict[str, Any]) -> Any:
        ctx: Context = data["ctx"]
        route: Route = data["route"]
        if route.name.startswith("command:owner->"):
            return await handler(event, data)  # how the first person gets in at all
        if route.admin and not await self.is_admin(event):
            ctx.log.warning("access.refused", route=route.name, sender=sender_name(event))
            await ctx.reply(say(event, "admins_only"))
            return None
        if await self.admitted(event):
            return await handler(event, data)
        if not (self.config.pairing and event.conversation.chat_type == "dm" and event.sender):
            ctx.log.info("access.denied", sender=sender_name(event))
            if self.config.pairing and await ctx.step("access.hint", lambda: self._hint_due(event)):
                await ctx.reply(say(event, "access_hint"), quote=False)
            return None
        request = await ctx.step("access.pairing", lambda: self._request(event))
        if request["new"]:
            ctx.log.info(
                "access.pairing_requested", sender=sender_name(event), code=request["code"]
            )
            await ctx.reply(say(event, "pairing_requested", code=request["code"]), quote=False)
        else:
            ctx.log.info("access.pending", sender=sender_name(event))
        return None

    async def _request(self, event: Event) -> dict[str, Any]:
        assert event.sender is not None
        code = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(8))
        found = await self.store.request_pairing(
            event.platform, event.sender.id, event.sender.name, code
        )
        # Where to tell them once approved, and that they are still to be told.
        marker = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(8))
        await self.store.request_pairing(DM, sender_name(event), event.conversation.chat_id, marker)
        return {"code": found.code, "new": found.code == code}

    async def tell_approved(self, accept: Accept, platforms: Iterable[str]) -> None:
        """Queue a notice for each person approved since they asked, however approved
        (``/approve`` in a chat, ``tether pair approve`` in another process): an event
        into the inbox, keyed on the approval, so the notice is durable and sent once even
        when several instances look. Called periodically by the gateway."""
        try:
            pairings = await self.store.pairings()
            waiting = {p.user_id: p.name for p in pairings if p.platform == DM}
            enabled = set(platforms)
            events = [
                _approved_event(p, waiting[f"{p.platform}:{p.user_id}"])
                for p in pairings
                if p.status == "approved"
                and p.platform in enabled
                and f"{p.platform}:{p.user_id}" in waiting
            ]
            if not events:
                return
            await accept(events)
            for event in events:
                await self.store.revoke_pairing(DM, sender_name(event))
        except Exception:
            log.exception("access.tell_approved_failed")

    async def _hint_due(self, event: Event) -> bool:
        """One hint per person per group chat per hour; only for what was said to us."""
        if event.sender is None or event.kind not in (Kind.MESSAGE, Kind.COMMAND):
            return False
        place = (event.platform, event.conversation.chat_id, event.sender.id)
        now = time.monotonic()
        last = self._hinted.get(place)
        if last is not None and now - last < HINT_EVERY:
            return False
        self._hinted = {k: t for k, t in self._hinted.items() if now - t < HINT_EVERY}
        self._hinted[place] = now
        return True


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
            await ctx.reply(say(ctx.event, "pairing_approved", who=found))  # see tell_approved
        else:
            await ctx.reply(say(ctx.event, "pairing_unknown", code=code))

    @router.on(Kind.SYSTEM, when=lambda event: event.meta.get("access") == "approved")
    async def approved(ctx: Context) -> None:
        await ctx.reply(say(ctx.event, "access_approved"), quote=False)

    @router.command("owner")
    async def owner(ctx: Context) -> None:
        event = ctx.event
        code = event.args
        if event.sender is None or not await ctx.step(
            "access.owner", lambda: access.claim_owner(event, code)
        ):
            ctx.log.info("access.owner_refused", sender=sender_name(event))
            await ctx.reply(say(event, "owner_code_invalid"))
            return
        await ctx.reply(say(event, "owner_claimed"))

    return router


async def _approve(store: PairingStore, code: str) -> str | None:
    found = await store.approve_pairing(code) if code else None
    if found is None or found.platform in (ADMIN, DM, OWNER[0]):
        return None
    return f"{found.platform}:{found.user_id} ({found.name})"


def _approved_event(pairing: Pairing, chat_id: str) -> Event:
    """The notice's event: in the person's DM, from them (so it runs in their lane)."""
    return Event(
        key=f"access:approved:{pairing.platform}:{pairing.user_id}:{pairing.updated!r}",
        platform=pairing.platform,
        kind=Kind.SYSTEM,
        conversation=Conversation(platform=pairing.platform, chat_id=chat_id, chat_type="dm"),
        sender=Sender(id=pairing.user_id, name=pairing.name),
        meta={"access": "approved"},
    )


#: ``Inbox.accept``: stores events (a duplicate key is ignored) and dispatches them.
Accept = Callable[[list[Event]], Awaitable[object]]
