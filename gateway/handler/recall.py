"""What a turn may recall, and how a found turn reads: shared by the ``search_memory``
tool, ``/search`` and ``memory.recall: auto``.

The scope follows where the answer is read. In a DM only the person reads it, so their
own conversations are searched too (their other DMs, on any platform, and their own
sessions in groups). In a group, others read the answer, so only what was said in that
conversation is: a person's DM never surfaces in front of someone else. A task searches
the conversation that started it. The store applies the scope in its query
(:class:`~tether.memory.recall.Scope`); this only says whose it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from tether.events import Kind
from tether.memory import tokens
from tether.memory.recall import Hit, Scope

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context

#: Characters of one found turn shown (a long answer is cut, saying so), and of a
#: document's chunk (the passage is the answer).
SHOWN, DOCUMENT_SHOWN = 400, 1200
#: The role of a document's chunk among hits (memory/documents/index.py).
DOCUMENT = "document"


async def scope_for(ctx: Context) -> Scope:
    """What ``ctx``'s turn may search (see the module). In a DM the person's own
    conversations include those of every identity linked with them
    (:mod:`tether.memory.people`): the DM is theirs alone, so nothing found is shown to
    anyone else."""
    event = ctx.event
    if event.kind is Kind.TASK:
        spec = event.meta.get("task")
        parent = spec.get("parent") if isinstance(spec, dict) else None
        return Scope.person(parent if isinstance(parent, str) else ctx.conversation)
    if event.conversation.chat_type == "dm":
        linked = await ctx.memory.identities() if ctx.memory.owner else ()
        return Scope.person(ctx.conversation, ctx.memory.owner, *linked)
    return Scope.person(ctx.conversation)


async def search(ctx: Context, query: str, limit: int, documents: Sequence[Hit] = ()) -> list[Hit]:
    """The best ``limit`` turns in ``ctx``'s scope, with ``documents``' hits: by words,
    and by meaning too with ``memory.embeddings`` on (:mod:`.semantic`)."""
    from tether.gateway.handler.semantic import recalled

    return await recalled(ctx, query, await scope_for(ctx), limit, documents)


def found_lines(hits: list[Hit], here: str, budget: int) -> list[str]:
    """``hits`` as lines with their date and place, as many as fit ``budget`` tokens."""
    out: list[str] = []
    spent = 0
    for hit in hits:
        text = " ".join(hit.text.split())
        shown = DOCUMENT_SHOWN if hit.role == DOCUMENT else SHOWN
        if len(text) > shown:
            text = text[: shown - 1] + "…"
        if hit.role == DOCUMENT:  # a chunk of memory.documents: where it is, not when
            line = f"[{hit.conversation}] {text}"
        else:
            when = datetime.fromtimestamp(hit.created, UTC).strftime("%Y-%m-%d")
            where = "this chat" if hit.conversation == here else hit.conversation
            line = f"[{when}, {where}] {hit.role}: {text}"
        cost = tokens.count(line)
        if out and spent + cost > budget:
            break
        out.append(line)
        spent += cost
    return out
