"""The ``llm`` agent: chat with a configured model, with durable memory and budgets.

Text that no plugin handled becomes one conversation turn (:func:`converse`): the
prompt is assembled from the persona, saved facts, the running summary and the newest
history that fits ``tether.memory.history_tokens``; the model's answer is a memoized step, the
reply and both turns are committed with the checkpoint; then, if the history outgrew its
budget, the oldest part is folded into the summary (never deleted).

Built-in commands: /start, /help, /reset, /persona, /remember, /forget, /usage.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tether.config.schema import Settings
from tether.events import Kind
from tether.gateway.context import Context
from tether.gateway.routing import Router
from tether.memory.compaction import compact
from tether.memory.prompt import assemble
from tether.memory.records import Fact, Usage

HELP = """\
Just write to chat with me. Commands:
/reset - start a fresh context (the old conversation is archived, not deleted)
/persona [text] - show or set who I am in this chat; "/persona reset" restores the default
/remember TEXT - save a fact I keep in mind in this chat
/forget [N | text | all] - list saved facts, or forget one by number or by words
/usage - tokens and cost spent in this chat
/help - this list"""


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
    prompt = await assemble(
        ctx.memory,
        persona=settings.agent.persona,
        history_tokens=memory.history_tokens,
        facts_tokens=memory.facts_tokens,
        message=text,
    )
    # Recorded first: if the budget stops this turn, the user's words are still kept.
    ctx.memory.add("user", text)
    completion = await ctx.llm.chat(prompt.messages, name="reply")
    answer = completion.text.strip() or "(the model returned an empty answer)"
    ctx.memory.add("assistant", answer)
    await ctx.reply(answer)

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

    @router.command("start")
    async def start(ctx: Context) -> None:
        await ctx.reply(f"Hi, I'm {settings.agent.name}.\n\n{HELP}", quote=False)

    @router.command("help")
    async def help_(ctx: Context) -> None:
        await ctx.reply(HELP, quote=False)

    @router.command("reset")
    async def reset(ctx: Context) -> None:
        await ctx.memory.reset()
        await ctx.reply(
            "Started a fresh context. The earlier conversation is archived, not deleted;"
            " saved facts and the persona stay."
        )

    @router.command("persona")
    async def persona(ctx: Context) -> None:
        text = ctx.event.args.strip()
        if not text:
            state = await ctx.memory.state()
            kind = "custom" if state.persona else "default"
            await ctx.reply(f"Persona ({kind}):\n{state.persona or settings.agent.persona}")
        elif text.lower() in ("reset", "default"):
            await ctx.memory.set_persona(None)
            await ctx.reply("Persona back to the default.")
        else:
            await ctx.memory.set_persona(text)
            await ctx.reply("Persona set for this chat.")

    @router.command("remember")
    async def remember(ctx: Context) -> None:
        text = ctx.event.args.strip()
        if not text:
            await ctx.reply("What should I remember? /remember TEXT")
            return
        ctx.memory.remember(text)
        await ctx.reply(f"I'll remember: {text}")

    @router.command("forget")
    async def forget(ctx: Context) -> None:
        facts = await ctx.memory.facts()
        wanted = ctx.event.args.strip()
        if not wanted:
            await ctx.reply(_list_facts(facts))
            return
        chosen = _choose(facts, wanted)
        if not chosen:
            await ctx.reply(f"No saved fact matches {wanted!r}.\n\n{_list_facts(facts)}")
            return
        ctx.memory.forget([fact.id for fact in chosen])
        listed = "\n".join(f"- {fact.text}" for fact in chosen)
        await ctx.reply(f"Forgotten:\n{listed}")

    @router.command("usage")
    async def usage(ctx: Context) -> None:
        today = datetime.now(UTC).date()
        since = (today - timedelta(days=29)).isoformat()
        rows = await ctx.memory.store.usage(ctx.conversation, since=since)
        await ctx.reply(_usage_text(rows, today.isoformat(), settings))

    @router.fallback
    async def chat(ctx: Context) -> None:
        if ctx.event.kind is Kind.COMMAND:
            await ctx.reply(f"Unknown command /{ctx.event.command}.\n\n{HELP}")
            return
        if ctx.event.text.strip():
            await converse(ctx)

    return router


def _list_facts(facts: list[Fact]) -> str:
    if not facts:
        return "No saved facts. /remember TEXT saves one."
    listed = "\n".join(f"{n}. {fact.text}" for n, fact in enumerate(facts, start=1))
    return f"Saved facts:\n{listed}\n\n/forget N, /forget WORDS or /forget all"


def _choose(facts: list[Fact], wanted: str) -> list[Fact]:
    """``all``, a number from the listing, or every fact containing the words."""
    if wanted.lower() == "all":
        return facts
    if wanted.isdigit():
        index = int(wanted) - 1
        return [facts[index]] if 0 <= index < len(facts) else []
    return [fact for fact in facts if wanted.lower() in fact.text.lower()]


def _usage_text(rows: list[Usage], today: str, settings: Settings) -> str:
    def line(label: str, group: list[Usage]) -> str:
        prompt = sum(r.prompt_tokens for r in group)
        completion = sum(r.completion_tokens for r in group)
        cost = sum(r.cost for r in group)
        calls = sum(r.calls for r in group)
        return (
            f"{label}: {prompt + completion:,} tokens ({prompt:,} prompt +"
            f" {completion:,} completion), ${cost:.4f}, {calls} calls"
        )

    todays = [r for r in rows if r.day == today]
    lines = ["Token usage in this chat", line(f"Today ({today})", todays)]
    lines += [f"  {r.model}: {r.tokens:,} tokens, ${r.cost:.4f}" for r in todays]
    lines.append(line("Last 30 days", rows))
    memory = settings.memory
    if memory.daily_token_budget is not None:
        used = sum(r.tokens for r in todays)
        lines.append(f"Daily budget: {used:,} of {memory.daily_token_budget:,} tokens used")
    if memory.task_token_budget is not None:
        lines.append(f"Budget per message: {memory.task_token_budget:,} tokens")
    return "\n".join(lines)
