"""``/export``: a person gets what the bot keeps of them, as a zip sent to their DM.

The same export as ``tether export PLATFORM:USER`` (:mod:`tether.memory.people.export`,
docs/export.md): every identity they linked, ``export.jsonl`` and ``files/``, zipped. In
a DM only: in a group the document would be shown to everyone there, so the answer says
to ask in a DM. A platform that cannot send a document (the console, the web chat) gets
a text saying so, and so does an export over the platform's upload limit: never
silence, and never a half of it.

Building is one memoized step that stores the zip as a blob and returns its key, so a
re-run after a crash sends the zip the first run built instead of building another; the
reply carrying it is an outbox row like any other, committed once with the event and
sent once. The zip stays in the store like every file a reply carried (``/forgetme``
erases it with the rest), and is left out of the person's next export.
"""

from __future__ import annotations

import time

from tether.adapters.base import Adapter
from tether.files import File
from tether.gateway.handler.context import Context, turn_of
from tether.gateway.handler.routing import Router
from tether.memory.blobs import MAX_BLOB_BYTES
from tether.memory.people.archive import bundle, safe_name
from tether.memory.people.export import EXPORT_PREFIX, Subject, exportable, read_export
from tether.messages import say


def sends_documents(adapter: Adapter | None) -> bool:
    """Whether ``adapter`` sends files as files: it has its own ``send_files`` (the base's
    only names them in a text line)."""
    return adapter is not None and type(adapter).send_files is not Adapter.send_files


def _many(count: int, thing: str) -> str:
    return f"{count} {thing}" if count == 1 else f"{count} {thing}s"


def _megabytes(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB"


def export_router() -> Router:
    router = Router("export")

    @router.command("export")
    async def export(ctx: Context) -> None:
        writer = ctx.memory.writer
        if writer is None:
            await ctx.reply(say(ctx.event, "export_person_only"))
            return
        if ctx.event.conversation.chat_type != "dm":
            await ctx.reply(say(ctx.event, "export_dm_only"))
            return
        turn = turn_of(ctx)
        store = exportable(turn.store)
        adapter = turn.adapters.get(ctx.event.platform)
        if store is None:
            await ctx.reply(say(ctx.event, "export_unsupported"))
            return
        if not sends_documents(adapter):
            platform = ctx.event.platform
            await ctx.reply(
                say(ctx.event, "export_no_documents", platform=platform, identity=writer)
            )
            return
        assert adapter is not None
        cap = min(adapter.upload_limit or MAX_BLOB_BYTES, MAX_BLOB_BYTES)

        async def build() -> dict[str, object]:
            subject = Subject(identities=await store.identities(writer))
            made = await bundle(store, await read_export(store, subject))
            data = made.zip()
            counts = made.lines[0]["counts"]
            if len(data) > cap:
                return {"size": len(data), "counts": counts}
            return {"size": len(data), "counts": counts, "blob": await store.put_blob(data)}

        built = await ctx.step("export.build", build)
        size, counts = int(built["size"]), dict(built["counts"])
        if "blob" not in built:
            too_big = say(
                ctx.event,
                "export_too_big",
                size=_megabytes(size),
                platform=ctx.event.platform,
                limit=_megabytes(cap),
                identity=writer,
            )
            await ctx.reply(too_big)
            return
        data = await store.blob(str(built["blob"]))
        if data is None:  # erased between the runs (/forgetme): nothing is left to send
            await ctx.reply(say(ctx.event, "export_erased"))
            return
        stamp = time.strftime("%Y%m%d", time.gmtime(ctx.event.timestamp.timestamp()))
        name = f"{EXPORT_PREFIX}{safe_name(writer)}-{stamp}.zip"
        await ctx.reply(
            f"Everything I keep of you: {_many(counts['turn'], 'message')}, "
            f"{_many(counts['fact'], 'fact')}, {_many(counts['reminder'], 'reminder')}, "
            f"{_many(counts['file'], 'file')}. export.jsonl in it is one JSON object a line, "
            "described in the bot's docs (docs/export.md).",
            files=[File(data, name=name, kind="document", mime="application/zip")],
        )

    return router
