"""The gateway's side of turns that wait: which events answer a wait, ending waits, and
expiring them.

A suspended turn (``ctx.ask``, an approval: ``gateway/handler/asking.py``) is a
``waiting`` inbox row with an open wait (``memory/waits.py``). Three things end a wait,
each through the store's one conditional update, so each wait ends once:

- **an answer**: the next message in the waiting conversation from whoever may answer
  (the asker by default), or a press on the question's buttons (``tw:{token}:{n}``,
  from any chat: an approval card may sit in an ops chat). The answering event is not a
  new turn: it ends the wait and is done; the waiting turn runs next in its lane, ahead
  of what came after the answer. Commands are never answers (``/help``, ``/stop`` run as
  ever), and ``/cancel`` ends the conversation's wait.
- **the deadline**: :meth:`Waits.expire` reads the open waits whose deadline passed —
  at start, so a deadline that passed while the gateway was down is seen once, and then
  every ``_POLL`` seconds — and ends each as ``expired``.
- a press on a wait that ended already changes nothing: the presser is told what
  became of it.

Which conversations have an open wait is kept in memory (:class:`Board`) where this
process owns the store, so an event that answers nothing costs a dict lookup; a shared
store (PostgreSQL) is asked per message, since another instance may have opened it.
Every transition is a log line (``wait.opened/resolved/expired/cancelled``) and a count
in ``tether_waits_total{kind,transition}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from tether import metrics
from tether.events import Event, Kind
from tether.gateway.handler.asking import Answer, parse_press
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Route
from tether.memory.records import InboxRow
from tether.memory.waits import EXPIRY, Board, Wait, WaitStatus, WaitStore
from tether.messages import say

log = structlog.get_logger("tether.waits")

#: How often open waits are checked for a passed deadline (and at start).
_POLL = 1.0
CANCEL = "cancel"

#: May this press's sender decide this approval? (``gateway/tools/approvals.py``)
Decider = Callable[[Wait, Event], Awaitable[bool]]
#: What an approval press records: ``(answer, notice)`` — the decision, and what the card's
#: chat is told (``Approved by NAME``).
Decision = Callable[[Wait, Event, str], tuple[dict[str, Any], str] | None]


class Waits:
    """Open waits, the events that answer them, and their expiry."""

    def __init__(
        self, store: WaitStore, *, shared: bool = False, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.shared = shared
        #: What deadlines are reckoned by (epoch seconds): the gateway's clock, which a
        #: test moves (``tether.testing.Bot.advance`` expires what passed its deadline).
        self.clock = clock
        self.board = Board()
        #: Runs a suspended turn whose wait ended (the dispatcher's ``resume``).
        self.resume: Callable[[InboxRow], None] = lambda _row: None
        #: Approvals (gateway/tools/approvals.py): who may decide, and what a press says.
        self.may_decide: Decider | None = None
        self.decision: Decision | None = None
        self._keeper: asyncio.Task[None] | None = None

    # -- which events answer ------------------------------------------------------------

    def route(self, found: Route | None) -> Route:
        """The route of an event :meth:`look` took: it answers its wait, or — a written
        answer whose wait another answer ended first — it is an ordinary message after
        all, and ``found`` (what the router resolved) handles it."""

        async def answer(ctx: Context) -> None:
            if not await self.answer(ctx) and found is not None:
                await found.handler(ctx)

        return Route(answer, lambda _event: True, "wait:answer")

    def may_answer(self, row: InboxRow, again: bool) -> bool:
        """Could ``row``'s event answer a wait? False, without a coroutine or a read, for
        the plain message in a conversation that waits for nothing — every event asks, so
        this is on the pipeline's hot path. A shared store's lane read says whether the
        conversation had an open wait (``row.waits_open``): only the instance holding the
        lane opens one there, and its own are on its board."""
        event = row.event
        kind = event.kind
        if kind is Kind.MESSAGE:
            return again or row.waits_open or row.conversation in self.board
        return kind is Kind.CALLBACK or (kind is Kind.COMMAND and event.command == CANCEL)

    async def look(
        self, event: Event, conversation: str, route: Route | None, *, again: bool = False
    ) -> bool:
        """Does ``event`` answer (or ``/cancel``) a wait? A dict lookup unless the store
        is shared, where the conversation's open waits are read first. ``/cancel`` with
        nothing to cancel is answered here too unless a plugin's command takes it
        (``route``, what the router resolved: a fallback would only echo it). An event
        run ``again`` (its earlier run died) that already ended a wait is still the
        answer it was: not a new turn, nor the answer to the question asked since."""
        if event.kind is Kind.CALLBACK:
            return parse_press(event.text) is not None
        if event.kind is Kind.COMMAND:
            if event.command != CANCEL or event.args.strip():  # /cancel ID: a task's
                return False
        elif event.kind is not Kind.MESSAGE:
            return False
        if again and await self.store.waits_ended_by(event.key):
            return True
        if self.shared:
            self.board.replace(conversation, await self.store.open_waits(conversation))
        waits = self.board.of(conversation)
        if event.kind is Kind.COMMAND:
            unclaimed = route is None or route.name.startswith("fallback")
            return unclaimed or bool(waits)
        return _written_answer(waits, event) is not None

    # -- ending waits -------------------------------------------------------------------

    async def answer(self, ctx: Context) -> bool:
        """End the wait an event :meth:`look` took, or say why not; False for a written
        answer whose wait had ended meanwhile (it is not an answer)."""
        event = ctx.event
        ended = await self.store.waits_ended_by(event.key) if ctx.attempt > 1 else []
        if ended and event.kind is not Kind.CALLBACK:
            # It ended a wait in a run that died before its checkpoint: the wait stays
            # as it ended and its turn runs from the store; only a /cancel's notice,
            # never committed, is said again.
            if event.kind is Kind.COMMAND:
                question = _short(ended[-1].question)
                await ctx.reply(say(event, "question_cancelled", question=question), quote=False)
        elif event.kind is Kind.CALLBACK:
            await self._pressed(ctx)
        elif event.kind is Kind.COMMAND:
            await self._cancel(ctx)
        else:
            wait = _written_answer(self.board.of(ctx.conversation), event)
            if wait is None:  # ended meanwhile (a shared store's other instance)
                return False
            sender = event.sender
            answer = Answer(
                text=event.text,
                sender=_who(event),
                name=sender.name if sender else "",
                key=event.key,
                attachments=tuple(event.attachments),
            )
            return await self.end(wait, "answered", answer.to_json(), event.key)
        return True

    async def end(
        self, wait: Wait, status: WaitStatus, answer: dict[str, Any] | None, by: str
    ) -> bool:
        """End ``wait`` (if still open) and run its turn again; True if ``by`` ended it."""
        found = await self.store.resolve_wait(wait.id, status, answer, by)
        if found.wait is not None:
            self.board.closed(found.wait)
        if not found.won:
            return False
        transition = {"answered": "resolved"}.get(status, status)
        metrics.WAITS.labels(wait.kind, transition).inc()
        log.info(
            f"wait.{transition}",
            wait=wait.id,
            key=wait.event_key,
            conversation=wait.conversation,
            kind=wait.kind,
            by=by,
            waited_s=round(time.time() - wait.created, 3) if wait.created else None,
        )
        if found.turn is not None:
            self.resume(found.turn)
        return True

    async def _pressed(self, ctx: Context) -> None:
        event = ctx.event
        parsed = parse_press(event.text)
        assert parsed is not None
        token, choice = parsed
        wait = await self.store.wait_by_token(token)
        if wait is None:
            await ctx.reply(say(ctx.event, "question_gone"), quote=False)
            return
        if wait.status != "open":
            if wait.answered_by == event.key:  # this very press, run again after a crash
                decide = self.decision if wait.kind == "approval" else None
                again = decide(wait, event, choice) if decide is not None else None
                if again is not None:  # its notice was never committed: said now
                    await ctx.reply(again[1], quote=False)
                return
            await ctx.reply(_ended(ctx.event, wait), quote=False)
            return
        if wait.kind == "approval":
            await self._decided(ctx, wait, choice)
            return
        if wait.sender is not None and _who(event) != wait.sender:
            await ctx.reply(say(ctx.event, "question_not_yours"), quote=False)
            return
        choices = wait.detail.get("choices") or []
        index = int(choice) if choice.isdigit() else -1
        if not 0 <= index < len(choices):
            await ctx.reply(say(ctx.event, "question_gone"), quote=False)
            return
        text, data = choices[index]
        sender = event.sender
        answer = Answer(
            text=str(text),
            data=str(data),
            sender=_who(event),
            name=sender.name if sender else "",
            key=event.key,
        )
        if not await self.end(wait, "answered", answer.to_json(), event.key):
            found = await self.store.wait(wait.id)
            if found is not None and found.answered_by != event.key:
                await ctx.reply(_ended(ctx.event, found), quote=False)

    async def _decided(self, ctx: Context, wait: Wait, choice: str) -> None:
        event = ctx.event
        if self.may_decide is None or self.decision is None:
            await ctx.reply(say(ctx.event, "question_gone"), quote=False)
            return
        outcome = self.decision(wait, event, choice)
        if outcome is None:
            await ctx.reply(say(ctx.event, "question_gone"), quote=False)
            return
        answer, notice = outcome
        if not await self.may_decide(wait, event):
            tool = str(wait.detail.get("tool", ""))
            metrics.APPROVALS.labels(tool, "refused").inc()
            ctx.log.warning("approval.refused", wait=wait.id, tool=tool, sender=_who(event))
            await ctx.reply(
                f"{_name(event)}, you may not decide this: it waits for an approver"
                f" ({_approvers(wait)}).",
                quote=False,
            )
            return
        if await self.end(wait, "answered", answer, event.key):
            tool = str(wait.detail.get("tool", ""))
            metrics.APPROVALS.labels(tool, str(answer.get("decision"))).inc()
            ctx.log.info(
                f"approval.{answer.get('decision')}",
                wait=wait.id,
                tool=tool,
                hash=wait.detail.get("hash"),
                by=_who(event),
            )
            await ctx.reply(notice, quote=False)
            return
        found = await self.store.wait(wait.id)
        if found is not None and found.answered_by == event.key:
            await ctx.reply(notice, quote=False)  # this very press, run again
        elif found is not None:
            await ctx.reply(_ended(ctx.event, found), quote=False)

    async def _cancel(self, ctx: Context) -> None:
        waits = self.board.of(ctx.conversation)  # a question, or a tool call's approval
        if not waits:
            await ctx.reply(say(ctx.event, "no_question"), quote=False)
            return
        wait = waits[-1]
        await self.end(wait, "cancelled", None, ctx.event.key)
        question = _short(wait.question)
        await ctx.reply(say(ctx.event, "question_cancelled", question=question), quote=False)

    # -- the deadline -------------------------------------------------------------------

    async def start(self) -> None:
        """Load the open waits (a store this process owns) and start the expiry keeper,
        whose first look ends every wait whose deadline passed while the gateway was down."""
        if not self.shared:
            for wait in await self.store.open_waits():
                self.board.opened(wait)
        await self.expire()
        self._keeper = asyncio.create_task(self._keep(), name="waits:expiry")

    async def stop(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
            self._keeper = None

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(_POLL)
            try:
                await self.expire()
            except Exception:
                log.exception("wait.expiry_failed")

    async def expire(self, now: float | None = None) -> int:
        """End every open wait whose deadline passed; how many this call ended."""
        ended = 0
        while due := await self.store.due_waits(self.clock() if now is None else now):
            mine = [wait for wait in due if await self.end(wait, "expired", None, EXPIRY)]
            ended += len(mine)
            if len(due) < 100:
                break
        return ended

    def opened(self, wait: Wait) -> None:
        """A run suspended on ``wait`` (its transaction committed)."""
        self.board.opened(wait)
        metrics.WAITS.labels(wait.kind, "opened").inc()
        if wait.kind == "approval":
            tool = str(wait.detail.get("tool", ""))
            metrics.APPROVALS.labels(tool, "requested").inc()
            log.info("approval.requested", wait=wait.id, tool=tool, hash=wait.detail.get("hash"))
        log.info(
            "wait.opened",
            wait=wait.id,
            key=wait.event_key,
            conversation=wait.conversation,
            kind=wait.kind,
            chat=wait.chat,
            timeout_s=round(wait.deadline - self.clock(), 3) if wait.deadline else None,
        )


def _who(event: Event) -> str:
    return f"{event.platform}:{event.sender.id}" if event.sender is not None else ""


def _name(event: Event) -> str:
    sender = event.sender
    return (sender.name or sender.id) if sender is not None else "someone"


def _written_answer(waits: list[Wait], event: Event) -> Wait | None:
    """The oldest open question ``event`` answers by writing: from whoever may answer it."""
    if not event.text and not event.attachments:
        return None
    who = _who(event)
    for wait in waits:
        if wait.kind == "ask" and (wait.sender is None or wait.sender == who):
            return wait
    return None


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ended(event: Event, wait: Wait) -> str:
    """What a late answer or press hears about the question ``wait`` (in its language)."""
    if wait.status == "answered":
        answer = wait.answer or {}
        name = answer.get("name") or answer.get("sender")
        # Each key written out, so tests/ground/test_messages.py sees every one the code says.
        if wait.kind != "approval":
            if name:
                return say(event, "question_answered_by", name=name)
            return say(event, "question_answered")
        if answer.get("decision") == "approved":
            if name:
                return say(event, "approved_already_by", name=name)
            return say(event, "approved_already")
        if name:
            return say(event, "denied_already_by", name=name)
        return say(event, "denied_already")
    if wait.status == "expired":
        return say(event, "question_expired")
    if wait.status == "cancelled":
        return say(event, "question_was_cancelled")
    return say(event, "question_gone")


def _approvers(wait: Wait) -> str:
    approvers = wait.detail.get("approvers") or []
    return ", ".join(str(a) for a in approvers) or "none configured"
