"""The ``llm`` agent: chat with a configured model, with durable memory and budgets.

Text that no plugin handled becomes one conversation turn (:func:`converse`): the
prompt is assembled from the persona, saved facts, the running summary and the newest
history that fits ``tether.memory.history_tokens``; the model's answer is a memoized step, the
reply and both turns are committed with the checkpoint; then, if the history outgrew its
budget, the oldest part is folded into the summary (never deleted).

Its own commands: /reset, /persona; the ones every agent has (/start, /help, /usage,
/remember, /forget) are in :mod:`tether.gateway.builtin.commands`. An edited message is
answered again only with ``agent.on_edit: reanswer``, the answer saying so.
"""

from __future__ import annotations

from tether.config.schema import Settings
from tether.events import Kind
from tether.gateway.agent import vision
from tether.gateway.agent.streaming import StreamedReply
from tether.gateway.builtin.echo import EDITED
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Router
from tether.gateway.tools.loop import chat_with_tools
from tether.gateway.tools.recall import recall_into
from tether.memory.compaction import compact
from tether.memory.prompt import assemble
from tether.messages import say


async def converse(ctx: Context, text: str | None = None) -> str:
    """One chat turn for ``text`` (default: the event's text); returns the answer.

    Usable from plugin handlers too: everything it does is committed with the event's
    checkpoint, and the model call is not repeated when the event runs again.
    """
    settings = ctx.llm.settings
    text = ctx.event.text if text is None else text
    event = ctx.event
    if (
        event.conversation.chat_type == "group"
        and settings.agent.group_sessions == "shared"
        and event.sender
    ):
        text = f"{event.sender.name or event.sender.id}: {text}"
    memory = settings.memory
    seen = await vision.look(ctx, text)  # images for a vision model; notes for the rest
    if seen.notes:  # what it cannot use is said plainly, never met with silence
        await ctx.reply("\n".join(seen.notes))
        if not text.strip() and not seen.parts:
            return seen.notes[0]
    prompt = await assemble(
        ctx.memory,
        persona=settings.agent.persona,
        history_tokens=memory.history_tokens,
        facts_tokens=memory.facts_tokens,
        message=text,
    )
    await recall_into(ctx, prompt, text)  # memory.recall: auto
    vision.attach(prompt.messages, seen)
    # Recorded first: if the budget stops this turn, the user's words are still kept.
    ctx.memory.add("user", seen.memory_text)
    # Tools the model asks for run in between, each at most once (docs/tools.md).
    reply = await StreamedReply.open(ctx)  # shown while it is written (streaming.py)
    async with reply.streaming() as on_text:
        completion = await chat_with_tools(ctx, prompt.messages, name="reply", stream=on_text)
    answer = completion.text.strip() or "(the model returned an empty answer)"
    ctx.memory.add("assistant", answer)
    await reply.send(EDITED + answer if event.kind is Kind.EDIT else answer)  # Markdown

    async def summarize(messages: list[dict[str, str]], limit: int) -> str:
        model = settings.llm.summary_model if settings.llm else None
        done = await ctx.llm.chat(
            messages, name="summary", model=model or completion.model, max_tokens=limit
        )
        return done.text

    await compact(
        ctx.memory,
        prompt.history,
        history_tokens=memory.history_tokens,
        summarize=summarize,
        log=ctx.log,
    )
    return answer


def llm_router(settings: Settings) -> Router:
    """The built-in commands and the chat fallback (after every plugin router)."""
    router = Router("llm")

    @router.command("reset", "new")
    async def reset(ctx: Context) -> None:
        await ctx.memory.reset()
        await ctx.reply(say(ctx.event, "context_reset"))

    @router.command("persona")
    async def persona(ctx: Context) -> None:
        text = ctx.event.args.strip()
        if not text:
            state = await ctx.memory.state()
            key = "persona_custom" if state.persona else "persona_default"
            await ctx.reply(say(ctx.event, key, persona=state.persona or settings.agent.persona))
        elif text.lower() in ("reset", "default"):
            await ctx.memory.set_persona(None)
            await ctx.reply(say(ctx.event, "persona_restored"))
        else:
            await ctx.memory.set_persona(text)
            await ctx.reply(say(ctx.event, "persona_set"))

    @router.fallback
    async def chat(ctx: Context) -> None:
        if ctx.event.kind is Kind.COMMAND:
            await ctx.reply(say(ctx.event, "unknown_command", command=ctx.event.command))
            return
        if ctx.event.text.strip() or ctx.event.attachments:
            await converse(ctx)

    if settings.agent.on_edit == "reanswer":

        @router.on(Kind.EDIT)
        async def edited(ctx: Context) -> None:
            if ctx.event.text.strip():
                await converse(ctx)

    return router
