"""Model Markdown as Telegram renders it: MarkdownV2, converted by telegramify-markdown.

Models write CommonMark-ish Markdown (``**bold**``, ``[a link](url)``, lists, fenced
code). Telegram's MarkdownV2 is another language: ``*bold*``, and every one of
``_*[]()~`>#+-=|{}.!`` outside an entity escaped, or the whole message is refused. So a
``format="markdown"`` reply is converted here, at send time, by telegramify-markdown (a
parser, not regexes: it escapes what MarkdownV2 needs and nothing else). If Telegram
still refuses it, the send falls back to :func:`readable` — the same conversion's plain
text (no markup characters, no backslashes) — as before.

Telegram's 4,096-unit limit counts the text after its entities are parsed, so
:func:`shown_length` measures what the converted message will show (headings gain an
emoji, a rule becomes a line of dashes), not the Markdown source.
"""

from __future__ import annotations

import re

import telegramify_markdown
from telegramify_markdown.config import RenderConfig
from telegramify_markdown.entity import MessageEntity

from tether.gateway.splitting import utf16_len

_RESERVED = re.compile(r"([_*\[\]()~`>#+\-=|{}.!\\])")
#: One config for Tether, apart from the library's global one (which a plugin may change).
_CONFIG = RenderConfig.isolated()


def formatted(text: str, fmt: str) -> str:
    """The text to send for a reply of format ``fmt``: Markdown converted, the rest as is."""
    return to_markdown_v2(text) if fmt == "markdown" else text


def to_markdown_v2(text: str) -> str:
    """Model Markdown as a MarkdownV2 string for ``parse_mode="MarkdownV2"``.

    Markup with nothing to show (a lone fence, an empty link) converts to an empty
    message, which Telegram refuses: such a text is sent as written, every reserved
    character escaped.
    """
    plain, entities = telegramify_markdown.convert(text, config=_CONFIG)
    if not plain.strip():
        return _RESERVED.sub(r"\\\1", text)
    return telegramify_markdown.entities_to_markdownv2(plain, _unnested(entities))


def _unnested(entities: list[MessageEntity]) -> list[MessageEntity]:
    """Without entities inside another of the same type (``*a *b* c*`` from odd model
    text): MarkdownV2 cannot write those, and they look no different without."""
    kept = []
    for index, entity in enumerate(entities):
        end = entity.offset + entity.length
        if not any(
            other.type == entity.type
            and other.offset <= entity.offset
            and end <= other.offset + other.length
            and (other.offset, -other.length, seen) < (entity.offset, -entity.length, index)
            for seen, other in enumerate(entities)
        ):
            kept.append(entity)
    return kept


def readable(text: str) -> str:
    """The text a person would read, without markup: for the plain-text fallback."""
    try:
        plain, _entities = telegramify_markdown.convert(text, config=_CONFIG)
    except Exception:  # a converter bug must not cost the reply: send the source
        return text
    return plain if plain.strip() else text


def shown_length(text: str) -> int:
    """UTF-16 length of what Telegram shows for ``text`` once converted (for splitting).

    Short texts are measured by their source, which Telegram shows no longer than it is
    give or take a few symbols; only a text near the limit pays for a conversion.
    """
    length = utf16_len(text)
    if length < 2048:
        return length
    try:
        plain, _entities = telegramify_markdown.convert(text, config=_CONFIG)
    except Exception:
        return length
    return max(length, utf16_len(plain))
