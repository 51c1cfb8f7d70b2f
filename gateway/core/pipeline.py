"""One event's life: (dedup at accept) → observe → work → checkpoint, or retry / dead.

Dedup already happened when the inbox accepted the event (the key is unique). Here the
event is observed (``event.started``), worked (the router's handler, through its
middlewares), and checkpointed: the inbox row done, its outbox rows and its memory rows
in ONE transaction. A :class:`BudgetExceeded` ends the work with its reply and is
checkpointed like success. A :class:`Retryable` (or any unexpected) error waits with
exponential backoff and full jitter; :class:`Fatal`, or the last allowed attempt, buries
the event in ``dead_letters`` with a snapshot of what it saw, and with one short notice
(``pipeline.dead_notice``) to the person, so that giving up is never silence.

A model that cannot answer now (:class:`~tether.gateway.llm.waits.ModelBusy`: rate
limited, breakers open) is not a failure: the event waits for it in ``retry_wait`` while
its answer can still come within ``llm.max_retry_after`` of its arrival, and is otherwise
answered with ``llm.busy_notice`` and done (``event.unanswered``), never dead-lettered for
it; the conversation's next message is tried afresh. A turn stopped by ``/stop`` while it
waited (:meth:`~tether.gateway.core.stop.Turns.called_off`) is done without running again.

A turn that asks (``ctx.ask``, an approval) ends its run with :class:`Suspend`: its
replies so far and its wait are committed in one transaction, the row is ``waiting``,
and the lane moves on (``event.waiting``). An event that answers a wait is routed to
:class:`~tether.gateway.core.waits.Waits` instead of a handler; the turn it resumes runs
again, and whatever it finishes with is checkpointed as above, without the replies an
earlier run already committed. Memory written through ``ctx.memory`` is committed by the
run that finishes, once.
"""

from __future__ import annotations

import asyncio
import math
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any, Protocol

import structlog

from tether import metrics
from tether.adapters.base import Adapter
from tether.backoff import full_jitter
from tether.config.messages import MessagesConfig
from tether.config.schema import MediaConfig, PipelineConfig
from tether.errors import BudgetExceeded, Fatal, Retryable, WaitEnded, WaitExpired
from tether.events import REPLY_META, Kind, OutMessage
from tether.gateway.core import media, stop
from tether.gateway.core.edits import without_edit
from tether.gateway.core.throttle import THROTTLED
from tether.gateway.core.transcript import transcript
from tether.gateway.core.waits import Waits
from tether.gateway.handler.asking import Suspend
from tether.gateway.handler.context import Context, Spawner, Turn, turn_of
from tether.gateway.handler.routing import Router, call
from tether.gateway.handler.tool import Toolset
from tether.gateway.llm.client import LLM
from tether.gateway.llm.embeddings import Semantic
from tether.gateway.llm.waits import ModelBusy
from tether.keys import dead_key, outbox_key
from tether.memory.documents import DocumentIndex
from tether.memory.records import DeadLetter, InboxRow, OutboxRow
from tether.memory.roles import EventStore
from tether.memory.waits import Wait
from tether.messages import say, use
from tether.redaction import redactor
from tether.text import split_text

log = structlog.get_logger("tether.pipeline")


class PipelineStore(EventStore, Protocol):
    """An event's run, with the outbox rows it already wrote (a dead event's notice is
    written once, also when the event dies again after ``tether dead retry``) and the
    waits of a turn that asks: both are the handler's roles too."""


class Pipeline:
    def __init__(
        self,
        store: PipelineStore,
        router: Router,
        adapters: Mapping[str, Adapter],
        config: PipelineConfig,
        on_checkpoint: Callable[[Sequence[OutboxRow]], None],
        llm: LLM | None = None,
        tools: Toolset | None = None,
        turns: stop.Turns | None = None,
        media_config: Callable[[], MediaConfig] = MediaConfig,
        waits: Waits | None = None,
    ) -> None:
        self.store = store
        self.router = router
        self.adapters = adapters
        self.config = config
        self.on_checkpoint = on_checkpoint
        self.llm = llm
        self.tools = tools
        #: Handlers running now: event key → (route, monotonic start), for the watchdog.
        self.running: dict[str, tuple[str, float]] = {}
        #: The running turn of each conversation, for ``/stop`` (:mod:`.stop`), whose
        #: command is given the same registry when the gateway is built.
        self.turns = turns or stop.Turns(store)
        #: What ``files=`` may reach (``media:``), as of the event's start: the gateway's
        #: settings, which a reload replaces.
        self.media_config = media_config
        self._downloads = media.Downloads(adapters)
        #: Open waits, and the events that answer them (:mod:`.waits`).
        self.waits = waits or Waits(store, shared=store.shared)
        #: What starts background tasks (``ctx.spawn``; gateway/tasks/), set by the gateway.
        self.tasks: Spawner | None = None
        #: ``memory.documents``, indexed (set by the gateway, replaced by a reload).
        self.documents: DocumentIndex | None = None
        #: ``memory.embeddings`` (set by the gateway); None: semantic recall off.
        self.semantic: Semantic | None = None
        #: ``messages:`` as of the event's start (set by the gateway, a reload's from then on).
        self.messages: Callable[[], MessagesConfig] = MessagesConfig

    async def run(self, row: InboxRow) -> float | None:
        """Run one attempt; returns the retry time, or None when the event is finished."""
        if await self.turns.called_off(row):  # /stop while it waited in retry_wait
            await self._called_off(row)
            return None
        await self.store.begin(row)
        event = row.event
        elog = log.bind(key=row.key, conversation=row.conversation, attempt=row.attempts)
        if "agent" in event.meta:  # several agents (gateway/agent/accounts.py): whose event
            elog = elog.bind(agent=event.meta["agent"])
        elog.info("event.started", platform=event.platform, kind=event.kind.value)
        metrics.labelled(metrics.EVENTS, event.platform, "started").inc()
        reach = self.media_config()  # media: as configured when the event starts
        use(self.messages().catalogue())  # what tether.messages.say says in this run
        turn = Turn(
            self.store,
            self.adapters,
            self.llm,
            self.tools,
            self._downloads,
            media=reach,
            ask_timeout=self.config.ask_timeout,
            tasks=self.tasks,
            last_attempt=row.attempts >= self.config.max_attempts,
            documents=self.documents,
            semantic=self.semantic,
        )
        turn.asking.clock = self.waits.clock
        ctx = Context(event, row.conversation, row.attempts, elog, turn)
        llm = turn.llm  # this run's client to its end: a reload retires it only after
        if llm is not None:
            llm.acquire()
        started = time.monotonic()
        route_name = None
        try:
            throttled = event.meta.get(THROTTLED)
            resolved = None if throttled else self.router.resolve(event)
            if throttled == "notice":
                await ctx.reply(say(event, "throttled"), quote=False)
            found = resolved[0] if resolved else None
            again = row.attempts > 1
            waits = self.waits
            if (
                not throttled
                and waits.may_answer(row, again)
                and await waits.look(event, row.conversation, found, again=again)
            ):
                # It answers a wait: the wait's handler, behind the same access checks.
                resolved = (self.waits.route(found), resolved[1] if resolved else [])
            if resolved is not None:
                route, middlewares = resolved
                route_name = route.name
                self.running[row.key] = (route_name, started)
                # A background task is bounded by its own deadline (gateway/tasks/run.py).
                limit = None if event.kind is Kind.TASK else self.config.handler_timeout
                try:
                    async with asyncio.timeout(limit) as deadline:
                        with self.turns.running(row.conversation, event, deadline):
                            try:
                                await call(route, middlewares, ctx)
                            except BudgetExceeded as exc:  # logged where it was raised
                                await ctx.reply(exc.reply)
                            except ModelBusy as busy:
                                if not self._tell_now(row, busy):
                                    raise
                                await self._unanswered(ctx, busy)
                            except WaitEnded as ended:  # the handler let it end the turn
                                if isinstance(ended, WaitExpired):
                                    await ctx.reply(say(event, "wait_expired"), quote=False)
                except TimeoutError:
                    if not self.turns.stopped(row.key):
                        raise
                    await ctx.reply(say(event, "stopped"), quote=False)  # /stop: done, kept
            asking = turn.asking
            if row.attempts > 1:  # run before: it may have asked (and must retrace it)
                await asking.load(self.store, row.key)
            asking.finished()
            outbound = self._outbound(row.key, ctx.outbox)
            if asking.committed:  # committed with a wait by an earlier run: sent already
                outbound = [m for m in outbound if m.key not in asking.committed]
            ctx.memory.seal()  # the handler state's changed keys, with the turn
            rows = await self.store.checkpoint(
                row.key, outbound, ctx.memory.pending, ctx.memory.changes
            )
        except Suspend as suspended:
            await self._suspend(row, ctx, suspended.wait, elog, started)
            return None
        except Fatal as exc:
            await self._bury(row, ctx, exc, elog)
            return None
        except Exception as exc:  # Retryable, and anything unexpected
            if row.attempts >= self.config.max_attempts:
                await self._bury(row, ctx, exc, elog)
                return None
            return await self._retry(row, exc, elog, started)
        finally:
            self.running.pop(row.key, None)
            if llm is not None:
                llm.release()
        duration = time.monotonic() - started
        metrics.HANDLER_SECONDS.observe(duration)
        metrics.labelled(metrics.EVENTS, event.platform, "done").inc()
        elog.info(
            "event.done",
            route=route_name,
            replies=len(rows),
            duration_ms=round(duration * 1000, 2),
        )
        self.on_checkpoint(rows)
        return None

    def _outbound(
        self, key: str, messages: Sequence[OutMessage], *, dead: bool = False
    ) -> list[OutMessage]:
        """Split each reply at its platform's limit and give every chunk its key
        (``{event}#{n}``, or the dead notice's ``{event}#dead#{n}``: :mod:`tether.keys`)."""
        number = dead_key if dead else outbox_key
        out: list[OutMessage] = []
        for message in messages:
            adapter = self.adapters[message.target.platform]
            if message.files:  # one row per platform message: gateway/core/media.py
                for part in media.parts(message, adapter):
                    out.append(part.model_copy(update={"key": number(key, len(out))}))
                continue
            length = adapter.length_for(message.format)
            chunks = split_text(message.text, adapter.text_limit, length)
            for index, chunk in enumerate(chunks):
                update: dict[str, Any] = {"key": number(key, len(out)), "text": chunk}
                if index:  # only the first chunk quotes (or edits); the rest follow it
                    update["reply_to"] = None
                    update["meta"] = without_edit(message.meta)
                if index < len(chunks) - 1:  # buttons go under the last chunk only
                    update["buttons"] = []
                out.append(message.model_copy(update=update))
        return out

    async def _suspend(
        self, row: InboxRow, ctx: Context, wait: Wait, elog: Any, started: float
    ) -> None:
        """The run asked: its replies so far (the question among them) and its wait, in
        one transaction; the lane moves on and the answer resumes the turn."""
        committed = turn_of(ctx).asking.committed
        outbound = [m for m in self._outbound(row.key, ctx.outbox) if m.key not in committed]
        rows = await self.store.suspend(row.key, outbound, wait)
        self.waits.opened(wait)
        metrics.labelled(metrics.EVENTS, row.event.platform, "waiting").inc()
        elog.info(
            "event.waiting",
            wait=wait.id,
            replies=len(rows),
            duration_ms=round((time.monotonic() - started) * 1000, 2),
        )
        self.on_checkpoint(rows)

    def _tell_now(self, row: InboxRow, busy: ModelBusy) -> bool:
        """Tell the person now, or wait for the model in ``retry_wait``? Wait only while
        the answer can still come within ``llm.max_retry_after`` of the event's arrival
        (a provider that asked for longer than that will not make it), and never into a
        last attempt: a model that is only unavailable does not dead-letter the event.
        With nobody to tell (a cron fire without a chat) it waits like any retry."""
        if row.event.conversation.target().platform not in self.adapters:
            return False
        if busy.capped or row.attempts >= self.config.max_attempts:
            return True
        now = time.time()
        arrived = min(row.event.timestamp.timestamp(), now)
        return now + (busy.retry_after or 0.0) > arrived + busy.bound

    async def _unanswered(self, ctx: Context, busy: ModelBusy) -> None:
        """No model can answer in time: the person is told, and the event is done."""
        await ctx.reply(self.messages().catalogue().custom(ctx.event, busy.notice, "busy_notice"))
        platform = ctx.event.platform
        metrics.labelled(metrics.EVENTS, platform, "unanswered").inc()
        ctx.log.warning(
            "event.unanswered",
            error=redactor.scrub(str(busy)),
            retry_after_s=round(busy.retry_after or 0.0, 3),
            capped=busy.capped,
        )

    async def _called_off(self, row: InboxRow) -> None:
        """A turn ``/stop`` called off while it waited: done, nothing run or sent (the
        ``/stop`` itself said what it stopped)."""
        rows = await self.store.checkpoint(row.key, [], [])
        metrics.labelled(metrics.EVENTS, row.event.platform, "done").inc()
        log.info("event.done", key=row.key, conversation=row.conversation, stopped=True)
        self.on_checkpoint(rows)

    async def _retry(self, row: InboxRow, exc: Exception, elog: Any, started: float) -> float:
        retry_after = exc.retry_after if isinstance(exc, Retryable) else None
        if retry_after is not None and not 0 <= retry_after < math.inf:
            retry_after = None  # inf, nan or negative: no wait anyone can mean; back off
        delay = (
            retry_after
            if retry_after is not None
            else full_jitter(row.attempts, self.config.backoff_base, self.config.backoff_max)
        )
        retry_at = time.time() + delay
        error = redactor.scrub(f"{type(exc).__name__}: {exc}")
        await self.store.retry_later(row.key, retry_at, error)
        metrics.RETRIES.labels(row.event.platform).inc()
        elog.warning(
            "event.retry",
            error=error,
            delay_s=round(delay, 3),
            duration_ms=round((time.monotonic() - started) * 1000, 2),
            expected=isinstance(exc, Retryable),
        )
        return retry_at

    async def _bury(self, row: InboxRow, ctx: Context, exc: Exception, elog: Any) -> None:
        history = await self.store.history(row.conversation, 20)
        steps = await self.store.steps(row.key)
        snapshot = {
            "attempts": row.attempts,
            "conversation": row.conversation,
            "history": [asdict(turn) for turn in history],
            "steps": steps,
            "tools": transcript(steps),  # the calls in order, an interrupted one included
            "pending_replies": [m.text for m in ctx.outbox],
            "pending_turns": [asdict(turn) for turn in ctx.memory.pending],
        }
        waits = await self.store.waits_of(row.key)
        if waits:  # a turn that asked: what it asked, and what became of each
            snapshot["waits"] = [
                {"wait": w.id, "kind": w.kind, "status": w.status, "question": w.question,
                 "answer": w.answer, "trace": w.detail.get("trace")}
                for w in waits
            ]  # fmt: skip
        error = redactor.scrub(f"{type(exc).__name__}: {exc}")
        letter = DeadLetter(
            key=row.key,
            conversation=row.conversation,
            event=row.event,
            error=error,
            traceback=redactor.scrub("".join(traceback.format_exception(exc))),
            snapshot=redactor.scrub_value(snapshot),
        )
        notice = await self._dead_notice(row)
        rows = await self.store.bury(letter, notice)
        metrics.DEAD.labels(row.event.platform).inc()
        metrics.EVENTS.labels(row.event.platform, "dead").inc()
        elog.error("event.dead", error=error, fatal=isinstance(exc, Fatal), notice=bool(notice))
        self.on_checkpoint(rows)

    async def _dead_notice(self, row: InboxRow) -> list[OutMessage]:
        """The one message that tells the person their message was given up on.

        It is committed with the dead letter, so it is written once per event however
        many attempts it took, keyed ``{event key}#dead#n`` (never ``#n``, which a
        successful re-run after ``tether dead retry`` writes). An event that dies again
        after such a retry already has it: none the second time. None either where no
        person waits: ``pipeline.dead_notice`` empty, or a chat on no enabled platform
        (a cron fire without ``deliver`` has the conversation ``cron:{job}``).
        """
        event = row.event
        target = event.conversation.target()
        if not self.config.dead_notice or target.platform not in self.adapters:
            return []
        meta = event.meta.get(REPLY_META)
        notice = OutMessage(
            target=target,
            text=self.messages().catalogue().custom(event, self.config.dead_notice, "dead_notice"),
            reply_to=event.message_id,
            meta=dict(meta) if isinstance(meta, dict) else {},
        )
        chunks = self._outbound(row.key, [notice], dead=True)
        written = {out.key for out in await self.store.outbox_rows(row.key)}
        return [chunk for chunk in chunks if chunk.key not in written]
