"""A document's text: Markdown and plain text as written, PDF through ``pypdf`` (the
``documents`` extra), page by page. A file that cannot be read raises
:class:`Unreadable` with the reason, which the index logs and skips."""

from __future__ import annotations

from pathlib import Path

#: The suffixes read as text; ``.pdf`` is the other kind.
TEXT = {".md", ".markdown", ".txt", ".text", ".rst"}
KINDS = TEXT | {".pdf"}
INSTALL = "pip install 'tether-gateway[documents]'"


class Unreadable(Exception):
    """This file cannot be indexed (the message says why)."""


def read(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in TEXT:
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise Unreadable(f"cannot read it: {exc.strerror or exc}") from exc
    if suffix == ".pdf":
        return _pdf(path)
    raise Unreadable(f"not a kind indexed ({', '.join(sorted(KINDS))})")


def _pdf(path: Path) -> str:
    try:
        from pypdf import PdfReader
        from pypdf.errors import PyPdfError
    except ImportError as exc:
        raise Unreadable(f"a PDF needs pypdf: {INSTALL}") from exc
    try:
        reader = PdfReader(path)
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, OSError, ValueError, KeyError, TypeError) as exc:
        raise Unreadable(f"not a readable PDF: {type(exc).__name__}: {exc}") from exc
    return "\n\n".join(page.strip() for page in pages if page.strip())
