"""``search_memory``: the model looks back past its context window, and ``memory.recall:
auto``, which does it for every message before the model is asked.

Both read the store's index through the turn's scope (:mod:`tether.gateway.handler.recall`:
a DM searches the person's own conversations, a group only itself), and both are bounded
by ``memory.recall_tokens``. The tool is a memoized step like every tool call, so a
re-run reads what the first run found; auto-recall is part of the prompt of a model call
that is itself memoized.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tether.errors import ToolError
from tether.gateway.handler.context import turn_of
from tether.gateway.handler.recall import found_lines, search
from tether.memory import tokens

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context
    from tether.memory.prompt import Prompt

#: Turns one call may ask for.
MOST = 10
RECALLED = "Recalled from earlier conversations (by search; it may be out of date):"


async def search_memory(ctx: Context, query: str, limit: int = 5) -> str:
    """Search past messages of this chat (and, in a private chat, the person's other
    chats), and the documents you were given, by words, when the answer is not in the
    conversation you see: "what did we decide about the venue in March?", "what does
    the handbook say about refunds?". Returns the best matches with their date and
    where they are from.

    Args:
        query: Words the messages you look for contain (any language).
        limit: How many matches to return (1-10).
    """
    if not query.strip():
        raise ToolError("say what to search for: 'query' is empty")
    wanted = max(1, min(MOST, int(limit)))
    documents = turn_of(ctx).documents
    found = [] if documents is None else await asyncio.to_thread(documents.search, query, wanted)
    hits = await search(ctx, query, wanted, found)  # ranked together (handler/semantic.py)
    if not hits:
        return f"nothing found for {query!r}"
    budget = ctx.llm.settings.memory.recall_tokens if ctx.llm.configured else 600
    return "\n".join(found_lines(hits, ctx.conversation, budget))


async def recall_into(ctx: Context, prompt: Prompt, text: str) -> None:
    """``memory.recall: auto``: the turns that best match ``text`` added to ``prompt``'s
    system message, leaving out those the prompt's history already holds."""
    settings = ctx.llm.settings.memory
    if settings.recall != "auto" or not text.strip():
        return
    shown = {turn.id for turn in prompt.history.turns}
    hits = [hit for hit in await search(ctx, text, 5) if hit.id not in shown]
    lines = found_lines(hits, ctx.conversation, settings.recall_tokens)
    if not lines:
        return
    section = RECALLED + "\n" + "\n".join(lines)
    system = prompt.messages[0]
    system["content"] = f"{system['content']}\n\n{section}"
    prompt.tokens += tokens.count(section)
