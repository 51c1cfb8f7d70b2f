"""What a handler gets: the event, its memory, and the only ways to act on the world.

Handlers never touch the store or an adapter. ``reply``/``send`` queue outbox rows that
are committed with the checkpoint; ``step`` runs a costly call once per event, across
retries and crashes; ``llm`` asks the configured models, through ``step`` and within the
event's token budget.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import structlog

from tether import metrics
from tether.adapters.base import Adapter
from tether.buttons import ButtonsSpec, keyboard
from tether.config.schema import MediaConfig
from tether.errors import ButtonError, DownloadError, TaskRefused
from tether.events import REPLY_META, Attachment, Event, OutMessage, Target
from tether.gateway.handler import asking
from tether.gateway.handler import files as outgoing
from tether.gateway.handler.actions import Actions
from tether.gateway.handler.asking import Answer, Asking
from tether.gateway.handler.files import FileSpec
from tether.gateway.handler.spawn import SpawnRequest
from tether.gateway.handler.task_llm import TaskLLM
from tether.gateway.handler.tool import Toolset
from tether.gateway.llm.client import LLM
from tether.gateway.llm.embeddings import Semantic
from tether.keys import owner_of, writer_of
from tether.memory.conversation import ConversationMemory
from tether.memory.documents import DocumentIndex
from tether.memory.roles import HandlerStore
from tether.memory.tasks import Task

T = TypeVar("T")
Format = Literal["plain", "html", "markdown"]


class Spawner(Protocol):
    """Starts background tasks (``gateway/tasks/start.py``, a floor above this one)."""

    async def spawn(self, ctx: Context, request: SpawnRequest) -> Task: ...


@dataclass(slots=True, eq=False)
class Turn:
    """What the framework carries through one run of a handler, beside its :class:`Context`.

    The context is the handler's API; this is the framework's own per-run object, kept
    apart as aiogram keeps its ``data`` apart from what a handler declares: the store
    roles the run reads and writes through, the adapters (a streamed preview, a
    platform's upload limit), the model client, the tools, and which tool call runs now.
    The pipeline builds it; framework code reads it with :func:`turn_of`, never through
    a private field of the context.
    """

    store: HandlerStore
    #: The enabled platforms' adapters by name: where ``ctx.send`` may go.
    adapters: Mapping[str, Adapter] = field(default_factory=dict)
    llm: LLM | None = None
    tools: Toolset | None = None
    downloads: outgoing.Downloader | None = None
    #: The step of the tool call running now (``tool:{round}:{index}``): a key that is
    #: stable across re-runs, which a tool can make its own effect idempotent by.
    tool_step: str | None = None
    #: What ``files=`` may reach (``media:``): local directories and private hosts.
    media: MediaConfig = field(default_factory=MediaConfig)
    #: This run's waits: its trace of steps and waits, and what earlier runs stored.
    asking: Asking = field(default_factory=Asking)
    #: How long ``ctx.ask`` waits when not told (``pipeline.ask_timeout``).
    ask_timeout: float = 86_400.0
    #: What starts background tasks (``ctx.spawn``, the ``start_task`` tool); None: none.
    tasks: Spawner | None = None
    #: This run is the event's last allowed attempt (``pipeline.max_attempts``): a task
    #: reports its failure now instead of leaving it to a dead letter nobody reads.
    last_attempt: bool = False
    #: Spawns so far in this run, outside tools: the next one's position (``spawn:N``).
    spawned: int = 0
    #: ``memory.documents``, indexed: what ``search_memory`` searches beside the history.
    documents: DocumentIndex | None = None
    #: ``memory.embeddings``: what semantic recall searches with; None: off.
    semantic: Semantic | None = None


def turn_of(ctx: Context) -> Turn:
    """The framework's side of ``ctx``'s run (streaming, the tool loop, several agents)."""
    return ctx._turn


def use_llm(ctx: Context, llm: LLM | None) -> None:
    """Let ``ctx``'s run ask ``llm`` from now on (one agent's view of the gateway's
    client, ``gateway/agent/accounts.py``); a ``ctx.llm`` made before is dropped."""
    ctx._turn.llm = llm
    ctx.__dict__.pop("llm", None)


class Context(Actions):
    """What a handler gets for one event: what happened, its memory, and the ways to act.

    A handler may run more than once for the same event (after a retry or a crash), so
    everything it does goes through the context and is committed in one checkpoint with
    the event's ``done`` — or not at all. What a handler may use:

    ``ctx.event``
        The normalized :class:`~tether.events.Event`: ``text``, ``command``/``args``,
        ``sender``, ``conversation``, ``attachments``, ``raw`` (the platform's payload).
    ``ctx.memory``
        The conversation's memory: ``await ctx.memory.history(n)`` reads committed turns;
        ``add(role, text)`` and ``remember(text)`` are written with the checkpoint.
    ``await ctx.reply(text, quote=True, format="plain")``, ``await ctx.send(target, text)``
        Queue a message as an outbox row, sent after the checkpoint and split at the
        platform's limit; ``send`` takes any enabled chat, e.g. ``"telegram:12345"``.
        Both take ``buttons=`` (rows of :class:`~tether.buttons.Button`; presses come
        back as callbacks for ``@router.callback``, docs/buttons.md).
    ``ctx.edit(text)``, ``delete()``, ``react(emoji)``, ``pin()``, ``answer(text)``
        Act on the pressed message (or the person's), through the outbox the same
        way (:mod:`tether.gateway.handler.actions`).
    ``await ctx.step(name, fn)``
        Run ``fn`` (sync or async; JSON-serializable result) once per event: a re-run
        gets the stored result instead of calling it again. Wrap every costly or
        non-repeatable call in a step.
    ``answer = await ctx.ask(text, buttons=..., timeout=...)``
        Ask and wait for the person's next message or press, durably: the turn is
        checkpointed and run again when the answer comes (docs/handlers.md "Asking
        and waiting"; the handler must be deterministic between steps).
    ``ctx.llm``
        The configured models, within this event's token budget; every call is a step,
        so a model is never paid twice for one event.
    ``ctx.log``
        A structlog logger bound to the event's key, conversation and attempt.
    ``ctx.conversation``, ``ctx.attempt``, ``ctx.data``
        The session key (memory and lane), which run this is (1 is the first), and a
        dict for this run only (a middleware may leave something there for the handler).

    What a handler must not do: touch the store or an adapter, or send on its own. What
    bypasses the context is neither checkpointed nor safe to repeat. Raise
    :class:`~tether.errors.Retryable` for transient trouble and
    :class:`~tether.errors.Fatal` when another attempt cannot help.

    Example::

        from tether import Context, Router

        router = Router()

        @router.command("weather")  # /weather Berlin
        async def weather(ctx: Context) -> None:
            city = ctx.event.args or "Berlin"
            forecast = await ctx.step("forecast", lambda: fetch_forecast(city))
            ctx.log.info("weather.asked", city=city)
            await ctx.reply(forecast)

    The manual's page is docs/handlers.md.
    """

    def __init__(
        self,
        event: Event,
        conversation: str,
        attempt: int,
        log: structlog.typing.FilteringBoundLogger,
        turn: Turn,
    ) -> None:
        self.event = event
        self.conversation = conversation
        self.attempt = attempt
        self.log = log
        self.memory = ConversationMemory(
            turn.store,
            conversation,
            owner_of(event, conversation),
            writer=writer_of(event),
            people=turn.store,
            in_dm=event.conversation.chat_type == "dm",
        )
        #: The messages queued so far (``reply``/``send``), committed with the checkpoint.
        self.outbox: list[OutMessage] = []
        self.data: dict[str, Any] = {}
        self._turn = turn
        self._step_names: set[str] = set()

    @functools.cached_property
    def llm(self) -> TaskLLM:
        """The LLM with this event's budget. Made on first use: it refers back to the
        context, and that cycle would otherwise leave every event for the garbage
        collector instead of freeing it when the event is done."""
        return TaskLLM(self._turn.llm, self)

    async def reply(
        self,
        text: str = "",
        *,
        quote: bool = True,
        format: Format = "plain",
        buttons: ButtonsSpec | None = None,
        files: Sequence[FileSpec] = (),
    ) -> None:
        """Answer in the event's chat (and thread), quoting the message when ``quote``;
        ``buttons`` (:class:`~tether.buttons.Button` rows) go under it."""
        target = self.event.conversation.target()
        reply_to = self.event.message_id if quote else None
        # An adapter may ask for data on every reply (Discord: the token of the slash
        # command being answered); it travels in OutMessage.meta to its send().
        meta = self.event.meta.get(REPLY_META)
        await self.send(
            target,
            text,
            reply_to=reply_to,
            format=format,
            meta=dict(meta) if isinstance(meta, dict) else None,
            buttons=buttons,
            files=files,
        )

    async def send(
        self,
        target: Target | str,
        text: str,
        *,
        reply_to: str | None = None,
        format: Format = "plain",
        meta: dict[str, Any] | None = None,
        buttons: ButtonsSpec | None = None,
        files: Sequence[FileSpec] = (),
    ) -> None:
        """Queue a message to any chat, e.g. ``"telegram:12345"``; sent after checkpoint.

        A bad ``buttons`` spec raises :class:`~tether.errors.ButtonError` here, naming
        the button and the limit, instead of failing later in the outbox."""
        if isinstance(target, str):
            target = Target.parse(target)
        adapter = self._adapter_for(target.platform)
        rows = keyboard(buttons)
        # Stored now, before the checkpoint commits the row naming them (gateway/core/media.py).
        stored = await outgoing.store_files(
            self._turn.store,
            files,
            cap=adapter.upload_limit,
            platform=target.platform,
            media=self._turn.media,
        )
        if not text and not stored:
            if rows:
                raise ButtonError("buttons need a message text to sit under")
            return
        self.outbox.append(
            OutMessage(
                target=target,
                text=text,
                reply_to=reply_to,
                format=format,
                meta=meta or {},
                buttons=rows,
                files=stored,
            )
        )

    def _adapter_for(self, platform: str) -> Adapter:
        adapter = self._turn.adapters.get(platform)
        if adapter is None:
            raise ValueError(f"no enabled platform {platform!r} to send to")
        return adapter

    async def chat_data(self) -> dict[str, Any]:
        """This chat's handler state: a dict of JSON values to read and change; the keys
        changed are written with this turn's checkpoint (docs/handlers.md#state)."""
        return await self.memory.chat_data()

    async def user_data(self) -> dict[str, Any]:
        """The sender's handler state, the same in every chat, saved the same way."""
        return await self.memory.user_data()

    async def download(self, attachment: Attachment, *, max_bytes: int | None = None) -> bytes:
        """The bytes of a file the person sent (one of ``ctx.event.attachments``), through
        the platform's file API; :class:`~tether.errors.TooLarge` past
        ``max_bytes`` (default 20 MB), :class:`~tether.errors.DownloadError` when
        the platform will not give it. A plain read: calling it again is harmless."""
        downloads = self._turn.downloads
        if downloads is None:
            raise DownloadError("downloads are not available here")
        cap = self._turn.media.max_download_bytes if max_bytes is None else max_bytes
        return await downloads(self.event, attachment, cap)

    async def ask(
        self,
        text: str,
        *,
        buttons: ButtonsSpec | Sequence[str] | None = None,
        timeout: float | None = None,
        from_: str | None = asking.ASKER,
        quote: bool = True,
        format: Format = "plain",
    ) -> Answer:
        """Ask ``text`` in the event's chat and return the answer: the next message in
        this conversation from ``from_`` (the asker by default; ``"anyone"``, or a
        ``platform:user``), or a press on one of ``buttons`` (strings, or
        :class:`~tether.buttons.Button` rows whose ``data`` is the answer's ``data``).

        The wait is durable: the turn is checkpointed here and the lane moves on; when
        the answer comes the handler runs again from the top, its finished steps and
        replies are kept, and this call returns the :class:`Answer`. After ``timeout``
        seconds (``pipeline.ask_timeout`` by default) it raises
        :class:`~tether.errors.WaitExpired`, after ``/cancel``
        :class:`~tether.errors.WaitCancelled`. Between steps the handler must do the
        same things on every run; what varies goes in :meth:`step`.
        """
        turn = self._turn
        return await asking.ask(
            self,
            turn.asking,
            turn.store,
            turn.ask_timeout,
            text,
            buttons=buttons,
            timeout=timeout,
            from_=from_,
            quote=quote,
            format=format,
        )

    async def spawn(
        self,
        goal: str,
        *,
        agent: str | None = None,
        persona: str | None = None,
        model: str | None = None,
        token_budget: int | None = None,
        deadline: float | None = None,
        tools: Sequence[str] | None = None,
        handler: str | None = None,
    ) -> Task:
        """Start ``goal`` as a background task beside this conversation, and return its
        record (``task.id`` for ``/cancel``). The task is an event of its own: it runs
        the agent (or ``agent``, with ``persona``/``model``/``tools`` of its own) within
        its token budget and ``deadline`` seconds, survives restarts, and posts its
        result here once. ``handler`` (``"module:function"``) runs that function with the
        task's own context instead of the agent; the string it returns is the result.
        Raises :class:`~tether.errors.TaskRefused` past a bound of ``agent.tasks``.
        Called twice in one turn it starts two tasks; a re-run of the turn starts none
        again (each call's place in the turn names its task).
        """
        turn = self._turn
        if turn.tasks is None:
            raise TaskRefused("Background tasks are not available here.")
        if turn.tool_step is not None:
            position = turn.tool_step
        else:
            position, turn.spawned = f"spawn:{turn.spawned}", turn.spawned + 1
        request = SpawnRequest(
            goal=goal,
            agent=agent,
            persona=persona,
            model=model,
            token_budget=token_budget,
            deadline=deadline,
            tools=tuple(tools) if tools is not None else None,
            handler=handler,
            position=position,
        )
        return await turn.tasks.spawn(self, request)

    async def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` once for this event; a re-run after a retry or crash gets its result.

        ``fn`` may be sync or async. The result is stored as JSON and returned as
        JSON-decoded data on every run (first or cached), so both paths see the same value.
        Inside a tool the name is the call's own (``tool:{round}:{index}/{name}``), so a
        tool the model calls twice in one turn keeps a step per call.
        """
        if self._turn.tool_step is not None:  # a tool's own: the same tool may run twice
            name = f"{self._turn.tool_step}/{name}"
        if name in self._step_names:
            raise ValueError(f"step {name!r} used twice in one handler run")
        self._step_names.add(name)
        self._turn.asking.passed(f"step:{name}")
        if self.attempt > 1:
            cached = await self._turn.store.step(self.event.key, name)
            if cached is not None:
                self.log.info("step.cached", step=name)
                metrics.STEPS_CACHED.inc()
                return json.loads(cached)
        result = fn()
        if inspect.isawaitable(result):
            result = await result
        encoded = json.dumps(result)
        await self._turn.store.save_step(self.event.key, name, encoded)
        self.log.info("step.saved", step=name)
        return json.loads(encoded)
