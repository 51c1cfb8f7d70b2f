"""Feishu/Lark message content → plain text and files, without the SDK.

A received message's ``content`` is a JSON string whose shape depends on
``message_type``; handlers want text and a list of files. Mentions arrive as
``@_user_N`` placeholders in the text (and as ``at`` elements in rich text) that
only the event's ``mentions`` list resolves to names.

A part of :mod:`.normalize`, kept apart because the shapes of ``content`` are many and
change with Feishu's clients, while the event around them does not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from tether.events import Attachment

#: Files a handler can fetch with the message id and this key (messages/{id}/resources).
_FILE_KINDS = {
    "image": "image",
    "file": "file",
    "audio": "audio",
    "media": "video",
    "sticker": "sticker",
}
_MENTION_KEY = re.compile(r"@_user_\d+|@_all")


class Content(NamedTuple):
    text: str
    attachments: list[Attachment]


def mention_names(mentions: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``{"@_user_1": "Tom", ...}`` from an event's ``message.mentions``."""
    names: dict[str, str] = {}
    for mention in mentions:
        key = mention.get("key")
        if isinstance(key, str):
            names[key] = str(mention.get("name") or "")
    return names


def resolve_mentions(text: str, names: Mapping[str, str]) -> str:
    """Replace ``@_user_N`` placeholders by ``@Name`` (``@_all`` by ``@all``)."""

    def name(match: re.Match[str]) -> str:
        key = match[0]
        if key == "@_all":
            return "@all"
        return f"@{names[key]}" if names.get(key) else key

    return _MENTION_KEY.sub(name, text)


def parse(message_type: str, content: str, names: Mapping[str, str]) -> Content:
    """The text and files of one received message; empty text for kinds without any."""
    try:
        data = json.loads(content) if content else {}
    except ValueError:
        return Content("", [])
    if not isinstance(data, dict):
        return Content("", [])
    if message_type == "text":
        return Content(resolve_mentions(str(data.get("text") or ""), names), [])
    if message_type == "post":
        return post_content(data, names)
    kind = _FILE_KINDS.get(message_type)
    if kind is None:
        return Content("", [])
    key = data.get("image_key") if message_type == "image" else data.get("file_key")
    if not isinstance(key, str) or not key:
        return Content("", [])
    name = data.get("file_name")
    return Content("", [Attachment(kind=kind, file_id=key, name=name or None)])


def post_content(data: Mapping[str, Any], names: Mapping[str, str]) -> Content:
    """Rich text → plain text (paragraphs on lines, links as ``text (url)``) and its files.

    Received posts are ``{"title", "content": [[element, ...], ...]}``; posts as they
    are sent (and in some events) are wrapped in a locale, ``{"zh_cn": {...}}``.
    """
    body: Mapping[str, Any] = data
    if "content" not in data:
        body = next((v for v in data.values() if isinstance(v, dict) and "content" in v), {})
    lines: list[str] = []
    attachments: list[Attachment] = []
    title = body.get("title")
    if isinstance(title, str) and title:
        lines.append(title)
    paragraphs = body.get("content")
    for paragraph in paragraphs if isinstance(paragraphs, list) else []:
        if not isinstance(paragraph, list):
            continue
        parts = [_element(e, names, attachments) for e in paragraph if isinstance(e, dict)]
        lines.append("".join(parts))
    return Content("\n".join(lines).strip(), attachments)


def _element(element: Mapping[str, Any], names: Mapping[str, str], files: list[Attachment]) -> str:
    tag = element.get("tag")
    text = str(element.get("text") or "")
    if tag in ("text", "md"):
        return resolve_mentions(text, names)
    if tag == "a":
        href = str(element.get("href") or "")
        return f"{text} ({href})" if text and href and text != href else text or href
    if tag == "at":
        user = str(element.get("user_id") or "")
        name = element.get("user_name") or names.get(user)
        return "@all" if user in ("all", "@_all") else f"@{name}" if name else user
    if tag == "img":
        if element.get("image_key"):
            files.append(Attachment(kind="image", file_id=str(element["image_key"])))
        return ""
    if tag == "media":
        if element.get("file_key"):
            files.append(Attachment(kind="video", file_id=str(element["file_key"])))
        return ""
    if tag == "emotion":
        return f":{element.get('emoji_type') or ''}:"
    if tag == "code_block":
        return f"\n```{element.get('language') or ''}\n{text.rstrip()}\n```\n"
    if tag == "hr":
        return "\n---\n"
    return text
