"""Markdown (what models write) → Slack's mrkdwn, and escaping for plain text. Pure.

Slack does not render Markdown: ``**bold**`` shows its asterisks, ``[a](url)`` shows
brackets, and a bare ``<`` or ``&`` can start a link or an entity that eats text. So:
``&``, ``<`` and ``>`` are escaped everywhere (Slack asks for exactly these three, inside
code too); outside code, ``**b**``/``__b__`` → ``*b*``, ``*i*``/``_i_`` → ``_i_``,
``~~s~~`` → ``~s~``, ``[t](url)`` → ``<url|t>``, ``# Heading`` → ``*Heading*``, and
``- item``/``* item`` → ``• item``. Code spans and fences keep their text as written.
Anything else passes through: the converter is total (Hypothesis checks it never raises).
"""

from __future__ import annotations

import re

#: Fenced blocks first, then inline code: their insides are not converted.
_CODE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]+`", re.DOTALL)
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+|mailto:[^)\s]+)\)")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_ITALIC = re.compile(r"(?<![\w*])\*(?=[^\s*])([^*\n]+?)(?<=[^\s*])\*(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+", re.MULTILINE)
#: Bold is parked on this character while italics are converted, so ``*b*`` stays bold.
_PARKED = "\x00"
#: Links are parked as ``\x01{n}\x01`` while the rest is escaped and converted.
_LINKED = "\x01"


def escape(text: str) -> str:
    """Plain text as Slack shows it literally: only ``&``, ``<`` and ``>`` are special."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str) -> str:
    """``markdown`` as mrkdwn, code left as written (escaped). Never raises."""
    out: list[str] = []
    last = 0
    for found in _CODE.finditer(markdown):
        out.append(_prose(markdown[last : found.start()]))
        out.append(escape(found.group(0)))
        last = found.end()
    out.append(_prose(markdown[last:]))
    return "".join(out)


def _prose(text: str) -> str:
    text = text.replace(_PARKED, "").replace(_LINKED, "")
    links: list[str] = []

    def park_link(found: re.Match[str]) -> str:
        label = escape(found.group(1)).replace("|", "¦")
        links.append(f"<{escape(found.group(2))}|{label}>")
        return f"{_LINKED}{len(links) - 1}{_LINKED}"

    text = _LINK.sub(park_link, text)
    text = escape(text)
    text = _HEADING.sub(lambda m: f"{_PARKED}{m.group(1)}{_PARKED}", text)
    text = _BOLD.sub(lambda m: f"{_PARKED}{m.group(1) or m.group(2)}{_PARKED}", text)
    text = _BULLET.sub(lambda m: f"{m.group(1)}• ", text)
    text = _ITALIC.sub(lambda m: f"_{m.group(1)}_", text)
    text = _STRIKE.sub(lambda m: f"~{m.group(1)}~", text)
    text = re.sub(f"{_LINKED}(\\d+){_LINKED}", lambda m: links[int(m.group(1))], text)
    return text.replace(_PARKED, "*")
