"""Files out (attachments on Create Message) and in (the attachment's CDN URL).

The upload *is* the message: one multipart Create Message with the files and the same
``nonce`` + ``enforce_nonce`` as a text (derived from the outbox key), so a retry after
a timeout, or a restart after a SIGKILL while the request was in flight, returns the
message Discord already made instead of posting the files twice. Up to ten files ride
on one message. A voice note goes as an audio attachment (Discord's own voice messages
need a waveform only its clients record).
"""

from __future__ import annotations

import io
import time
from collections.abc import Sequence

import discord
import structlog

from tether.adapters.base import Sent
from tether.adapters.discord.send import (
    INTERACTION_MARGIN,
    _allowed_mentions,
    _edit_original,
    send_nonce,
)
from tether.adapters.media import check_stated, fetch
from tether.errors import DownloadError
from tether.events import Attachment, OutMessage
from tether.files import Upload
from tether.keys import first_of_answer

log = structlog.get_logger("tether.discord")

#: Seconds an upload may take before it counts as ambiguous (then retried, same nonce).
UPLOAD_TIMEOUT = 120.0


async def send_files(client: discord.Client, message: OutMessage, files: Sequence[Upload]) -> Sent:
    """One Create Message carrying ``files``, its text their caption.

    The first reply to ``/ask`` also completes the deferred response (an edit, so
    idempotent too) with the caption, while its token is valid; the files then follow
    in the channel. Without that edit the response would show "thinking…" forever."""
    interaction = message.meta.get("interaction")
    if (
        isinstance(interaction, dict)
        and first_of_answer(message.key)
        and float(interaction.get("expires", 0)) - INTERACTION_MARGIN > time.time()
    ):
        shown = message.model_copy(update={"text": message.text or "(files below)"})
        try:
            await _edit_original(client, interaction, shown)
            message = message.model_copy(update={"text": ""})  # the caption is shown
        except discord.HTTPException as exc:
            if exc.status not in (401, 404):
                raise
            log.warning("discord.interaction_expired", key=message.key)
    channel = client.get_partial_messageable(int(message.target.chat_id))
    uploads = [discord.File(io.BytesIO(upload.data), filename=upload.name) for upload in files]
    reference = None
    if message.reply_to and message.reply_to.isdigit():
        reference = discord.MessageReference(
            message_id=int(message.reply_to), channel_id=channel.id, fail_if_not_exists=False
        )
    sent = await channel.send(
        message.text or None,
        files=uploads,
        nonce=send_nonce(message.key),  # discord.py adds enforce_nonce=true
        allowed_mentions=_allowed_mentions(),
        reference=reference,  # type: ignore[arg-type]  # None: not a reply
    )
    return Sent(platform_id=str(sent.id))


async def download(attachment: Attachment, cap: int) -> bytes:
    """The attachment's bytes from its URL (Discord's CDN), at most ``cap``."""
    if not attachment.url:
        raise DownloadError(f"this {attachment.kind} has no URL to download")
    check_stated(attachment.size, cap)
    return await fetch(attachment.url, cap)
