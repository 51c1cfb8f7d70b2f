"""Starting a task within its bounds, and cancelling one.

:meth:`Tasks.spawn` is what ``ctx.spawn`` and the ``start_task`` tool call. A task is
started by accepting its event into the inbox (durable from that moment, run in a lane
of its own) and writing its ledger row; both are idempotent on the task's id, which the
starting turn's key and place make, so a re-run of that turn after a crash finds the
task it started and is never refused for it.

The bounds (``agent.tasks``) are checked before anything is written, and a refusal is a
:class:`~tether.errors.TaskRefused` whose message is for the person: the model reads it
as the tool's result, a handler may catch it. Counts come from the ledger's index under
one lock per process, so two turns of this process cannot both take the last place
(several instances on PostgreSQL each hold their own: two starting at one instant may
pass a cap by one, as reminders do).

The starting turn also posts the task's **status message** ("Task t-… started"), an
outbox row committed with that turn, marked with the task's id; the task edits it as it
goes (:mod:`.progress`) and when it ends.

:meth:`Tasks.cancel` ends a running task in the ledger (a conditional update: a task
that ended first stays as it ended) and wakes its runner at once when it runs here; a
runner elsewhere reads the ledger every :data:`~.run.WATCH` seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from tether import metrics
from tether.config.schema import Settings
from tether.config.tools import TasksConfig
from tether.errors import TaskRefused
from tether.events import REPLY_META, Event, Kind
from tether.gateway.handler.plugins import import_handler
from tether.gateway.handler.spawn import SpawnRequest
from tether.gateway.tasks.spec import TaskSpec, record, short, spec_of, task_event, task_id
from tether.keys import sender_name
from tether.memory.roles import TaskStore
from tether.memory.tasks import Task

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context

log = structlog.get_logger("tether.tasks")

#: ``OutMessage.meta`` key of a task's status message: the task's id.
STATUS_META = "task_status"
#: Who ``tether tasks cancel`` and the console cancel as: the chat is told of their cancel
#: (a person's ``/cancel`` already had its answer).
OPERATOR = "the operator"
Accept = Callable[[Sequence[Event]], Awaitable[list[bool]]]


class Tasks:
    """Starts and cancels the gateway's background tasks (the handlers' ``Spawner``)."""

    def __init__(self, store: TaskStore, settings: Callable[[], Settings]) -> None:
        self.store = store
        self._settings = settings
        #: The inbox's ``accept``: set by the gateway once its inbox exists.
        self.accept: Accept | None = None
        self._lock = asyncio.Lock()
        #: Tasks running in this process: set when one is cancelled, so it stops at once.
        self.signals: dict[str, asyncio.Event] = {}

    def config(self, ctx: Context | None = None) -> TasksConfig:
        """``agent.tasks`` as the turn sees it (an agent's own, a reload's)."""
        if ctx is not None and ctx.llm.configured:
            return ctx.llm.settings.agent.tasks
        return self._settings().agent.tasks

    async def spawn(self, ctx: Context, request: SpawnRequest) -> Task:
        """Start ``request`` from ``ctx``'s turn, or raise TaskRefused saying why not."""
        known = await self.store.task(task_id(ctx.event.key, request.position))
        if known is not None:  # this turn started it in an earlier run
            if known.open and known.target:  # whose status message died with that run
                await _announce(ctx, known.id, known.goal, known.target, _reply_meta(ctx))
            return known
        config = self.config(ctx)
        if not config.enabled:
            raise TaskRefused("Background tasks are switched off here.")
        if not request.goal.strip():
            raise TaskRefused("A task needs a goal: say what it should do.")
        async with self._lock:
            spec = await self._spec(ctx, request, config)
            if self.accept is None:
                raise TaskRefused("Background tasks are not running in this gateway.")
            await self.accept([task_event(spec, ctx.event.sender)])
            task = await self.store.add_task(record(spec))
        metrics.TASKS.labels("started").inc()
        log.info(
            "task.started",
            task=spec.id,
            parent=spec.parent,
            depth=spec.depth,
            agent=spec.agent,
            deadline_s=round(spec.deadline - spec.created),
            budget=spec.budget,
        )
        if spec.target:
            await _announce(ctx, spec.id, spec.goal, spec.target, spec.reply_meta)
        return task

    async def _spec(self, ctx: Context, request: SpawnRequest, config: TasksConfig) -> TaskSpec:
        """The task to start, after every bound; TaskRefused naming the one it passes."""
        event = ctx.event
        parent_spec = spec_of(event) if event.kind is Kind.TASK else None
        depth = parent_spec.depth + 1 if parent_spec else 1
        if depth > config.max_depth:
            raise self._refused(
                f"Tasks may start sub-tasks only {config.max_depth - 1} level(s) deep;"
                " do this part yourself."
            )
        seconds = config.deadline if request.deadline is None else float(request.deadline)
        if not 0 < seconds <= config.max_deadline:
            raise self._refused(
                f"A task may take between a moment and {config.max_deadline:,.0f} seconds,"
                f" not {seconds:,.0f}."
            )
        agent = self._agent(ctx, request, parent_spec)
        if request.handler is not None:
            try:
                import_handler(request.handler)
            except (ImportError, AttributeError, TypeError, ValueError) as exc:
                raise self._refused(f"The task's handler cannot be used: {exc}") from None
        settings = ctx.llm.settings if ctx.llm.configured else self._settings()
        model = request.model or config.model
        if model is not None and (settings.llm is None or model not in settings.llm.models):
            raise self._refused(f"There is no model {model!r} to run a task with.")
        running = await self.store.count_open_tasks(ctx.conversation)
        if running >= config.per_conversation:
            raise self._refused(
                f"This conversation already has {running} task(s) running, the most it may"
                " have at once. /tasks lists them; /cancel ID stops one."
            )
        everywhere = await self.store.count_open_tasks()
        if everywhere >= config.per_gateway:
            raise self._refused(
                f"{everywhere} tasks are running, the most this gateway runs at once;"
                " try again when one has finished."
            )
        now = time.time()
        reply_meta = _reply_meta(ctx)
        target = event.conversation.target()
        return TaskSpec(
            id=task_id(event.key, request.position),
            goal=request.goal.strip(),
            parent=ctx.conversation,
            target="" if parent_spec else target.key,
            parent_task=parent_spec.id if parent_spec else None,
            depth=depth,
            agent=agent,
            persona=request.persona,
            model=model,
            budget=config.token_budget if request.token_budget is None else request.token_budget,
            deadline=now + seconds,
            tools=request.tools,
            handler=request.handler,
            sender=parent_spec.sender if parent_spec else sender_name(event),
            started_by=event.key,
            created=now,
            reply_meta=reply_meta,
        )

    def _agent(
        self, ctx: Context, request: SpawnRequest, parent_spec: TaskSpec | None
    ) -> str | None:
        """The configured agent it runs as: the one asked for, else its starter's."""
        agents = [spec.name for spec in self._settings().agents]
        if request.agent is not None:
            if request.agent not in agents:
                known = ", ".join(agents) or "none are configured"
                raise self._refused(f"There is no agent {request.agent!r} (agents: {known}).")
            return request.agent
        if parent_spec is not None:
            return parent_spec.agent
        _, _, name = ctx.event.conversation.platform.partition("@")
        return name if name in agents else None

    @staticmethod
    def _refused(reason: str) -> TaskRefused:
        metrics.TASKS.labels("refused").inc()
        log.info("task.refused", reason=reason)
        return TaskRefused(reason)

    async def cancel(self, task_id: str, by: str) -> tuple[Task | None, bool]:
        """End running task ``task_id`` as cancelled (``by`` whom, for its record): the
        task as it is now, and whether this call cancelled it."""
        ended = await self.store.end_task(task_id, "cancelled", _by(by))
        task = await self.store.task(task_id)
        if ended:
            signal = self.signals.get(task_id)
            if signal is not None:
                signal.set()
            metrics.TASKS.labels("cancelled").inc()
            log.info("task.cancelled", task=task_id, by=by)
        return task, ended


async def _announce(
    ctx: Context, ident: str, goal: str, target: str, reply_meta: dict[str, Any]
) -> None:
    """Queue the task's status message in the starting turn (committed with it). A re-run
    of that turn queues it again: the run that started the task died before its
    checkpoint, so its message was never sent (a committed turn is not run again)."""
    await ctx.send(
        target,
        f"⏳ Task {ident} started: {short(goal)}\n/cancel {ident} stops it.",
        meta={**reply_meta, STATUS_META: ident},
    )


def _reply_meta(ctx: Context) -> dict[str, Any]:
    """What the starter's replies carry to answer in its chat (a thread, a reply mode)."""
    meta = ctx.event.meta.get(REPLY_META)
    return {k: v for k, v in meta.items() if k != "interaction"} if isinstance(meta, dict) else {}


def by_operator(task: Task | None) -> bool:
    """Whether ``task`` was cancelled by the operator, not from its chat."""
    return task is not None and task.status == "cancelled" and task.result == _by(OPERATOR)


def _by(who: str) -> str:
    return f"cancelled by {who}"
