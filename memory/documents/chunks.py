"""A document cut into chunks a search can return whole: about :data:`SIZE` characters,
cut at paragraph ends where it can, each chunk carrying the Markdown headings it sits
under, so "Refunds" found in a chunk says which section of which file it came from.

A paragraph longer than a chunk is cut at line ends, then at spaces, then anywhere: any
text, however written, becomes chunks no longer than :data:`SIZE` plus its heading line.
"""

from __future__ import annotations

import re

#: Characters of one chunk's body.
SIZE = 1200
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


def chunks(text: str, size: int = SIZE) -> list[str]:
    """``text``'s chunks, in order (none for blank text)."""
    out: list[str] = []
    headings: list[str] = []
    body: list[str] = []

    def flush() -> None:
        joined = "\n\n".join(body).strip()
        body.clear()
        if not joined:
            return
        where = " > ".join(headings)
        for piece in _cut(joined, size):
            out.append(f"{where}\n{piece}" if where else piece)

    for paragraph in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
        first = paragraph.strip().split("\n", 1)[0]
        heading = _HEADING.match(first)
        if heading:
            flush()
            level = len(heading.group(1))
            headings[level - 1 :] = [heading.group(2)]
            rest = paragraph.strip().split("\n", 1)[1:]
            paragraph = rest[0] if rest else ""
        if body and sum(len(p) for p in body) + len(paragraph) > size:
            flush()
        if paragraph.strip():
            body.append(paragraph.strip())
    flush()
    return out


def _cut(text: str, size: int) -> list[str]:
    """``text`` in pieces of at most ``size`` characters, cut at the latest paragraph,
    line or word end that fits."""
    pieces: list[str] = []
    while len(text) > size:
        window = text[:size]
        cut = max(window.rfind("\n\n"), window.rfind("\n"), window.rfind(" "))
        if cut <= 0:
            cut = size
        pieces.append(text[:cut].strip())
        text = text[cut:].strip()
    if text:
        pieces.append(text)
    return [piece for piece in pieces if piece]
