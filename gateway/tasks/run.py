"""A task event's handler: the agent at work on the goal until it answers, its deadline
passes or it is cancelled; then its result delivered to the conversation that started it.

The task runs in its own lane (``task:{id}``), so its conversation stays responsive.
Every model call is a memoized step (``llm:task``, ``llm:task#2``, …) and every tool call
too (``tool:R:I``), so a run after a crash — on this instance or, on PostgreSQL, on
another one that took the lane over — replays what finished and pays for none of it
again. The pipeline gives a task no ``handler_timeout``: its own ``deadline`` bounds it.

How it ends, in the task event's ONE checkpoint transaction: the result (or why there
is none) as an outbox row to the starter's chat, keyed ``task:{id}#n`` and so sent once;
a history row in the starter's conversation, so the agent there knows what its task
found; the status message's final edit; and the ledger row's end
(:class:`~tether.memory.records.TaskEnd`). Ways it ends:

- ``done``: the model answered; ``task.done``.
- ``expired``: its deadline passed, while it ran or while the gateway was down (found at
  its next run, reported once, never run late); ``task.expired``.
- ``cancelled``: ``/cancel ID`` or ``tether tasks cancel`` ended it in the ledger; the
  runner sees that within :data:`WATCH` seconds (at once on this instance), stops the
  work, keeps its finished steps, and says nothing more in the chat unless the operator
  cancelled it (the chat's ``/cancel`` already answered).
- ``failed``: its token budget ran out, a model refused it, or its last allowed attempt
  failed; the person is told why, never left with silence; ``task.failed``.

A sub-agent (a task started by a task) has no chat: its result goes to its parent
task's memory and ledger, where the parent's ``task_status`` tool reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, cast

import structlog

from tether import metrics
from tether.errors import BudgetExceeded, Fatal
from tether.events import Kind
from tether.gateway.handler.context import turn_of
from tether.gateway.handler.plugins import import_handler
from tether.gateway.handler.routing import Router
from tether.gateway.tasks.progress import Progress
from tether.gateway.tasks.spec import TaskSpec, record, short, spec_of
from tether.gateway.tasks.start import Tasks, by_operator
from tether.memory import tokens
from tether.memory.records import TaskEnd, TaskStatus, Turn
from tether.redaction import redactor

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context

log = structlog.get_logger("tether.tasks")

#: Seconds between reads of the ledger for a cancel made by another process.
WATCH = 0.5
#: What the model is told it is doing, after its persona.
BRIEF = (
    "You are working on a background task that a person handed you in a chat. Nobody is"
    " watching while you work and nobody can answer questions: use your tools, then"
    " answer with the result itself, complete and ready to read in that chat."
)
#: The history row the starter's conversation gets, and the chat's message, by outcome.
SAID: dict[TaskStatus, str] = {
    "done": "✅ Task {id} done: {goal}\n\n{text}",
    "expired": "⌛ Task {id} expired before it finished: {goal}\n{text}",
    "failed": "⚠️ Task {id} failed: {goal}\n{text}",
    "cancelled": "⏹ Task {id} was cancelled: {goal}\n{text}",
}
EXPIRED_WHILE_DOWN = "Its deadline passed while it was waiting to run, so it was not run late."
EXPIRED_RUNNING = "Its deadline passed while it worked; what it did so far is kept."


def task_router() -> Router:
    """The route of task events, in every agent's router (with ``agents:``, the router
    of the agent the task runs as)."""
    router = Router("tasks")

    @router.on(Kind.TASK)
    async def run_task(ctx: Context) -> None:
        await _run(ctx)

    return router


async def _run(ctx: Context) -> None:
    spec = spec_of(ctx.event)
    turn = turn_of(ctx)
    store = turn.store
    task = await store.task(spec.id) or await store.add_task(record(spec))
    ctx.log = ctx.log.bind(task=spec.id)
    if not task.open:  # cancelled (or ended) before this run: nothing to do again
        ctx.log.info("task.skipped", status=task.status)
        if by_operator(task):
            await _deliver(ctx, spec, None, "cancelled", "The operator cancelled it.")
        return
    tasks = turn.tasks if isinstance(turn.tasks, Tasks) else None
    config = tasks.config(ctx) if tasks else None
    progress = Progress(spec, store, turn.adapters, config.progress_interval if config else 5.0)
    if time.time() >= spec.deadline:
        await _deliver(ctx, spec, progress, "expired", EXPIRED_WHILE_DOWN)
        return
    resumed = ctx.attempt > 1
    metrics.TASKS.labels("resumed" if resumed else "running").inc()
    ctx.log.info("task.resumed" if resumed else "task.running", attempt=ctx.attempt)
    signal = asyncio.Event()
    if tasks is not None:
        tasks.signals[spec.id] = signal
    done = asyncio.Event()
    pump = asyncio.create_task(progress.pump(done), name=f"progress {spec.id}")
    work = asyncio.create_task(_work(ctx, spec, progress), name=f"task {spec.id}")
    try:
        outcome = await _watch(ctx, spec, work, signal)
    except (BudgetExceeded, Fatal) as exc:  # it cannot succeed by running again
        outcome = ("failed", _why(exc))
    except Exception as exc:
        if not turn.last_attempt:
            raise  # the pipeline retries it (its finished steps are kept)
        ctx.log.exception("task.error")
        outcome = ("failed", f"It failed on its last attempt ({_why(exc)}).")
    finally:
        done.set()
        if tasks is not None:
            tasks.signals.pop(spec.id, None)
        with contextlib.suppress(asyncio.CancelledError):
            await pump
    status, text = outcome
    if status == "cancelled":
        if by_operator(await store.task(spec.id)):
            await _deliver(ctx, spec, progress, "cancelled", "The operator cancelled it.")
        else:
            await _deliver(ctx, spec, progress, "cancelled", "", say=False)
        return
    await _deliver(ctx, spec, progress, status, text)


async def _watch(
    ctx: Context, spec: TaskSpec, work: asyncio.Task[str], signal: asyncio.Event
) -> tuple[TaskStatus, str]:
    """Wait for the work, its deadline, or a cancel (read every :data:`WATCH` s)."""
    store = turn_of(ctx).store
    try:
        while True:
            left = spec.deadline - time.time()
            if left <= 0:
                return ("expired", EXPIRED_RUNNING)
            woken = asyncio.ensure_future(signal.wait())
            await asyncio.wait({work, woken}, timeout=min(WATCH, left))
            woken.cancel()
            if work.done():
                return ("done", work.result())
            if signal.is_set():
                return ("cancelled", "")
            found = await store.task(spec.id)
            if found is not None and found.status == "cancelled":
                return ("cancelled", "")
    finally:
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await work


async def _work(ctx: Context, spec: TaskSpec, progress: Progress) -> str:
    """The agent on the goal, with the task's own model, budget and tools (or the
    starter's own ``handler``)."""
    if spec.handler is not None:
        try:
            handler = import_handler(spec.handler)
        except (ImportError, AttributeError, TypeError, ValueError) as exc:
            raise Fatal(f"task handler {spec.handler!r}: {exc}") from None
        run = cast("Callable[[Context], Awaitable[object]]", handler)
        result = await run(ctx)
        return str(result if result is not None else "done").strip() or "done"
    # The tool loop (and the model client behind it) loads with the first task only.
    from tether.gateway.tools.loop import chat_with_tools

    settings = ctx.llm.settings
    ctx.llm.default_model = spec.model
    ctx.llm.own_budget, ctx.llm.budget = True, spec.budget
    persona = spec.persona or settings.agent.persona
    messages = [
        {"role": "system", "content": f"{persona}\n\n{BRIEF}"},
        {"role": "user", "content": spec.goal},
    ]
    ctx.memory.add("user", spec.goal)  # the task's own transcript
    completion = await chat_with_tools(
        ctx, messages, name="task", allow=spec.tools, progress=progress.note
    )
    answer = completion.text.strip() or "(the model returned an empty answer)"
    ctx.memory.add("assistant", answer)
    return answer


async def _deliver(
    ctx: Context,
    spec: TaskSpec,
    progress: Progress | None,
    status: TaskStatus,
    text: str,
    *,
    say: bool = True,
) -> None:
    """Queue how the task ended, for its one checkpoint: the status message's final
    edit, the result in the chat, the starter's history row, and the ledger's end."""
    message = SAID[status].format(id=spec.id, goal=short(spec.goal), text=text).rstrip()
    if progress is not None:
        line = {"done": "✅ done", "expired": "⌛ expired", "failed": "⚠️ failed",
                "cancelled": "⏹ cancelled"}[status]  # fmt: skip
        final = await progress.final(line)
        if final is not None:
            await ctx.send(final.target, final.text, meta=final.meta)
    if say and spec.target:
        await ctx.send(spec.target, message, format="markdown", meta=dict(spec.reply_meta))
    if say or status != "cancelled":
        ctx.memory.pending.append(
            Turn(
                conversation=spec.parent,
                role="assistant",
                text=message,
                tokens=tokens.count_turn(message),
            )
        )
    ctx.memory.changes.task = TaskEnd(spec.id, status, text or status)
    if status != "cancelled":  # a cancel was counted when it was made
        metrics.TASKS.labels(status).inc()
    ctx.log.info(f"task.{status}", parent=spec.parent, chars=len(text))


def _why(exc: Exception) -> str:
    if isinstance(exc, BudgetExceeded):
        return f"Its token budget ran out: {exc.reply}"
    return redactor.scrub(f"{type(exc).__name__}: {exc}")[:500]
