"""Feishu/Lark message content → plain text and files, without the SDK.

A received message's ``content`` is a JSON string whose shape depends on
``message_type``; handlers want text and a list of files. Mentions arrive as
placeholders in the text (``@_user_1``, but also ``@_all`` and keys such as
``@_user_alice``) that only the event's ``mentions`` list resolves to names, and as
``at`` elements in rich text, which may name the person themselves — the ``mentions``
list can be empty even though a post @-mentions someone.

A part of :mod:`.normalize`, kept apart because the shapes of ``content`` are many and
change with Feishu's clients, while the event around them does not. Kinds that are
neither text nor files (cards, shared chats, forwards, …) are in :mod:`.described`.
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
#: A placeholder Feishu writes where someone was @-mentioned in a text.
_PLACEHOLDER = re.compile(r"@_[A-Za-z0-9_]+")
#: Who an ``at`` element names when it names everyone rather than a person.
EVERYONE = frozenset({"all", "@_all"})


class At(NamedTuple):
    """One ``at`` element of rich text. ``key`` is the placeholder (``@_user_1``) when
    the element refers to the event's ``mentions`` list; ``id`` is the open_id or
    user_id when the element names the person itself (Feishu does both); ``shown`` is
    how the text shows it (``@Name``), which a command after the bot's mention follows."""

    key: str
    id: str
    name: str
    shown: str


class Content(NamedTuple):
    text: str
    attachments: list[Attachment]
    #: The people the rich text @-mentions (``@all`` is not a person and is left out).
    at: tuple[At, ...] = ()


def load(content: str) -> dict[str, Any]:
    """A message's ``content`` string as the JSON object it should be; ``{}`` if not."""
    try:
        data = json.loads(content) if content else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def mention_names(mentions: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``{"@_user_1": "Tom", ...}`` from an event's ``message.mentions``."""
    names: dict[str, str] = {}
    for mention in mentions:
        key = mention.get("key")
        if isinstance(key, str):
            names[key] = str(mention.get("name") or "")
    return names


def resolve_mentions(text: str, names: Mapping[str, str]) -> str:
    """Replace each placeholder the ``mentions`` list names by ``@Name``, and ``@_all``
    by ``@all`` whatever the client called it; a placeholder without a name stays as it
    is, so nothing is invented."""

    def name(match: re.Match[str]) -> str:
        key = match[0]
        if key == "@_all":
            return "@all"
        return f"@{names[key]}" if names.get(key) else key

    return _PLACEHOLDER.sub(name, text)


def parse(message_type: str, data: Mapping[str, Any], names: Mapping[str, str]) -> Content:
    """The text and files of a text, post or file message; empty for other kinds."""
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
    return Content("", [Attachment(kind=kind, file_id=key, name=_name(name))])


def post_content(data: Mapping[str, Any], names: Mapping[str, str]) -> Content:
    """Rich text → plain text (paragraphs on lines, links as ``text (url)``), its files
    and the people its ``at`` elements name.

    Received posts are ``{"title", "content": [[element, ...], ...]}``; posts as they
    are sent (and in some events) are wrapped in a locale, ``{"zh_cn": {...}}``. Files
    attached to a post (a caption with a file, or files alone) come in a top-level
    ``files`` list, beside the paragraphs rather than inside them.
    """
    body: Mapping[str, Any] = data
    if "content" not in data:
        body = next((v for v in data.values() if isinstance(v, dict) and "content" in v), {})
    lines: list[str] = []
    attachments: list[Attachment] = []
    at: list[At] = []
    title = body.get("title")
    if isinstance(title, str) and title:
        lines.append(title)
    paragraphs = body.get("content")
    for paragraph in paragraphs if isinstance(paragraphs, list) else []:
        if not isinstance(paragraph, list):
            continue
        parts = [_element(e, names, attachments, at) for e in paragraph if isinstance(e, dict)]
        lines.append("".join(parts))
    files = body.get("files")
    for file in files if isinstance(files, list) else []:
        named = _post_file(file, attachments) if isinstance(file, dict) else ""
        if named:
            lines.append(named)
    return Content("\n".join(lines).strip(), attachments, tuple(at))


def _post_file(file: Mapping[str, Any], attachments: list[Attachment]) -> str:
    """A file beside a post's paragraphs becomes an attachment; a folder cannot be
    fetched as a file, so it is named in the text instead."""
    key = file.get("file_key")
    name = _name(file.get("file_name"))
    if file.get("is_folder") is True:
        return f"[folder: {name}]" if name else "[folder]"
    if isinstance(key, str) and key:
        attachments.append(Attachment(kind="file", file_id=key, name=name))
    return ""


def _element(
    element: Mapping[str, Any], names: Mapping[str, str], files: list[Attachment], at: list[At]
) -> str:
    tag = element.get("tag")
    text = str(element.get("text") or "")
    if tag in ("text", "md"):
        return resolve_mentions(text, names)
    if tag == "a":
        href = str(element.get("href") or "")
        return f"{text} ({href})" if text and href and text != href else text or href
    if tag == "at":
        return _at(element, names, at)
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
    if tag == "code":
        return f"`{text}`" if text else ""
    if tag == "code_block":
        return f"\n```{element.get('language') or ''}\n{text.rstrip()}\n```\n"
    if tag == "hr":
        return "\n---\n"
    return text


def _at(element: Mapping[str, Any], names: Mapping[str, str], at: list[At]) -> str:
    """``@Name`` for the text; the person (by placeholder or by id) for the mentions."""
    user = str(element.get("user_id") or "")
    own = str(element.get("open_id") or "")
    if user in EVERYONE or own in EVERYONE:
        return "@all"
    name = str(element.get("user_name") or names.get(user) or "")
    key = user if user.startswith("@_") else ""
    person = own or ("" if key else user)
    shown = f"@{name}" if name else f"@{person}" if person else key
    if shown:
        at.append(At(key=key, id=person, name=name, shown=shown))
    return shown


def _name(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
