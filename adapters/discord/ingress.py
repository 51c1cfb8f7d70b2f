"""The gateway connection: discord.py's websocket, and the messages it delivers.

discord.py runs the connection (heartbeats, RESUME, reconnects); this module adds what
Tether needs around it:

- MESSAGE_CREATE and MESSAGE_UPDATE are read as the dicts the gateway sent. discord.py's
  parser for each is wrapped so that :mod:`.normalize` sees the payload before discord.py
  builds its ``Message`` from it (building one consumes parts of the dict and adds to
  others; the event's ``raw`` is normalize's own copy). Normalizing happens there, in the
  read loop; committing is a task, as discord.py's own events are.
- Every parser is wrapped so that one dispatch discord.py cannot parse (a partial
  MESSAGE_UPDATE Discord really sends, a field it does not expect) is skipped with a
  ``discord.dispatch_skipped`` line. Unwrapped, the exception leaves ``Client.connect``
  and the whole gateway session would be dropped and identified anew for one payload.
- Every message seen commits its channel's cursor together with its event (or with
  nothing, when it was dropped) in one inbox transaction. Discord has no acknowledgement:
  the committed cursor is what the next :mod:`.backfill` starts from.
- READY (a new session) starts a backfill; RESUMED needs none, Discord replays the gap.
- ``/ask`` (:mod:`.ask`) is deferred first, then normalized and committed — from the
  payload as the gateway sent it, kept until then. A button press (:mod:`.buttons`) is
  committed first, then acknowledged.
- A refused privileged intent or a fatal close code ends the loop with a problem that
  readiness reports; anything else restarts it with backoff, counted from the last
  healthy session (READY or RESUMED), so an outage a week ago does not slow today's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import discord
import structlog

from tether.adapters.discord import ask, buttons
from tether.adapters.discord.backfill import backfill, cursor_name
from tether.adapters.discord.cache import CachedServers
from tether.adapters.discord.normalize import (
    IGNORED,
    NO_SERVERS,
    Bot,
    Channel,
    Servers,
    interaction,
    location,
    message,
)
from tether.adapters.kit import Dropped, describe
from tether.config.schema import DiscordConfig
from tether.events import Event

if TYPE_CHECKING:
    from tether.adapters.base import Ingress

log = structlog.get_logger("tether.discord")

#: Intents Discord must have switched on for the bot in the developer portal.
PRIVILEGED_INTENTS = ("message_content", "members", "presences")
#: Gateway close codes after which reconnecting cannot help (discord.py gives up too).
_FATAL_CLOSE = {
    4004: "the token was rejected (authentication failed)",
    4010: "invalid shard",
    4011: "sharding required",
    4012: "invalid API version",
    4013: "invalid intents",
}


class GatewayIngress:
    """Everything that flows in over one logged-in client, from :meth:`attach` on."""

    def __init__(self, config: DiscordConfig, delay: Callable[[int], float]) -> None:
        self.config = config
        #: Seconds to wait after the n-th consecutive connection failure.
        self._delay = delay
        self._client: discord.Client | None = None
        self._bot = Bot(require_mention=config.require_mention, ignore_bots=config.ignore_bots)
        self._servers: Servers = NO_SERVERS
        self._tree: ask.Tree | None = None
        self._inbox: Ingress | None = None
        self._asked = ask.RawInteractions()
        self._presses = buttons.Presses(lambda: self._inbox, lambda: self._client, self._spawn)
        #: Connection failures since the last session that reached READY or RESUMED.
        self._failures = 0
        self._backfill_task: asyncio.Task[None] | None = None
        self._commits: set[asyncio.Task[None]] = set()
        self.connected = False
        self.problem: str | None = None

    @property
    def client(self) -> discord.Client:
        if self._client is None:
            raise RuntimeError("the discord adapter is not open")
        return self._client

    def attach(self, client: discord.Client, bot: Bot) -> None:
        """Listen on a logged-in ``client``: connection events, raw messages, ``/ask``."""
        self._client, self._bot, self._servers = client, bot, CachedServers(client)
        # discord.py calls the client's on_<event> attributes (what @client.event sets).
        for name, handler in (
            ("on_connect", self._on_connect),
            ("on_resumed", self._on_resumed),
            ("on_disconnect", self._on_disconnect),
        ):
            setattr(client, name, handler)
        takers: dict[str, Callable[[Any], None]] = {
            "MESSAGE_CREATE": self._created,
            "MESSAGE_UPDATE": self._edited,
        }
        takers["INTERACTION_CREATE"] = self._interaction
        parsers = client._connection.parsers  # the read loop looks events up here
        for event, parse in list(parsers.items()):
            parsers[event] = functools.partial(_dispatch, event, takers.get(event), parse)
        if self.config.ask_command:
            self._tree = ask.command_tree(client, self._on_ask)

    async def run(self, inbox: Ingress) -> None:
        """discord.py's connect loop (it reconnects and resumes by itself), restarted after
        anything it does not handle (an event it cannot parse ends it), but given up for
        good after what reconnecting cannot fix: a refused intent, a rejected token."""
        self._inbox = inbox
        self.problem = None
        self._failures = 0
        while True:
            try:
                await self.client.connect(reconnect=True)
                return  # the client was closed
            except discord.PrivilegedIntentsRequired:
                wanted = [name for name in self.config.intents if name in PRIVILEGED_INTENTS]
                self.problem = (
                    f"Discord refused the privileged intent(s) {', '.join(wanted) or '?'}"
                    " (close code 4014): switch them on under Bot → Privileged Gateway"
                    " Intents in the developer portal, or remove them from"
                    " platforms.discord.intents"
                )
                log.error("discord.intents_refused", intents=wanted, reason=self.problem)
                return
            except discord.ConnectionClosed as exc:
                why = _FATAL_CLOSE.get(exc.code, exc.reason or "closed")
                self.problem = f"the gateway closed the connection with code {exc.code}: {why}"
                log.error("discord.gateway_closed", code=exc.code, reason=self.problem)
                return
            except Exception as exc:
                self._failures += 1
                delay = self._delay(self._failures)
                self.problem = f"the gateway connection failed: {describe(exc)}"
                log.warning(
                    "discord.gateway_failed",
                    error=describe(exc),
                    failures=self._failures,
                    retry_in_s=delay,
                )
                ws = self.client.ws
                if ws is not None:
                    with contextlib.suppress(Exception):
                        await ws.close(code=4000)
                await asyncio.sleep(delay)
            finally:
                self.connected = False

    async def stop(self) -> None:
        """Take no more events; a backfill in progress ends (the next start redoes it)."""
        self._inbox = None
        self.connected = False
        task, self._backfill_task = self._backfill_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- connection events ----------------------------------------------------------

    async def _on_connect(self) -> None:
        """READY: a new session, so whatever came since the last one may be missing."""
        self.connected = True
        self.problem = None
        self._failures = 0
        log.info("discord.connected", session="new")
        inbox = self._inbox
        if inbox is None or self.config.backfill_hours <= 0:
            return
        previous = self._backfill_task
        if previous is not None and not previous.done():
            previous.cancel()
        commit = functools.partial(self._commit, inbox)
        self._backfill_task = asyncio.create_task(
            backfill(self.client, inbox, self.config, commit), name="discord-backfill"
        )

    async def _on_resumed(self) -> None:
        self.connected = True
        self.problem = None  # Discord replays what was missed: no backfill needed
        self._failures = 0
        log.info("discord.connected", session="resumed")

    async def _on_disconnect(self) -> None:
        if self.connected:
            log.warning("discord.disconnected")
        self.connected = False

    # -- messages -------------------------------------------------------------------

    def _created(self, data: Any) -> None:
        inbox = self._inbox
        where = location(data)
        if inbox is None or where is None:  # stopping: backfill finds it after the restart
            return
        channel_id, message_id = where
        events, last = self._sort([data])
        cursors = {cursor_name(channel_id): str(last)}
        self._spawn(self._accept(inbox, events, cursors, message_id))

    def _edited(self, data: Any) -> None:
        inbox = self._inbox
        edited = data.get("edited_timestamp") if isinstance(data, Mapping) else None
        if inbox is None or not edited:  # an embed unfurl or a flag change, not an edit
            return
        where = location(data)
        message_id = where[1] if where else None
        outcome = message(data, self._bot, self._servers, edited=str(edited))
        if isinstance(outcome, Dropped):
            _log_dropped(outcome, message_id=message_id)
            return
        self._spawn(self._accept(inbox, [outcome], None, message_id))

    async def _commit(
        self,
        inbox: Ingress,
        channel_id: int,
        payloads: Sequence[Mapping[str, Any]],
        channel: Channel | None = None,
        guild_id: str | None = None,
    ) -> None:
        """Commit the messages' events and the channel's last seen id in one transaction."""
        events, last = self._sort(payloads, channel, guild_id)
        if last:
            await inbox.accept(events, cursors={cursor_name(channel_id): str(last)})

    def _sort(
        self,
        payloads: Sequence[Mapping[str, Any]],
        channel: Channel | None = None,
        guild_id: str | None = None,
    ) -> tuple[list[Event], int]:
        """The events among ``payloads`` (the rest is logged) and the newest id seen."""
        events: list[Event] = []
        last = 0
        for data in payloads:
            where = location(data)
            if where is not None:
                last = max(last, where[1])
            outcome = message(data, self._bot, self._servers, channel=channel, guild_id=guild_id)
            if isinstance(outcome, Event):
                events.append(outcome)
            else:
                _log_dropped(outcome, message_id=where[1] if where else None)
        return events, last

    async def _accept(
        self,
        inbox: Ingress,
        events: list[Event],
        cursors: dict[str, str] | None,
        message_id: int | None,
    ) -> None:
        try:
            await inbox.accept(events, cursors=cursors)
        except Exception as exc:
            log.error("discord.accept_failed", message_id=message_id, error=describe(exc))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as a task, kept referenced until it ends."""
        task = asyncio.get_running_loop().create_task(work)
        self._commits.add(task)
        task.add_done_callback(self._commits.discard)

    # -- /ask and button presses ----------------------------------------------------

    def _interaction(self, data: Any) -> None:
        """A button press is committed and acknowledged (:mod:`.buttons`); ``/ask`` is
        kept for discord.py's command tree to hand over."""
        if buttons.is_press(data):
            self._presses.take(data)
        elif _is_menu_command(data, asked=self._tree is not None):
            self._spawn(self._on_command(data))
        elif self.config.ask_command:
            self._asked.keep(data)

    async def _on_command(self, data: Any) -> None:
        """A menu command (:mod:`.commands`): deferred, then committed like ``/ask``."""
        try:
            used = discord.Interaction(data=data, state=self.client._connection)
        except Exception as exc:  # a payload discord.py cannot read: nothing to answer
            log.warning("discord.interaction_dropped", reason=f"malformed: {describe(exc)}")
            return
        await self._commit_interaction(data, used.id, await ask.defer(used))

    async def _on_ask(self, asked: discord.Interaction) -> None:
        deferred = await ask.defer(asked)
        await self._commit_interaction(self._asked.take(asked), asked.id, deferred)

    async def _commit_interaction(self, data: Any, interaction_id: int, deferred: bool) -> None:
        inbox = self._inbox
        if inbox is None:
            log.warning("discord.interaction_dropped", reason="stopping")
            return
        outcome = interaction(data, self._bot, deferred=deferred)
        if isinstance(outcome, Dropped):
            _log_dropped(outcome, interaction_id=interaction_id)
            return
        try:
            await inbox.accept([outcome])
        except Exception as exc:
            log.error("discord.accept_failed", interaction_id=interaction_id, error=describe(exc))


def _is_menu_command(data: Any, *, asked: bool) -> bool:
    """A slash command the tree does not take: every one but ``/ask`` while it is on."""
    if not isinstance(data, Mapping) or data.get("type") != 2:
        return False
    return not (asked and ask.is_ask(data.get("data")))


def _dispatch(
    event: str, take: Callable[[Any], None] | None, parse: Callable[[Any], None], data: Any
) -> None:
    """A wrapped discord.py parser: Tether takes the payload (if it reads this event),
    then discord.py parses it. Neither may end discord.py's read loop: an exception there
    would leave ``Client.connect`` and cost the gateway session."""
    if take is not None:
        try:
            take(data)
        except Exception as exc:
            log.error("discord.accept_failed", error=describe(exc))
    try:
        parse(data)
    except Exception as exc:  # a payload discord.py cannot parse: this dispatch only
        log.warning("discord.dispatch_skipped", dispatch=event, error=describe(exc))


def _log_dropped(dropped: Dropped, **ids: int | None) -> None:
    emit = log.info if dropped.log_event == IGNORED else log.warning
    emit(dropped.log_event, reason=dropped.reason, **ids)
