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

``Throttle`` runs at the inbox, at arrival time, on new events only (a redelivery spends
nothing): a flood from one sender beyond the rate limit is stored but marked, handled as
a no-op, and answered with one notice.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import re
import secrets
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from tether.config.schema import AccessConfig, RateLimitConfig
from tether.events import Conversation, Event, Kind, Sender
from tether.gateway import metrics
from tether.gateway.context import Context
from tether.gateway.ratelimit import TokenBucket
from tether.gateway.routing import NextHandler, Route, Router
from tether.memory.records import InboxRow, Pairing
from tether.memory.roles import PairingStore

log = structlog.get_logger("tether.access")

#: Platforms whose events come from the operator or from Tether itself.
TRUSTED_PLATFORMS = frozenset({"console", "cron"})
_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
THROTTLED = "throttled"
#: The pending owner code (one row; ``approved`` once used) and the admins it made.
OWNER = ("tether.owner", "code")
ADMIN = "tether.admin"
#: A person who asked and is still to be told when approved: the DM to tell them in.
DM = "tether.dm"
#: At most one access hint per person per group chat in this many seconds.
HINT_EVERY = 3600.0
HINT = "I only answer people the bot's owner let in. Message me directly to ask for access."
APPROVED_NOTICE = (
    "You're in: the bot's owner approved you. Write to me anytime; /help lists what I can do."
)
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
        self._hinted: dict[tuple[str, str, str], float] = {}

    async def is_admin(self, event: Event) -> bool:
        """The console and cron; ``access.admins``; whoever claimed the owner code."""
        if event.platform in TRUSTED_PLATFORMS:
            return True
        if event.sender is None:
            return False
        if self.admins.match(event):
            return True
        found = await self.store.pairing(ADMIN, _who(event))
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
        who = _who(event)
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
        people, not whatever arrives there without one)."""
        if event.platform in TRUSTED_PLATFORMS:
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
            ctx.log.warning("access.refused", route=route.name, sender=_who(event))
            await ctx.reply("Only the bot's admins can do that.")
            return None
        if await self.admitted(event):
            return await handler(event, data)
        if not (self.config.pairing and event.conversation.chat_type == "dm" and event.sender):
            ctx.log.info("access.denied", sender=_who(event))
            if self.config.pairing and await ctx.step("access.hint", lambda: self._hint_due(event)):
                await ctx.reply(HINT, quote=False)
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
        # Where to tell them once approved, and that they are still to be told.
        marker = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(8))
        await self.store.request_pairing(DM, _who(event), event.conversation.chat_id, marker)
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
                await self.store.revoke_pairing(DM, _who(event))
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
            await ctx.reply(f"Approved {found}.")  # they are told by tell_approved
        else:
            await ctx.reply(f"No pairing request with code {code!r}.")

    @router.on(Kind.SYSTEM, when=lambda event: event.meta.get("access") == "approved")
    async def approved(ctx: Context) -> None:
        await ctx.reply(APPROVED_NOTICE, quote=False)

    @router.command("owner")
    async def owner(ctx: Context) -> None:
        event = ctx.event
        code = event.args
        if event.sender is None or not await ctx.step(
            "access.owner", lambda: access.claim_owner(event, code)
        ):
            ctx.log.info("access.owner_refused", sender=_who(event))
            await ctx.reply("That is not a valid owner code.")
            return
        await ctx.reply(
            "You are the bot's owner now: allowed, and an admin. /help lists what I can do."
        )

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


def _who(event: Event) -> str:
    return f"{event.platform}:{event.sender.id}" if event.sender else event.platform


#: ``Inbox.accept``: stores events (a duplicate key is ignored) and dispatches them.
Accept = Callable[[list[Event]], Awaitable[object]]
#: Commits events to the inbox (insert-or-ignore): the new row for each, None for a duplicate.
Commit = Callable[[list[Event]], Awaitable[list[InboxRow | None]]]
#: The keys among these that the inbox already holds.
Lookup = Callable[[list[str]], Awaitable[set[str]]]


@dataclass(slots=True, eq=False)
class _Sender:
    """One sender's flood state, and the lock that orders the decisions about them."""

    bucket: TokenBucket
    #: This flood has had its notice; cleared when a message passes again.
    noticed: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Accepts holding or waiting for ``lock``: the state is forgotten only at zero.
    users: int = 0


@dataclass(slots=True)
class _Decision:
    """What marking one event did to its sender, so that a duplicate can take it back."""

    index: int
    sender: _Sender
    took: bool


class Throttle:
    """Per-sender token buckets, decided at arrival, for new events only.

    A platform's redelivery is a duplicate at the inbox and must change nothing: it spends
    none of the sender's budget and never takes the flood notice, or a sender whose
    messages Feishu pushed three times would be throttled for messages they really sent.
    So the decision is made as if the inbox's dedup came first. Decisions about one sender
    are made under their lock (held until the commit returns), and whatever a duplicate
    decided is taken back once the store has said it was one: exact when each sender has
    one event in the batch or the budget covers all of theirs (a webhook, a normal
    poll). A batch that the budget does not cover (a poller re-reading its last batch
    into a flood) asks the store for the known keys first and decides only the others.

    The excess is marked, not dropped: the decision travels with the stored event
    (``meta["throttled"]``), so a re-run after a crash or a redelivery after a restart
    sees the same one; the pipeline handles it as a no-op and answers the flood's first
    throttled message with one notice.
    """

    def __init__(self, config: RateLimitConfig) -> None:
        self.config = config
        self._senders: dict[str, _Sender] = {}
        self._swept = time.monotonic()

    def counts(self, event: Event) -> bool:
        """Does the flood limit apply? Not to the operator, cron, or an unknown sender."""
        return (
            bool(self.config.messages)
            and event.sender is not None
            and event.platform not in TRUSTED_PLATFORMS
        )

    async def admit(
        self, events: Sequence[Event], commit: Commit, known: Lookup
    ) -> list[InboxRow | None]:
        """Commit ``events`` through ``commit``, the new ones marked where over the limit."""
        counted = [event for event in events if self.counts(event)]
        if not counted:
            return await commit(list(events))
        async with self._holding(counted):
            seen = set() if self._covers(counted) else await known([e.key for e in counted])
            senders = {self._senders[_who(event)] for event in counted}
            initial = {sender: sender.noticed for sender in senders}
            marked, decisions = self._mark(events, seen)
            rows: list[InboxRow | None] | None = None
            try:
                rows = await commit(marked)
            finally:
                self._settle(decisions, rows, initial)
        for decision in decisions:
            row = rows[decision.index]
            if row is not None and not decision.took:
                metrics.THROTTLED.labels(row.event.platform).inc()
                notice = row.event.meta.get(THROTTLED) == "notice"
                log.warning("event.throttled", key=row.key, sender=_who(row.event), notice=notice)
        return rows

    @contextlib.asynccontextmanager
    async def _holding(self, events: list[Event]) -> AsyncIterator[None]:
        """Hold the locks of every sender in ``events``, taken in name order (no deadlock)."""
        senders = []
        for who in sorted({_who(event) for event in events}):
            sender = self._sender(who)
            sender.users += 1  # before the next lookup may sweep
            senders.append(sender)
        try:
            async with contextlib.AsyncExitStack() as stack:
                for sender in senders:
                    await stack.enter_async_context(sender.lock)
                yield
        finally:
            for sender in senders:
                sender.users -= 1

    def _covers(self, events: list[Event]) -> bool:
        """Is every decision here the same whichever of them turn out to be duplicates?"""
        per_sender = Counter(_who(event) for event in events)
        for who, count in per_sender.items():
            bucket = self._senders[who].bucket
            if count > 1 and (bucket.delay() > 0 or bucket.tokens < count):
                return False
        return True

    def _mark(self, events: Sequence[Event], seen: set[str]) -> tuple[list[Event], list[_Decision]]:
        """Decide every counted event not ``seen`` (and each key once)."""
        seen = set(seen)
        marked: list[Event] = []
        decisions: list[_Decision] = []
        for index, event in enumerate(events):
            if not self.counts(event) or event.key in seen:
                marked.append(event)
                continue
            seen.add(event.key)
            sender = self._senders[_who(event)]
            took = sender.bucket.delay() <= 0
            decisions.append(_Decision(index, sender, took))
            if took:
                sender.bucket.take()
                sender.noticed = False
                marked.append(event)
                continue
            verdict = "drop" if sender.noticed else "notice"
            sender.noticed = True
            marked.append(event.model_copy(update={"meta": {**event.meta, THROTTLED: verdict}}))
        return marked, decisions

    def _settle(
        self,
        decisions: list[_Decision],
        rows: list[InboxRow | None] | None,
        initial: dict[_Sender, bool],
    ) -> None:
        """Take back what the events that were not stored (duplicates; all, if the commit
        failed) decided: their tokens, and the notice state they left behind."""
        noticed = dict(initial)
        for decision in decisions:
            bucket = decision.sender.bucket
            if rows is None or rows[decision.index] is None:
                if decision.took:
                    bucket.tokens = min(bucket.burst, bucket.tokens + 1)
            else:
                noticed[decision.sender] = not decision.took
        for sender, value in noticed.items():
            sender.noticed = value

    def _sender(self, who: str) -> _Sender:
        sender = self._senders.get(who)
        if sender is None:
            self._forget_idle()
            rate = self.config.messages / self.config.per_seconds
            sender = self._senders[who] = _Sender(TokenBucket(rate, self.config.messages))
        return sender

    def _forget_idle(self) -> None:
        """Drop full buckets now and then, so one-off senders do not accumulate."""
        now = time.monotonic()
        if now - self._swept < self.config.per_seconds:
            return
        self._swept = now
        for who, sender in list(self._senders.items()):
            bucket = sender.bucket
            idle = sender.users == 0 and bucket.delay() <= 0
            if idle and bucket.tokens >= bucket.burst - 1e-9:
                del self._senders[who]
