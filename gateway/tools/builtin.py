"""Built-in tools about the conversation's own memory: ``remember``, ``forget`` and
``search_memory`` (:mod:`.recall`).

They do what ``/remember`` and ``/forget`` do, when the person asks in their own words
("remember that I'm vegetarian"). Both write through ``ctx.memory``, so the change is
committed with the turn's checkpoint, or not at all; the loop replays those writes when
a re-run takes the tool's stored result. Each is switched by ``agent.tools``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tether.config.tools import ToolsConfig
from tether.errors import ToolError
from tether.gateway.handler.python_tool import python_tool
from tether.gateway.handler.tool import Tool
from tether.gateway.tools.recall import search_memory

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context


async def remember(ctx: Context, fact: str, about: str = "person") -> str:
    """Save a fact about the person or this chat to keep in mind in later conversations.

    Use it when the person asks you to remember something, or states a lasting
    preference. Saved facts are shown to you at the start of every turn.

    Args:
        fact: The fact, as one short self-contained sentence.
        about: "person" for a fact about the person writing to you (it follows them to
            their other chats), "chat" for one about this chat or group as a whole.
    """
    text = fact.strip()
    if not text:
        raise ToolError("nothing to remember: the fact is empty")
    if about not in ("person", "chat"):
        raise ToolError(f"'about' is 'person' or 'chat', not {about!r}")
    writer = ctx.memory.writer if about == "person" else None
    ctx.memory.remember(text, about=writer)
    return f"saved{' about the person' if writer else ''}: {text}"


async def forget(ctx: Context, matching: str) -> str:
    """Forget saved facts that contain a text (case-insensitive), e.g. when the person
    says something you remembered is no longer true.

    Args:
        matching: Words the facts to forget contain; "all" forgets every saved fact.
    """
    wanted = matching.strip().lower()
    if not wanted:
        raise ToolError("say which facts to forget: 'matching' is empty")
    facts = await ctx.memory.facts()
    chosen = facts if wanted == "all" else [f for f in facts if wanted in f.text.lower()]
    if not chosen:
        listed = "; ".join(f.text for f in facts) or "none"
        return f"no saved fact contains {matching!r} (saved facts: {listed})"
    ctx.memory.forget_facts(chosen)
    return "forgotten: " + "; ".join(fact.text for fact in chosen)


_ALL = {
    "remember": python_tool(remember, idempotent=True),
    "forget": python_tool(forget, idempotent=True),
    "search_memory": python_tool(search_memory, idempotent=True),
}


class BuiltinTools:
    """The memory built-ins that ``agent.tools`` leaves on.

    The switches are read per turn from the settings the turn's model runs with, so a
    reload (or an agent with its own ``tools``) takes effect at the next message; the
    start-up config only decides which names are checked for clashes.
    """

    label = "built-in tools"

    def __init__(self, config: ToolsConfig) -> None:
        self._config = config
        self._tools = {
            name: dataclasses.replace(tool, source="builtin") for name, tool in _ALL.items()
        }

    def names(self) -> list[str]:
        return [name for name in self._tools if self._config.enabled(name)]

    async def tools(self, ctx: Context) -> list[Tool]:
        config = ctx.llm.settings.agent.tools if ctx.llm.configured else self._config
        return [tool for name, tool in self._tools.items() if config.enabled(name)]
