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

from typing import Any

import structlog

from tether.adapters.base import Adapter, SendFatal, SendRetryable, Sent
from tether.adapters.media import DEFAULT_MAX_DOWNLOAD, DownloadError
from tether.errors import Fatal
from tether.events import Attachment, Event, OutMessage
from tether.files import OutFile, Upload
from tether.gateway import metrics
from tether.gateway.media_store import File, FileSpec, blob_store, store_files
from tether.gateway.splitting import split_text

log = structlog.get_logger("tether.media")

#: Files one message may carry where the platform groups them (Telegram's albums and
#: Discord's attachments both stop at 10).
GROUP_MAX = 10


def parts(message: OutMessage, adapter: Adapter) -> list[OutMessage]:
    """One reply with files → the messages to send, in order (keys not yet set).

    The text is the first part's caption when it fits ``adapter.caption_limit``; else it
    goes first as text (split at the text limit) and the files follow without one.
    """
    files = list(message.files)
    text = message.text
    limit = adapter.caption_limit
    out: list[OutMessage] = []
    caption = ""
    if text and (limit is None or (limit > 0 and adapter.text_length(text) <= limit)):
        caption = text
    elif text:
        for chunk in split_text(text, adapter.text_limit, adapter.text_length):
            quote = message.reply_to if not out else None
            out.append(message.model_copy(update={"text": chunk, "files": [], "reply_to": quote}))
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
    for group in groups:
        quote = message.reply_to if not out else None
        update: dict[str, Any] = {"text": caption, "files": group, "reply_to": quote}
        out.append(message.model_copy(update=update))
        caption = ""
    return out


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

    def __init__(self, adapters: dict[str, Adapter] | Any) -> None:
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
