"""What the ``llm`` agent does with the files a person sends.

Images go to the model as OpenAI image content parts (``data:`` URLs, fetched with
``ctx.download``) when the model the turn is routed to is marked vision-capable
(``llm.models.NAME.vision: true``). Everything it cannot use — a voice note, a video,
a document, or an image for a model without vision — gets a plain reply saying so,
so that a message is never met with silence; the text beside it is still answered.
The history keeps a marker (``[photo]``), never the bytes.

Fallback models are asked with the same parts: give them ``vision: true`` too, or a
fallback answer to an image fails with the API's refusal.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from tether import metrics
from tether.errors import DownloadError
from tether.events import Attachment
from tether.gateway.handler.context import Context, turn_of
from tether.memory import tokens

_IMAGE_KINDS = frozenset({"photo", "image"})
#: What to call each kind of file in a reply.
_NAMES = {
    "voice": "voice note",
    "audio": "audio file",
    "video": "video",
    "video_note": "video message",
    "animation": "animation",
    "sticker": "sticker",
    "media": "video",
}


@dataclass
class Seen:
    """The turn's files: image parts for the model, notes for the person, and the text
    the history keeps for the person's turn."""

    parts: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    memory_text: str = ""


def is_image(attachment: Attachment) -> bool:
    if attachment.kind in _IMAGE_KINDS:
        return True
    return attachment.kind != "sticker" and (attachment.mime or "").startswith("image/")


def _name(attachment: Attachment) -> str:
    if is_image(attachment):
        return "image"
    return _NAMES.get(attachment.kind, "file")


def vision_model(ctx: Context, text: str) -> str | None:
    """The model this turn is routed to, if it can see images; else None."""
    llm = ctx.llm._require()
    event = ctx.event
    first = llm.candidates(
        platform=event.platform,
        conversation=ctx.conversation,
        command=event.command,
        prompt_tokens=tokens.count(text),
    )[0]
    return first if llm.model(first).vision else None


async def look(ctx: Context, text: str) -> Seen:
    """Download the images a vision model can use; a note for every other file."""
    seen = Seen(memory_text=text)
    attachments = ctx.event.attachments
    if not attachments:
        return seen
    model = vision_model(ctx, text) if any(is_image(a) for a in attachments) else None
    markers = []
    for attachment in attachments:
        name = _name(attachment)
        markers.append(f"[{attachment.kind}]")
        if not is_image(attachment):
            seen.notes.append(
                f"I got your {name}, but I can only read text and look at images"
                f" — I can't use a {name}. Could you write it out instead?"
            )
            continue
        if model is None:
            seen.notes.append(
                "I got your image, but the model I answer with here can't see images."
                " Could you describe it in words?"
            )
            continue
        try:
            data = await ctx.download(attachment, max_bytes=turn_of(ctx).media.max_image_bytes)
        except DownloadError as exc:
            ctx.log.warning("vision.download_failed", kind=attachment.kind, error=str(exc))
            seen.notes.append(f"I couldn't fetch your image ({exc}).")
            continue
        mime = attachment.mime if (attachment.mime or "").startswith("image/") else "image/jpeg"
        url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
        seen.parts.append({"type": "image_url", "image_url": {"url": url}})
        metrics.labelled(metrics.MEDIA, ctx.event.platform, "to_model").inc()
        ctx.log.info("vision.image", model=model, size=len(data))
    for _note in seen.notes:
        metrics.labelled(metrics.MEDIA, ctx.event.platform, "unusable").inc()
    if seen.notes:
        ctx.log.info("vision.unusable", notes=len(seen.notes))
    seen.memory_text = " ".join([text, *markers]).strip()
    return seen


def attach(messages: list[dict[str, Any]], seen: Seen) -> None:
    """Put the turn's images into its user message (the last one) as content parts."""
    if not seen.parts or not messages:
        return
    last = messages[-1]
    text = str(last.get("content") or "")
    last["content"] = [{"type": "text", "text": text}, *seen.parts] if text else seen.parts
