"""Server-rendered HTML: the Jinja2 environment (autoescaped) and the page helper every
view uses, which adds what the layout needs (the CSRF token, the navigation)."""

from __future__ import annotations

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

    def page(
        self, request: web.Request, template: str, *, status: int = 200, **context: Any
    ) -> web.Response:
        html = self.env.get_template(template).render(
            csrf=request.get(CSRF, ""),
            path=request.path,
            chat_enabled=self.chat,
            **context,
        )
        response = web.Response(text=html, content_type="text/html", status=status)
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; img-src 'self' data:; style-src 'self';"
            " frame-ancestors 'none'; form-action 'self'"
        )
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response
