"""Server-rendered HTML: the Jinja2 environment (autoescaped) and the page helper every
view uses, which adds what the layout needs (the CSRF token, the navigation)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web
from jinja2 import Environment, FileSystemLoader, select_autoescape

from tether.gateway.web.auth import CSRF
from tether.redaction import redactor

TEMPLATES = Path(__file__).resolve().parent / "templates"
STATIC = Path(__file__).resolve().parent / "static"


def when(epoch: float | None) -> str:
    """An epoch time as ``YYYY-MM-DD HH:MM:SS`` UTC (``-`` for none)."""
    if not epoch:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S")


#: Characters a snapshot shows as ``\\uXXXX``: bidi controls and other invisible format
#: characters, which would reorder or hide what is around them in a debugging view.
_INVISIBLE = re.compile("[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def snapshot(value: Any) -> str:
    """A dead letter's snapshot as indented JSON, escaped once (by the page's autoescape,
    not also by ``tojson``'s HTML escapes, which showed ``\\u003c`` for ``<``), with
    every character as itself except the invisible ones (:data:`_INVISIBLE`)."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return _INVISIBLE.sub(lambda found: f"\\u{ord(found[0]):04x}", text)


def scrub(value: Any) -> str:
    """What a page shows of stored text that may hold a secret (an error, a traceback):
    what the log would show, with every configured secret masked."""
    return redactor.scrub("" if value is None else str(value))


class Renderer:
    def __init__(self, *, chat: bool) -> None:
        self.chat = chat
        self.env = Environment(
            loader=FileSystemLoader(TEMPLATES),
            autoescape=select_autoescape(["html"]),
            enable_async=False,
        )
        self.env.filters["when"] = when
        self.env.filters["scrub"] = scrub
        self.env.filters["snapshot"] = snapshot

    def page(
        self, request: web.Request, template: str, *, status: int = 200, **context: Any
    ) -> web.Response:
        html = self.env.get_template(template).render(
            csrf=request.get(CSRF, ""),
            path=request.path,
            chat_enabled=self.chat,
            **context,
        )
        # The security headers are every /ui response's (auth.secure), not only a page's.
        return web.Response(text=html, content_type="text/html", status=status)
