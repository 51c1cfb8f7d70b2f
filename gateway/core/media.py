"""Files through the pipeline: stored by the handler, split into parts at the
checkpoint, loaded by the outbox, fetched on a handler's request.

Out. ``ctx.reply(text, files=[...])`` takes paths, bytes, URLs or :class:`File` values.
Each file's bytes go to the store's blobs *while the handler runs* (:func:`store_files`),
so when the checkpoint commits the outbox rows the bytes they name are already durable.
:func:`parts` turns one such reply into outbox rows: one platform message each, files
grouped where the platform shows them together (Telegram albums of photos and videos,
Discord's up to 10 attachments), the text a caption when it fits the platform's
caption limit and its own message(s) before the files when not. Each row then follows
the platform's exactly-once rule like any text reply: Discord's nonce, Feishu's uuid
(an upload repeated after a crash is invisible; only the message is seen), Telegram's
``unknown`` policy. :func:`deliver` is what the outbox calls: it loads the blobs
(a store that cannot read is "certainly not sent", so retried; a blob that is gone can
never be sent) and hands the bytes to the adapter.

In. :class:`Downloads` is ``ctx.download``: the adapter's file API, capped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from tether import metrics
from tether.adapters.base import Adapter, Sent
from tether.adapters.media import DEFAULT_MAX_DOWNLOAD
from tether.errors import DownloadError, Fatal, SendFatal, SendRetryable
from tether.events import Attachment, Event, OutMessage
from tether.files import OutFile, Upload
from tether.gateway.core.edits import without_edit
from tether.gateway.handler.files import File, FileSpec, blob_store, store_files
from tether.text import split_text

log = structlog.get_logger("tether.media")

#: Files one message may carry where the platform groups them (Telegram's albums and
#: Discord's attachments both stop at 10).
GROUP_MAX = 10


def parts(message: OutMessage, adapter: Adapter) -> list[OutMessage]:
    """One reply with files → the messages to send, in order (keys not yet set).

    The text is the first file's caption when it fits ``adapter.caption_limit``; else it
    goes first as text (split at the text limit) and the files follow without one.
    Buttons sit under a text, never on a file: with buttons, the text comes after the
    files, carrying them on its last chunk. Only the first part quotes the message
    answered, and a file part is never an edit of a streamed preview (only the first
    text part may be).
    """
    length = adapter.length_for(message.format)
    text, limit, buttons = message.text, adapter.caption_limit, message.buttons
    fits = bool(text) and not buttons and (limit is None or 0 < length(text) <= limit)
    chunks = split_text(text, adapter.text_limit, length) if text and not fits else []
    out: list[OutMessage] = []

    def add(chunk: str, files: list[OutFile], *, under: bool = False) -> None:
        meta = message.meta if not out and not files else without_edit(message.meta)
        update: dict[str, Any] = {
            "text": chunk,
            "files": files,
            "reply_to": message.reply_to if not out else None,
            "meta": meta,
            "buttons": buttons if under else [],
        }
        out.append(message.model_copy(update=update))

    if not buttons:
        for chunk in chunks:
            add(chunk, [])
    caption = text if fits else ""
    for group in _groups(message.files, adapter):
        add(caption, group)
        caption = ""
    if buttons:
        for index, chunk in enumerate(chunks):
            add(chunk, [], under=index == len(chunks) - 1)
    return out


def _groups(files: Sequence[OutFile], adapter: Adapter) -> list[list[OutFile]]:
    """Consecutive files the platform shows together, at most :data:`GROUP_MAX` each."""
    groups: list[list[OutFile]] = []
    for file in files:
        last = groups[-1] if groups else None
        if (
            last is not None
            and len(last) < GROUP_MAX
            and file.kind in adapter.file_groups
            and all(other.kind in adapter.file_groups for other in last)
        ):
            last.append(file)
        else:
            groups.append([file])
    return groups


async def deliver(adapter: Adapter, store: object, message: OutMessage) -> Sent:
    """Send ``message``: as text, or with its files' bytes loaded from the blobs."""
    if not message.files:
        return await adapter.send(message)
    uploads: list[Upload] = []
    for file in message.files:
        try:
            data = await blob_store(store).blob(file.blob)
        except Fatal as exc:
            raise SendFatal(str(exc)) from exc
        except Exception as exc:  # the store did not answer: nothing was sent yet
            raise SendRetryable(f"could not read file {file.name!r}: {exc}") from exc
        if data is None:
            raise SendFatal(f"file {file.name!r} (blob {file.blob[:12]}) is not in the store")
        uploads.append(Upload(kind=file.kind, name=file.name, mime=file.mime, data=data))
    sent = await adapter.send_files(message, uploads)
    metrics.labelled(metrics.MEDIA, adapter.platform, "sent").inc(len(uploads))
    return sent


class Downloads:
    """``ctx.download``: an inbound file's bytes through its platform's file API."""

    def __init__(self, adapters: Mapping[str, Adapter]) -> None:
        self.adapters = adapters

    async def __call__(self, event: Event, attachment: Attachment, cap: int) -> bytes:
        adapter = self.adapters.get(event.platform)
        if adapter is None:
            raise DownloadError(f"no enabled platform {event.platform!r} to download from")
        try:
            data: bytes = await adapter.download(attachment, event.message_id, cap)
        except DownloadError as exc:
            metrics.labelled(metrics.MEDIA, event.platform, "download_failed").inc()
            log.warning(
                "media.download_failed", key=event.key, kind=attachment.kind, error=str(exc)
            )
            raise
        metrics.labelled(metrics.MEDIA, event.platform, "downloaded").inc()
        log.info("media.downloaded", key=event.key, kind=attachment.kind, size=len(data))
        return data


__all__ = [
    "DEFAULT_MAX_DOWNLOAD",
    "Downloads",
    "File",
    "FileSpec",
    "deliver",
    "parts",
    "store_files",
]
