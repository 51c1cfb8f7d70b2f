"""Built-in commands every agent answers, ``echo`` included.

A newcomer's first ``/help`` or ``/start`` should be answered the same way whichever
agent is configured, not echoed back verbatim: ``/start``, ``/help``, ``/usage``,
``/remember``, ``/facts``, ``/forget`` and ``/search`` live here, included after the
plugins (a plugin may shadow one) and before the agent. ``/help`` lists what really
exists: these, the agent's own commands, the plugins' commands (their handler's first
docstring line), and the access commands (``/whoami``; ``/approve`` only to admins).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from tether.config.schema import Settings
from tether.events import Event
from tether.gateway.builtin.people import about
from tether.gateway.handler import recall
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Route, Router
from tether.memory.records import Fact, Usage
from tether.messages import SHIPPED, say

#: Is this event's sender an admin? (``/help`` lists admin-only commands to admins only.)
IsAdmin = Callable[[Event], Awaitable[bool]]

#: The built-in commands ``/help`` describes from the catalogue (``command_<name>``).
BUILT_IN = (
    "start", "help", "reset", "new", "persona", "remember", "facts", "forget", "usage",
    "search", "link", "unlink", "forgetme", "export", "stop", "whoami", "approve",
)  # fmt: skip
#: What ``/help`` says about each built-in command, in English (the command menu's words).
DESCRIPTIONS = {name: SHIPPED["en"][f"command_{name}"] for name in BUILT_IN}
#: The access commands and ``/stop`` (gateway/core/stop.py), included ahead of every router:
#: (name, admin only).
ACCESS_COMMANDS = (("whoami", False), ("approve", True), ("stop", False))
#: The first line of ``/help``, by agent: the key of its fixed message.
_INTROS = {"echo": "help_echo", "llm": "help_llm"}


def help_text(settings: Settings, listing: Router, admin: bool, event: Event | None = None) -> str:
    """The command list: the access commands, then ``listing``'s in resolution order;
    admin-only ones only for an admin."""
    routes = dict(listing.commands())
    entries = [*ACCESS_COMMANDS, *((name, route.admin) for name, route in routes.items())]
    lines = []
    seen: set[str] = set()
    for name, only in entries:
        if name in seen or (only and not admin):
            continue
        seen.add(name)
        lines.append(f"/{name} - {_describe(name, routes.get(name), event)}")
    intro = say(event, _INTROS[settings.agent.handler])
    return f"{intro}\n" + "\n".join(lines)


def _describe(name: str, route: Route | None, event: Event | None) -> str:
    """A plugin's command is described by its handler's docstring, a built-in by ours
    (in the chat's language)."""
    doc = (route.handler.__doc__ or "").strip() if route else ""
    if route and doc and name not in DESCRIPTIONS:
        return doc.splitlines()[0]
    return say(event, f"command_{name}") if name in DESCRIPTIONS else ""


def commands_router(settings: Settings, listing: Router, is_admin: IsAdmin | None) -> Router:
    """The shared built-ins; ``/help`` lists ``listing`` (the plugins, these, the agent)."""
    router = Router("commands")

    async def admin(event: Event) -> bool:
        return await is_admin(event) if is_admin else event.platform in ("console", "cron")

    @router.command("start")
    async def start(ctx: Context) -> None:
        text = help_text(settings, listing, await admin(ctx.event), ctx.event)
        await ctx.reply(
            say(ctx.event, "greeting", name=settings.agent.name, help=text), quote=False
        )

    @router.command("help")
    async def help_(ctx: Context) -> None:
        text = help_text(settings, listing, await admin(ctx.event), ctx.event)
        await ctx.reply(text, quote=False)

    @router.command("remember")
    async def remember(ctx: Context) -> None:
        text = ctx.event.args.strip()
        if not text:
            await ctx.reply(say(ctx.event, "remember_what"))
            return
        whom = about(ctx, text)
        ctx.memory.remember(text, about=whom)
        # in a DM every fact is the person's; in a group, say that this one follows them
        key = "remembered_about_you" if whom and _in_group(ctx) else "remembered"
        await ctx.reply(say(ctx.event, key, text=text))

    @router.command("facts")
    async def facts_(ctx: Context) -> None:
        await ctx.reply(_list_facts(ctx.event, await ctx.memory.facts(), _in_group(ctx)))

    @router.command("forget")
    async def forget(ctx: Context) -> None:
        facts = await ctx.memory.facts()
        wanted = ctx.event.args.strip()
        if not wanted:
            await ctx.reply(_list_facts(ctx.event, facts, _in_group(ctx)))
            return
        chosen = _choose(facts, wanted)
        if not chosen:
            listing = _list_facts(ctx.event, facts, _in_group(ctx))
            await ctx.reply(say(ctx.event, "no_fact_matches", wanted=wanted, facts=listing))
            return
        ctx.memory.forget_facts(chosen)
        listed = "\n".join(f"- {fact.text}" for fact in chosen)
        await ctx.reply(say(ctx.event, "forgotten", facts=listed))

    @router.command("search")
    async def search_(ctx: Context) -> None:
        query = ctx.event.args.strip()
        if not query:
            await ctx.reply(say(ctx.event, "search_what"))
            return
        hits = await recall.search(ctx, query, 5)
        lines = recall.found_lines(hits, ctx.conversation, settings.memory.recall_tokens)
        found = "\n".join(lines) if lines else say(ctx.event, "nothing_found", query=query)
        await ctx.reply(found, quote=False)

    @router.command("usage")
    async def usage(ctx: Context) -> None:
        today = datetime.now(UTC).date()
        since = (today - timedelta(days=29)).isoformat()
        rows = await ctx.memory.store.usage(ctx.conversation, since=since)
        await ctx.reply(_usage_text(rows, today.isoformat(), settings))

    return router


def _in_group(ctx: Context) -> bool:
    return ctx.event.conversation.chat_type != "dm"


def _list_facts(event: Event, facts: list[Fact], mark: bool = False) -> str:
    """``facts`` numbered; ``mark``: say which are about the person asking (in a group,
    where the others are about the chat)."""
    if not facts:
        return say(event, "no_facts")
    yours = say(event, "fact_about_you")
    listed = "\n".join(
        f"{n}. {fact.text}{yours if mark and fact.owner else ''}"
        for n, fact in enumerate(facts, start=1)
    )
    return say(event, "facts", facts=listed)


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
