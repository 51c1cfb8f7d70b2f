"""The web console (``http.ui``) and the web chat page, on the gateway's own HTTP server.

Server-rendered HTML (Jinja2, autoescaped) with a little JavaScript for what must move
by itself (the overview's refresh, the live stream, the chat); charts are inline SVG
drawn on the server. No Node build step, no chart library: the templates and the two
static files ship in the wheel.

All of it is one aiohttp sub-application under ``/ui`` with its own guard
(:mod:`.auth`): a session for every route but the login page and the static files, a
CSRF token for every request that changes something, an allowed ``Host`` for all of
them. The server binds to ``http.host`` (127.0.0.1 by default); reach it from elsewhere
through a TLS proxy, which the YAML must name (``http.ui.behind_tls_proxy``) before the
console listens anywhere but on loopback (:func:`~tether.config.console.exposure_problem`).

Routes::

    GET  /ui/login  POST /ui/login  POST /ui/logout
    GET  /ui/  (overview)     GET /ui/api/overview
    GET  /ui/events?key=&conversation=&status=    GET /ui/event?key=
    GET  /ui/dead             POST /ui/dead/retry
    GET  /ui/approvals
    GET  /ui/tasks            POST /ui/tasks/cancel
    GET  /ui/conversations    GET /ui/conversation?c=    POST /ui/conversation/fact
    GET  /ui/search?q=&c=
    GET  /ui/jobs             POST /ui/jobs/run
    GET  /ui/live             GET /ui/api/live  (server-sent events)
    GET  /ui/chat             POST /ui/api/chat/send    GET /ui/api/chat/log?chat=
"""

from __future__ import annotations

import structlog
from aiohttp import web

from tether.config.console import exposure_problem
from tether.errors import GatewayError
from tether.gateway.web.api import Actions
from tether.gateway.web.auth import Auth, middleware, secure
from tether.gateway.web.host import ConsoleHost
from tether.gateway.web.live import LiveHub
from tether.gateway.web.pages import Pages
from tether.gateway.web.render import STATIC, Renderer

__all__ = ["ConsoleHost", "mount_console"]

log = structlog.get_logger("tether.console")


def mount_console(app: web.Application, host: ConsoleHost) -> None:
    """Add ``/ui`` to ``app`` (before the server starts); needs ``http.ui.enabled``.
    Refused (:class:`GatewayError`) where the console would cross a network in plain
    text: ``tether check`` says the same before."""
    config = host.settings.http.ui
    problem = exposure_problem(host.settings.http.host, config)
    if problem:
        raise GatewayError(problem)
    auth = Auth(config, lambda: host.store)
    render = Renderer(chat=host.settings.platforms.web.enabled)
    pages, actions, hub = Pages(host, render), Actions(host, auth, render), LiveHub()
    ui = web.Application(middlewares=[middleware(auth)])
    get, post = ui.router.add_get, ui.router.add_post
    get("/login", actions.login_page)
    post("/login", actions.login)
    post("/logout", actions.logout)
    get("/", pages.overview)
    get("/api/overview", pages.overview_api)
    get("/events", pages.events)
    get("/event", pages.event)
    get("/dead", pages.dead)
    post("/dead/retry", actions.retry_dead)
    get("/approvals", pages.approvals)
    get("/tasks", pages.tasks)
    post("/tasks/cancel", actions.cancel_task)
    get("/conversations", pages.conversations)
    get("/conversation", pages.conversation)
    get("/search", pages.search)
    post("/conversation/fact", actions.fact)
    get("/jobs", pages.jobs)
    post("/jobs/run", actions.run_job)
    get("/live", pages.live)
    get("/api/live", hub.stream)
    get("/chat", pages.chat)
    post("/api/chat/send", actions.chat_send)
    get("/api/chat/log", actions.chat_log)
    ui.router.add_static("/static/", STATIC, append_version=True)
    app.router.add_get("/ui", _to_overview)  # before the sub-app, which would 404 it
    app.add_subapp("/ui", ui)
    app.on_response_prepare.append(secure)  # every /ui response, whoever answered it
    app.on_shutdown.append(hub.close)  # open live streams end with the server
    hub.attach()
    log.info(
        "console.mounted",
        path="/ui",
        chat=render.chat,
        host=host.settings.http.host,
        behind_tls_proxy=config.behind_tls_proxy,
        allowed_hosts=config.allowed_hosts,
    )


async def _to_overview(_request: web.Request) -> web.Response:
    raise web.HTTPFound("/ui/")
