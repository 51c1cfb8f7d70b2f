"""Split long text at a platform's limit without breaking Markdown code fences.

Lines are packed greedily; a chunk that ends inside a ``` block is closed with a fence
and the next chunk reopens it with the same language, so each message renders on its
own. Lengths are measured by a caller-supplied function (Telegram counts UTF-16 units).
"""

from __future__ import annotations

from collections.abc import Callable

Length = Callable[[str], int]
_CLOSE = "\n```"


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, as Telegram counts it."""
    return len(text.encode("utf-16-le")) // 2


def split_text(text: str, limit: int | None, length: Length = len) -> list[str]:
    """``text`` as chunks of at most ``limit`` (by ``length``); ``[text]`` if it fits."""
    if limit is None or length(text) <= limit:
        return [text]
    if limit < 32:
        raise ValueError("limit too small to split with code fences")
    chunks: list[str] = []
    current = ""
    fence: str | None = None  # the opening line of the code block we are inside, if any
    piece_max = max(16, limit - 2 * len("```") - 40)
    for piece in _pieces(text, piece_max, length):
        toggles = piece.lstrip().startswith("```")
        after = (None if fence is not None else piece.strip()) if toggles else fence
        reserve = length(_CLOSE) if after is not None else 0
        if current and length(current + piece) + reserve > limit:
            chunks.append(_close(current, fence))
            current = fence + "\n" if fence is not None else ""
        current += piece
        fence = after
    if current.strip():
        chunks.append(current.rstrip("\n"))
    return [chunk for chunk in chunks if chunk.strip()]


def _close(chunk: str, fence: str | None) -> str:
    chunk = chunk.rstrip("\n")
    return chunk + _CLOSE if fence is not None else chunk


def _pieces(text: str, piece_max: int, length: Length) -> list[str]:
    """Lines (with their newline), long lines cut at spaces, long words cut anywhere."""
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        if length(line) <= piece_max:
            out.append(line)
            continue
        current = ""
        for word in line.split(" "):
            token = word if not current else " " + word
            if length(current + token) <= piece_max:
                current += token
                continue
            if current:
                out.append(current)
                token = " " + word
            while length(token) > piece_max:
                cut = _cut(token, piece_max, length)
                out.append(token[:cut])
                token = token[cut:]
            current = token
        if current:
            out.append(current)
    return out


def _cut(text: str, limit: int, length: Length) -> int:
    """The largest prefix length (in code points) whose measured length fits ``limit``."""
    cut = min(len(text), limit)
    while cut > 1 and length(text[:cut]) > limit:
        cut -= 1
    return cut
