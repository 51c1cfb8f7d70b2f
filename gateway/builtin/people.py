"""One person across platforms, from chat: ``/link`` and ``/unlink``, and whom a fact
saved with ``/remember`` is about.

``/link`` in a DM answers with a one-time code; the same person sends ``/link CODE`` to
the bot from another platform (or account), also in a DM, and the two identities are
one person from then on (:mod:`tether.memory.people`): what they told the bot about
themselves is in both, and each DM's history is searchable from the other. Both halves
are DM-only because a code is as good as the person's facts to whoever sends it first.
Each store call is a memoized step, so a redelivered ``/link`` answers with the same
code instead of issuing another, and a re-run claim does not claim twice.

:func:`about` decides whom ``/remember TEXT`` is about: in a DM, the person writing; in a
group, the person writing when the text speaks of themselves ("I'm vegetarian", "my
birthday is in May", 我…), else the chat. A group's person-fact is its writer's only:
it is shown in their own turns, never in anyone else's (ConversationMemory.facts).
"""

from __future__ import annotations

import re
import secrets

from tether.gateway.handler.context import Context, turn_of
from tether.gateway.handler.routing import Router
from tether.memory.people import CODE_TTL_S
from tether.memory.sql.store import SqlStore
from tether.messages import say

#: The code's letters (no 0/O, 1/I) and length: 32**8, about 40 bits, for ten minutes.
_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
_LENGTH = 8
#: Words by which a text speaks of its writer.
_FIRST_PERSON = re.compile(
    r"(?i)(?<![\w'])(i|i'm|im|i've|i'd|i'll|me|my|mine|myself|ich|mein|meine|mich|mir|je|j'|moi|"
    r"mon|ma|mes|yo|mi|mis)(?![\w'])|[我俺私]"
)


def about(ctx: Context, text: str) -> str | None:
    """The identity a fact in ``text`` is about, or None for the chat (see the module)."""
    writer = ctx.memory.writer
    if writer is None:
        return None
    if ctx.event.conversation.chat_type == "dm" or _FIRST_PERSON.search(text):
        return writer
    return None


def new_code() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(_LENGTH))


def _normal(code: str) -> str:
    return re.sub(r"[\s-]", "", code).upper()


def _shown(code: str) -> str:
    return f"{code[:4]}-{code[4:]}"


def people_router() -> Router:
    router = Router("people")

    @router.command("link")
    async def link(ctx: Context) -> None:
        writer = ctx.memory.writer
        if writer is None:
            await ctx.reply(say(ctx.event, "link_person_only"))
            return
        if ctx.event.conversation.chat_type != "dm":
            await ctx.reply(say(ctx.event, "link_dm_only"))
            return
        store = turn_of(ctx).store
        given = _normal(ctx.event.args)
        if not given:

            async def issue() -> str:
                code = new_code()
                await store.issue_link_code(writer, code)
                return code

            code = await ctx.step("people.code", issue)
            minutes = int(CODE_TTL_S // 60)
            await ctx.reply(say(ctx.event, "link_code", minutes=minutes, code=_shown(code)))
            return

        async def claim() -> list[str]:
            found = await store.claim_link_code(given, writer)
            return [found.outcome, found.issuer or ""]

        outcome, issuer = await ctx.step("people.claim", claim)
        linked = [link.identity for link in await store.links(writer)]
        if outcome == "linked":
            ctx.log.info("people.linked", identity=writer, issuer=issuer)
            others = ", ".join(i for i in linked if i != writer) or issuer
            await ctx.reply(say(ctx.event, "linked", others=others))
        elif outcome == "self":
            await ctx.reply(say(ctx.event, "link_code_self"))
        else:
            ctx.log.info("people.code_refused", identity=writer)
            known = ", ".join(i for i in linked if i != writer)
            also = say(ctx.event, "linked_with", known=known) if known else ""
            await ctx.reply(say(ctx.event, "link_code_refused") + also)

    @router.command("unlink")
    async def unlink(ctx: Context) -> None:
        writer = ctx.memory.writer
        if writer is None:
            await ctx.reply(say(ctx.event, "unlink_person_only"))
            return
        store = turn_of(ctx).store

        async def leave() -> bool:
            return await store.unlink(writer)

        if await ctx.step("people.unlink", leave):
            ctx.log.info("people.unlinked", identity=writer)
            await ctx.reply(say(ctx.event, "unlinked"))
        else:
            await ctx.reply(say(ctx.event, "not_linked"))

    @router.command("forgetme")
    async def forgetme(ctx: Context) -> None:
        writer = ctx.memory.writer
        if writer is None:
            await ctx.reply(say(ctx.event, "forget_person_only"))
            return
        store = turn_of(ctx).store
        if not isinstance(store, SqlStore):
            await ctx.reply(say(ctx.event, "forget_nothing_kept"))
            return
        if ctx.event.args.strip().lower() != "yes":
            await ctx.reply(say(ctx.event, "forget_confirm"))
            return

        async def erase() -> dict[str, int]:
            erased = await store.erase_person(await store.identities(writer), keep=[ctx.event.key])
            return erased.rows

        rows = await ctx.step("people.erase", erase)
        ctx.log.info("people.erased", tables=len(rows), rows=sum(rows.values()))
        await ctx.reply(say(ctx.event, "person_forgotten", count=sum(rows.values())))

    return router
