"""Feishu message kinds that are neither text nor files, as text a handler can read.

A card, a shared chat or contact, a merged forward, a location, a poll, a task, a
calendar invite or a video call is something a person sent on purpose, so it becomes a
message instead of a skip: the text it carries where it has any (a card's title and
text elements, a forward's title and preview) and otherwise a short description in
brackets (``[shared chat: Team]``, ``[poll: Lunch? — noodles, rice]``). The payload
itself stays in ``Event.raw`` for a handler that wants more.

A part of :mod:`.normalize`, beside :mod:`.content` (text, rich text and files).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tether.adapters.feishu.content import post_content, resolve_mentions

#: What Feishu puts in a merged forward's ``content``: a placeholder, not the messages.
FORWARD_PLACEHOLDER = "Merged and Forwarded Message"
#: Card keys that hold no text a person reads (links, callbacks' values, styling).
_CARD_SKIP = frozenset(
    {"tag", "href", "url", "multi_url", "value", "img_key", "icon", "config", "confirm"}
)
#: Card keys whose string values are text a person reads.
_CARD_TEXT = frozenset({"title", "subtitle", "text", "content"})
#: Cards nest, but not deeper than this; anything below is not read.
_CARD_DEPTH = 24

Names = Mapping[str, str]


def describe(message_type: str, data: Mapping[str, Any], names: Names) -> str:
    """The text of one message of a described kind; ``""`` for other kinds."""
    describer = _KINDS.get(message_type)
    return describer(data, names) if describer else ""


def card_text(data: Mapping[str, Any], names: Names) -> str:
    """An interactive card's title and text elements, one per line, buttons as ``[label]``.

    Received cards come in two shapes: simplified, with ``elements`` as paragraphs of
    rich-text elements (read like a post), or the card JSON as it was sent (``header``,
    ``elements`` or ``body.elements`` of divs, markdown, columns and actions).
    """
    elements = data.get("elements")
    if isinstance(elements, list) and elements and all(isinstance(p, list) for p in elements):
        title = data.get("title")
        post = {"title": title if isinstance(title, str) else "", "content": elements}
        return post_content(post, names).text or "[card]"
    lines: list[str] = []
    _card_texts(data, "", lines, _CARD_DEPTH)
    return resolve_mentions("\n".join(lines), names) or "[card]"


def _card_texts(node: Any, key: str, lines: list[str], depth: int) -> None:
    if depth <= 0:
        return
    if isinstance(node, str):
        if key in _CARD_TEXT and node.strip():
            lines.append(node.strip())
    elif isinstance(node, list):
        for item in node:
            _card_texts(item, key, lines, depth - 1)
    elif isinstance(node, dict):
        if node.get("tag") == "button":
            label: list[str] = []
            _card_texts(node.get("text"), "text", label, depth - 1)
            lines.append(f"[{' '.join(label)}]" if label else "[button]")
            return
        for child_key, child in node.items():
            if child_key not in _CARD_SKIP:
                _card_texts(child, str(child_key), lines, depth - 1)


def _bracketed(label: str, detail: str) -> str:
    return f"[{label}: {detail}]" if detail else f"[{label}]"


def _text(value: Any) -> str:
    """A field meant to be text: strings as they are, numbers written out, else nothing."""
    if isinstance(value, str):
        return value.strip()
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else ""


def _shared_chat(data: Mapping[str, Any], names: Names) -> str:
    chat = data.get("chat_name") or data.get("body") or data.get("chat_id")
    return _bracketed("shared chat", _text(chat or data.get("share_chat_id")))


def _shared_user(data: Mapping[str, Any], names: Names) -> str:
    return _bracketed("shared contact", _text(data.get("user_name") or data.get("user_id")))


def _merge_forward(data: Mapping[str, Any], names: Names) -> str:
    """The forward's title and the preview Feishu includes; the messages themselves
    must be fetched (``GET /im/v1/messages/{message_id}``)."""
    head = _bracketed("forwarded messages", _text(data.get("title")))
    preview = _text(data.get("content"))
    return f"{head}\n{preview}" if preview and preview != FORWARD_PLACEHOLDER else head


def _location(data: Mapping[str, Any], names: Names) -> str:
    where = _text(data.get("name"))
    latitude, longitude = _text(data.get("latitude")), _text(data.get("longitude"))
    if latitude and longitude:
        where = f"{where} ({latitude}, {longitude})".strip()
    return _bracketed("location", where)


def _poll(data: Mapping[str, Any], names: Names) -> str:
    options = data.get("options")
    choices = [_text(o) for o in options] if isinstance(options, list) else []
    question = _text(data.get("topic"))
    listed = ", ".join(c for c in choices if c)
    return _bracketed("poll", f"{question} — {listed}" if listed else question)


def _task(data: Mapping[str, Any], names: Names) -> str:
    summary = data.get("summary")
    text = post_content(summary, names).text if isinstance(summary, dict) else ""
    return _bracketed("task", " ".join(text.split()))


def _calendar(data: Mapping[str, Any], names: Names) -> str:
    return _bracketed("calendar event", _text(data.get("summary")))


def _video_call(data: Mapping[str, Any], names: Names) -> str:
    return _bracketed("video call", _text(data.get("topic")))


_KINDS: dict[str, Callable[[Mapping[str, Any], Names], str]] = {
    "interactive": card_text,
    "share_chat": _shared_chat,
    "share_user": _shared_user,
    "merge_forward": _merge_forward,
    "location": _location,
    "vote": _poll,
    "todo": _task,
    "share_calendar_event": _calendar,
    "calendar": _calendar,
    "general_calendar": _calendar,
    "video_chat": _video_call,
}
