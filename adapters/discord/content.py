"""What a Discord message says, as text and files, for :mod:`.normalize`.

``content`` is not all a person sends. A forward carries the forwarded message in
``message_snapshots`` (its own ``content`` stays empty unless a comment was added); a
sticker or a poll has no text at all; a bot's or webhook's message may be nothing but
embeds. Each becomes text a handler or a model can read, and forwarded files join the
message's own attachments:

- the message's own text first, then each forwarded message under a line
  ``[forwarded message]``;
- ``[sticker: name]`` for each sticker, which is also an attachment of kind ``sticker``;
- ``[poll: question — answer, answer]``;
- embeds only when the message has nothing else to say (an embed beside text is the
  preview of a link in that text): each one's title, description and ``name: value``
  fields, or ``[embed: url]``.

Mentions read as discord.py's ``clean_content`` shows them: ``<@id>`` → ``@name``,
``<@&id>`` → ``@role``, ``<#id>`` → ``#channel``. Unlike ``clean_content``, ``@everyone``
and ``@here`` stay as typed: Tether's replies never ping them (:mod:`.send` allows user
mentions only), so a zero-width space inside would only garble what the model reads.

Text and attachments are read as strictly as the rest of the message (a wrong type is a
:class:`~.read.Malformed` naming the field); stickers, polls and embeds, which only
describe, are read as far as they go.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.adapters.discord import read
from tether.adapters.discord.servers import Server
from tether.events import Attachment

FORWARDED = "[forwarded message]"
_MENTION = re.compile(r"<(@[!&]?|#)([0-9]{15,20})>")
_CDN = "https://cdn.discordapp.com"
#: A sticker's ``format_type`` → the file extension of its image (as discord.py's
#: ``StickerItem.url`` builds it): PNG, APNG, Lottie, GIF.
_STICKER_FILES = {1: "png", 2: "png", 3: "json", 4: "gif"}


@dataclass(frozen=True, slots=True)
class Body:
    """A message's text (possibly empty) and its files."""

    text: str
    attachments: list[Attachment]


def body(data: Mapping[str, Any], server: Server | None, mentioned: list[tuple[str, str]]) -> Body:
    """The message's own text and files, then those of each message it forwards.

    ``mentioned`` is the message's ``(id, name)`` per mentioned user (:func:`mentioned`),
    which names ``<@id>`` when the cache does not know the person.
    """
    own = _says(data, server, mentioned, "")
    parts, files = [own.text], list(own.attachments)
    for index, snapshot in enumerate(forwarded(data)):
        where = f"message_snapshots[{index}].message."
        users = mentioned_users(snapshot.get("mentions"), in_server=server is not None)
        said = _says(snapshot, server, users, where)
        parts.append(f"{FORWARDED}\n{said.text}" if said.text else FORWARDED)
        files.extend(said.attachments)
    return Body("\n".join(part for part in parts if part), files)


def forwarded(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The messages a forward carries: ``message_snapshots[].message``."""
    snapshots = read.items(data.get("message_snapshots"), "message_snapshots")
    return [
        read.mapping(
            read.mapping(item, f"message_snapshots[{index}]").get("message"),
            f"message_snapshots[{index}].message",
        )
        for index, item in enumerate(snapshots)
    ]


def mentioned_users(value: Any, *, in_server: bool) -> list[tuple[str, str]]:
    """``(id, display name)`` of each mentioned user, in payload order. In a server a
    mention carries the member's nickname; elsewhere the user's own name counts."""
    found: list[tuple[str, str]] = []
    for item in value if isinstance(value, list) else []:
        user_id = read.id_or_none(item.get("id")) if isinstance(item, Mapping) else None
        if user_id is None:
            continue
        member = item.get("member") if in_server else None
        found.append((user_id, read.display_name(item, member)))
    return found


def attachment(item: Any, where: str = "attachments[]") -> Attachment:
    """One uploaded file; its ``content_type`` says whether it is an image, video or audio."""
    item = read.mapping(item, where)
    mime = read.optional_text(item.get("content_type"), f"{where}.content_type")
    major = (mime or "").split("/", 1)[0]
    return Attachment(
        kind=major if major in ("image", "video", "audio") else "file",
        file_id=read.snowflake(item.get("id"), f"{where}.id"),
        url=read.optional_text(item.get("url"), f"{where}.url"),
        mime=mime,
        size=read.optional_integer(item.get("size"), f"{where}.size"),
        name=read.optional_text(item.get("filename"), f"{where}.filename"),
    )


def clean(content: str, server: Server | None, mentioned: Iterable[tuple[str, str]]) -> str:
    """Mentions as a client shows them; a person is named by the cache, else by the
    message's own mention list (the first entry for an id wins)."""
    names = dict(reversed(list(mentioned)))

    def name(match: re.Match[str]) -> str:
        sigil, ident = match[1], str(int(match[2]))
        if sigil == "#":
            found = server.channel(ident) if server else None
            return f"#{found.name}" if found is not None else "#deleted-channel"
        if sigil == "@&":
            role = server.role(ident) if server else None
            return f"@{role.name}" if role is not None else "@deleted-role"
        member = server.member_name(ident) if server else None
        if member is None:
            member = names.get(ident)
        return f"@{member}" if member is not None else "@deleted-user"

    return _MENTION.sub(name, content)


# -- one message (the message itself, or one it forwards) ------------------------------


def _says(
    data: Mapping[str, Any], server: Server | None, mentioned: list[tuple[str, str]], where: str
) -> Body:
    text = clean(read.text(data.get("content"), f"{where}content"), server, mentioned)
    files = [
        attachment(item, f"{where}attachments[]")
        for item in read.items(data.get("attachments"), f"{where}attachments")
    ]
    stickers = _stickers(data.get("sticker_items") or data.get("stickers"))
    parts = [text, *(_sticker_line(sticker) for sticker in stickers), _poll(data.get("poll"))]
    if not any(parts) and not files and not stickers:
        parts.append(clean(_embeds(data.get("embeds")), server, mentioned))
    return Body("\n".join(part for part in parts if part), files + stickers)


def _stickers(value: Any) -> list[Attachment]:
    found: list[Attachment] = []
    for item in value if isinstance(value, list) else []:
        if not isinstance(item, Mapping):
            continue
        sticker_id = read.id_or_none(item.get("id"))
        name = _text_at(item, "name")
        if sticker_id is None and not name:
            continue
        form = item.get("format_type")
        extension = _STICKER_FILES.get(form) if type(form) is int else None
        url = f"{_CDN}/stickers/{sticker_id}.{extension}" if sticker_id and extension else None
        found.append(Attachment(kind="sticker", file_id=sticker_id, url=url, name=name or None))
    return found


def _sticker_line(sticker: Attachment) -> str:
    return f"[sticker: {sticker.name}]" if sticker.name else "[sticker]"


def _poll(value: Any) -> str:
    """``[poll: question — answer, answer]``; an answer's emoji comes before its text."""
    if not isinstance(value, Mapping):
        return ""
    answers = value.get("answers")
    labels = []
    for answer in answers if isinstance(answers, list) else []:
        emoji = _text_at(answer, "poll_media", "emoji", "name")
        if emoji and _at(answer, "poll_media", "emoji", "id") is not None:
            emoji = f":{emoji}:"  # a server's own emoji: its name is all there is to read
        label = " ".join(part for part in (emoji, _text_at(answer, "poll_media", "text")) if part)
        if label:
            labels.append(label)
    question = _text_at(value, "question", "text")
    said = " — ".join(part for part in (question, ", ".join(labels)) if part)
    return f"[poll: {said}]" if said else "[poll]"


def _embeds(value: Any) -> str:
    lines: list[str] = []
    for embed in value if isinstance(value, list) else []:
        said = [_text_at(embed, "title"), _text_at(embed, "description")]
        fields = embed.get("fields") if isinstance(embed, Mapping) else None
        for field in fields if isinstance(fields, list) else []:
            pair = (_text_at(field, "name"), _text_at(field, "value"))
            said.append(": ".join(part for part in pair if part))
        said = [line for line in said if line]
        url = _text_at(embed, "url")
        lines.extend(said or ([f"[embed: {url}]"] if url else []))
    return "\n".join(lines)


def _at(value: Any, *path: str) -> Any:
    """The value at ``path`` through nested objects, or None where one is missing."""
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _text_at(value: Any, *path: str) -> str:
    """The string at ``path`` (stripped), or "" when there is none."""
    found = _at(value, *path)
    return found.strip() if isinstance(found, str) else ""
