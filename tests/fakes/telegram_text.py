"""What the fake Telegram does with message text: parse it as Telegram does, and keep
every message's current text and every edit.

:func:`parse_markdown_v2` follows the rules of the Bot API's MarkdownV2 (and TDLib's
parser, which enforces them): outside entities the characters ``_*[]()~`>#+-=|{}.!``
must be escaped with ``\\``; inside ``code`` and ``pre`` only `````` ` `````` and ``\\``;
inside a link's ``(...)`` only ``)`` and ``\\``. A reserved character left bare, or an
entity that is never closed, is refused the way Telegram refuses it (``400 Bad Request:
can't parse entities: ...``), so a wrong conversion fails a test instead of passing it.

:class:`Texts` is the chat as a person sees it: each sent message's parsed text, updated
by ``editMessageText``, and a log of the edits with their times.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

RESERVED = frozenset("_*[]()~`>#+-=|{}.!")
#: Some of the emoji Telegram takes as a reaction (its ReactionTypeEmoji list).
REACTIONS = frozenset(
    "👍👎❤🔥🥰👏😁🤔🤯😱🤬😢🎉🤩🙏👌🤡🥱😍🐳💯🤣⚡🏆💔😐🍓🍾😈😴😭🤓👻👀🙈😇🤝✍🤗🫡💅🤪🗿🆒🦄😘🙊😎👾😡"
)
#: Telegram's limit on a message's text after entities are parsed (UTF-16 code units).
TEXT_LIMIT = 4096


class Refused(ValueError):
    """What Telegram answers with a 400 (the ``description`` without ``Bad Request:``)."""


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@dataclass
class _Open:
    kind: str
    at: int  # index in the source (Telegram reports byte offsets; close enough here)
    offset: int  # UTF-16 offset in the parsed text
    begin: int  # index in the parsed text
    language: str | None = None


def parse_markdown_v2(text: str) -> tuple[str, list[dict[str, Any]]]:
    """``text`` as Telegram shows it and its entities; :class:`Refused` where Telegram
    would answer "can't parse entities"."""
    out: list[str] = []
    offset = 0  # UTF-16 length of ``out``
    entities: list[dict[str, Any]] = []
    stack: list[_Open] = []
    quote: tuple[int, int] | None = None  # (offset, source index) of an open blockquote
    expandable = False  # it began with ``**>``: ``||`` at the end of a line closes it
    n = len(text)
    i = 0

    def emit(chars: str) -> None:
        nonlocal offset
        out.append(chars)
        offset += utf16(chars)

    def peek(k: int) -> str:
        return text[i + k] if i + k < n else ""

    while i < n:
        c = text[i]
        inside = stack[-1].kind if stack else None
        line_start = i == 0 or text[i - 1] == "\n"
        if line_start and inside not in ("code", "pre"):
            if c == ">" or text.startswith("**>", i):
                if quote is None:
                    quote, expandable = (offset, i), c == "*"
                i += 1 if c == ">" else 3
                continue
            if quote is not None:
                _close_quote(entities, quote, offset, out)
                quote = None
        if c == "\\" and i + 1 < n and 0 < ord(text[i + 1]) <= 126:
            emit(text[i + 1])
            i += 2
            continue
        reserved = "`" if inside in ("code", "pre") else RESERVED
        if c not in reserved:
            emit(c)
            i += 1
            continue
        if (
            expandable
            and quote is not None
            and text.startswith("||", i)
            and (i + 2 == n or peek(2) == "\n")
        ):
            i += 2  # the end of an expandable blockquote
            continue
        if inside is not None and _closes(inside, text, i):
            top = stack.pop()
            if top.kind in ("underline", "spoiler"):
                i += 1
            elif top.kind == "pre":
                i += 2
            entity: dict[str, Any] = {"type": top.kind, "offset": top.offset}
            entity["length"] = offset - top.offset
            if top.kind == "text_link":
                if peek(1) != "(":
                    raise Refused(f"Can't find end of the entity starting at byte offset {top.at}")
                i += 2
                url: list[str] = []
                start = i
                while i < n and text[i] != ")":
                    if text[i] == "\\" and i + 1 < n and 0 < ord(text[i + 1]) <= 126:
                        url.append(text[i + 1])
                        i += 2
                        continue
                    url.append(text[i])
                    i += 1
                if i >= n:
                    raise Refused(f"Can't find end of a URL at byte offset {start}")
                entity["type"], entity["url"] = "text_link", "".join(url)
            if top.kind == "pre" and top.language:
                entity["language"] = top.language
            if entity["length"]:
                entities.append(entity)
            i += 1
            continue
        at = i
        language = None
        if c == "_":
            kind = "underline" if peek(1) == "_" else "italic"
            i += 1 if kind == "underline" else 0
        elif c == "*":
            kind = "bold"
        elif c == "~":
            kind = "strikethrough"
        elif c == "|" and peek(1) == "|":
            kind = "spoiler"
            i += 1
        elif c == "[":
            kind = "text_link"
        elif c == "`" and text.startswith("```", i):
            kind = "pre"
            i += 3
            end = i
            while end < n and not text[end].isspace() and text[end] != "`":
                end += 1
            if end != i and end < n and text[end] != "`":
                language = text[i:end]
                i = end
            if i < n and text[i] in "\r\n":
                i += 2 if text[i : i + 2] in ("\r\n", "\n\r") else 1
            i -= 1
        elif c == "`":
            kind = "code"
        else:
            raise Refused(
                f"Character '{c}' is reserved and must be escaped with the preceding '\\'"
            )
        stack.append(_Open(kind, at, offset, len(out), language))
        i += 1
    if stack:
        raise Refused(f"Can't find end of the entity starting at byte offset {stack[-1].at}")
    if quote is not None:
        _close_quote(entities, quote, offset, out)
    return "".join(out), sorted(entities, key=lambda e: (e["offset"], -e["length"]))


def _closes(kind: str, text: str, i: int) -> bool:
    """Whether the reserved character at ``i`` ends the innermost open ``kind``."""
    c, after = text[i], text[i + 1 : i + 3]
    if kind == "bold":
        return c == "*"
    if kind == "italic":
        return c == "_" and not after.startswith("_")
    if kind == "underline":
        return c == "_" and after.startswith("_")
    if kind == "strikethrough":
        return c == "~"
    if kind == "spoiler":
        return c == "|" and after.startswith("|")
    if kind == "text_link":
        return c == "]"
    if kind == "code":
        return c == "`"
    return c == "`" and after == "``"  # pre


def _close_quote(
    entities: list[dict[str, Any]], quote: tuple[int, int], offset: int, out: list[str]
) -> None:
    start = quote[0]
    end = offset - (1 if out and out[-1].endswith("\n") else 0)
    if end > start:
        entities.append({"type": "blockquote", "offset": start, "length": end - start})


def rendered(text: str, parse_mode: str | None) -> str:
    """The text a person sees for ``text`` sent with ``parse_mode`` (HTML is not checked)."""
    if parse_mode == "MarkdownV2":
        return parse_markdown_v2(text)[0]
    return text


@dataclass
class Edit:
    chat_id: Any
    message_id: int
    text: str  # as shown
    at: float = field(default_factory=time.monotonic)


@dataclass
class Texts:
    """Every message the bot sent, as shown now, and every edit made to one."""

    shown: dict[tuple[Any, int], str] = field(default_factory=dict)
    edits: list[Edit] = field(default_factory=list)
    #: The inline keyboard each message shows now (None: none).
    markup: dict[tuple[Any, int], Any] = field(default_factory=dict)
    #: deleteMessage, setMessageReaction and pins, as the chat shows them.
    deleted: list[tuple[Any, int]] = field(default_factory=list)
    reactions: dict[tuple[Any, int], list[str]] = field(default_factory=dict)
    pinned: dict[Any, list[int]] = field(default_factory=dict)

    def posted(self, chat_id: Any, message_id: int, text: str, markup: Any = None) -> None:
        self.shown[chat_id, message_id] = text
        self.markup[chat_id, message_id] = markup

    def delete(self, params: dict[str, Any]) -> bool:
        """``deleteMessage`` of one of the bot's messages (the fake knows no others)."""
        key = (params.get("chat_id"), int(str(params.get("message_id"))))
        if key not in self.shown:
            raise Refused("message to delete not found")
        del self.shown[key]
        self.markup.pop(key, None)
        self.deleted.append(key)
        return True

    def react(self, params: dict[str, Any]) -> bool:
        """``setMessageReaction``: emoji reactions from Telegram's own set only."""
        key = (params.get("chat_id"), int(str(params.get("message_id"))))
        if key in self.deleted:
            raise Refused("message to react not found")
        reaction = params.get("reaction") or []
        if isinstance(reaction, str):
            reaction = json.loads(reaction)
        emoji = [str(r.get("emoji")) for r in reaction if r.get("type") == "emoji"]
        if any(e not in REACTIONS for e in emoji):
            raise Refused("REACTION_INVALID")
        self.reactions[key] = emoji
        return True

    def pin(self, params: dict[str, Any], *, pinned: bool) -> bool:
        chat, message_id = params.get("chat_id"), int(str(params.get("message_id")))
        pins = self.pinned.setdefault(chat, [])
        if pinned and message_id not in pins:
            pins.append(message_id)
        elif not pinned and message_id in pins:
            pins.remove(message_id)
        return True

    def in_chat(self, chat_id: Any) -> list[str]:
        """The chat's messages from the bot, oldest first, as a person sees them now."""
        return [text for (chat, _), text in sorted(self.shown.items()) if chat == chat_id]

    def edit(self, params: dict[str, Any]) -> dict[str, Any]:
        """``editMessageText``: the message as it is after the edit, or :class:`Refused`."""
        chat_id, message_id = params.get("chat_id"), params.get("message_id")
        if not isinstance(message_id, int) and not str(message_id).isdigit():
            raise Refused("message identifier is not specified")
        key = (chat_id, int(str(message_id)))
        if key not in self.shown:
            raise Refused("message to edit not found")
        text = str(params.get("text") or "")
        if not text:
            raise Refused("message text is empty")
        try:
            shown = rendered(text, params.get("parse_mode"))
        except Refused as exc:
            raise Refused(f"can't parse entities: {exc}") from exc
        if not shown.strip():
            raise Refused("message text is empty")
        if utf16(shown) > TEXT_LIMIT:
            raise Refused("MESSAGE_TOO_LONG")
        markup = params.get("reply_markup")
        if isinstance(markup, str):
            markup = json.loads(markup)
        if shown == self.shown[key] and markup == self.markup.get(key):
            raise Refused(
                "message is not modified: specified new message content and reply markup"
                " are exactly the same as a current content and reply markup of the message"
            )
        self.shown[key] = shown
        self.markup[key] = markup
        self.edits.append(Edit(chat_id, key[1], shown))
        chat = {"id": chat_id, "type": "private" if str(chat_id).isdigit() else "supergroup"}
        return {"message_id": key[1], "date": int(time.time()), "chat": chat, "text": shown}
