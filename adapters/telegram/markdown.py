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

The converter (and its Markdown parser) is imported on the first Markdown reply, not
at start: a bot that never sends one keeps ~5 MB of resident memory (bench/idle.py).
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from tether.text import utf16_len

if TYPE_CHECKING:
    from telegramify_markdown.config import RenderConfig
    from telegramify_markdown.entity import MessageEntity

_RESERVED = re.compile(r"([_*\[\]()~`>#+\-=|{}.!\\])")


@functools.cache
def _config() -> RenderConfig:
    """One config for Tether, apart from the library's global one (which a plugin may
    change); made, with the import, on first use."""
    from telegramify_markdown.config import RenderConfig

    return RenderConfig.isolated()


def _convert(text: str) -> tuple[str, list[MessageEntity]]:
    import telegramify_markdown

    plain, entities = telegramify_markdown.convert(text, config=_config())
    return plain, list(entities)


def formatted(text: str, fmt: str) -> str:
    """The text to send for a reply of format ``fmt``: Markdown converted, the rest as is."""
    return to_markdown_v2(text) if fmt == "markdown" else text


def to_markdown_v2(text: str) -> str:
    """Model Markdown as a MarkdownV2 string for ``parse_mode="MarkdownV2"``.

    Markup with nothing to show (a lone fence, an empty link) converts to an empty
    message, which Telegram refuses: such a text is sent as written, every reserved
    character escaped.
    """
    import telegramify_markdown

    plain, entities = _convert(text)
    if not plain.strip():
        return _RESERVED.sub(r"\\\1", text)
    return telegramify_markdown.entities_to_markdownv2(plain, _uncrossed(_unnested(entities)))


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


def _uncrossed(entities: list[MessageEntity]) -> list[MessageEntity]:
    """Without an entity that crosses one kept before it (``*0||0*0||``: italic over
    ``0|0``, a spoiler over ``0*0``): MarkdownV2 marks only nest, so the two written
    out would leave one unclosed and Telegram would refuse the message. The first
    stays; the other's text is still shown, only unmarked."""
    kept: list[MessageEntity] = []
    for entity in entities:
        start, end = entity.offset, entity.offset + entity.length
        if all(
            end <= other.offset
            or other.offset + other.length <= start
            or (other.offset <= start and end <= other.offset + other.length)
            or (start <= other.offset and other.offset + other.length <= end)
            for other in kept
        ):
            kept.append(entity)
    return kept


def readable(text: str) -> str:
    """The text a person would read, without markup: for the plain-text fallback."""
    try:
        plain, _entities = _convert(text)
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
        plain, _entities = _convert(text)
    except Exception:
        return length
    return max(length, utf16_len(plain))
