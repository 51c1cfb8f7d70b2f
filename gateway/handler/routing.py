"""Routers: which handler answers an event, and the middlewares around it.

The shape follows aiogram 3: handlers are registered by decorator, routers nest with
``include``, and a middleware is ``async (handler, event, data) -> result`` that calls
``handler(event, data)`` to continue. ``data["ctx"]`` is the handler's :class:`Context`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.events import Event, Kind
from tether.gateway.handler.tool import DEFAULT_TIMEOUT

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context
    from tether.gateway.handler.python_tool import ToolFunction
    from tether.gateway.handler.tool import Tool

Handler = Callable[["Context"], Awaitable[None]]
NextHandler = Callable[[Event, dict[str, Any]], Awaitable[Any]]
Middleware = Callable[[NextHandler, Event, dict[str, Any]], Awaitable[Any]]
Filter = Callable[[Event], bool]

_TEXT_KINDS = frozenset({Kind.MESSAGE, Kind.COMMAND})


@dataclass(frozen=True, slots=True)
class Route:
    handler: Handler
    matches: Filter
    name: str
    #: Only the bot's admins may run it (enforced by the access middleware).
    admin: bool = False
    #: A command's line in ``/help`` and the platforms' command menus.
    description: str = ""


class Router:
    """Which handler answers an event: the first route that matches wins.

    Routes are tried in registration order, then the included routers (``include``) in
    order, then this router's ``fallback`` (text and commands only). A plugin is a module
    holding a Router, named in the config (``plugins: ["mybot.handlers:router"]``); the
    gateway includes plugins in order, before the built-in agent, so a plugin's command
    shadows the agent's.

    Registration, by decorator: ``command("name", admin=False)`` for ``/name args``,
    ``text(regex)`` for messages, ``callback("prefix")`` for button presses,
    ``on(Kind.EDIT, when=...)`` for any kind of event,
    ``fallback`` for whatever nothing else matched, ``middleware`` for an aiogram-shaped
    ``async (handler, event, data)`` wrapper around every handler this router (and its
    children) resolves; ``data["ctx"]`` is the :class:`Context`. Example::

        router = Router()

        @router.command("roll")
        async def roll(ctx: Context) -> None:
            await ctx.reply(str(await ctx.step("roll", lambda: random.randint(1, 6))))
    """

    def __init__(self, name: str = "router") -> None:
        self.name = name
        self._routes: list[Route] = []
        self._children: list[Router] = []
        self._middlewares: list[Middleware] = []
        self._fallback: Handler | None = None
        self._tools: list[Tool] = []

    # -- registration -------------------------------------------------------------

    def command(
        self, *names: str, admin: bool = False, description: str | None = None
    ) -> Callable[[Handler], Handler]:
        """Match ``/name args`` (the adapter has already stripped ``@botname``).

        ``admin=True`` refuses everyone but ``access.admins`` (and the console).
        ``description`` is the command's line in ``/help`` and in the platforms'
        command menus (Telegram's, Discord's); by default the handler's docstring's
        first line. A command without either is answered but listed in neither menu.
        """
        wanted = frozenset(n.lower().lstrip("/") for n in names)

        def matches(event: Event) -> bool:
            return event.kind is Kind.COMMAND and event.command in wanted

        return self._register(
            matches, f"command:{','.join(sorted(wanted))}", admin=admin, description=description
        )

    def text(self, pattern: str | re.Pattern[str] | None = None) -> Callable[[Handler], Handler]:
        """Match text messages, optionally only those a regex finds something in."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern

        def matches(event: Event) -> bool:
            if event.kind is not Kind.MESSAGE or not event.text:
                return False
            return regex is None or regex.search(event.text) is not None

        return self._register(matches, f"text:{regex.pattern if regex else '*'}")

    def on(self, kind: Kind, when: Filter | None = None) -> Callable[[Handler], Handler]:
        """Match any event of ``kind`` (edits, callbacks, cron fires…), with an optional filter."""

        def matches(event: Event) -> bool:
            return event.kind is kind and (when is None or when(event))

        return self._register(matches, f"on:{kind.value}")

    def callback(self, prefix: str = "") -> Callable[[Handler], Handler]:
        """Match button presses whose data starts with ``prefix`` (``"vote:"`` takes
        ``vote:yes`` and ``vote:no``); the data is ``ctx.event.text``. See docs/buttons.md."""

        def matches(event: Event) -> bool:
            return event.kind is Kind.CALLBACK and event.text.startswith(prefix)

        return self._register(matches, f"callback:{prefix}*")

    def fallback(self, handler: Handler) -> Handler:
        """Answer text and commands nothing else matched (after included routers)."""
        self._fallback = handler
        return handler

    def middleware(self, middleware: Middleware) -> Middleware:
        """Wrap every handler this router (and its children) resolves."""
        self._middlewares.append(middleware)
        return middleware

    def tool(
        self,
        fn: ToolFunction | None = None,
        *,
        idempotent: bool = False,
        name: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        approval: bool = False,
    ) -> Any:
        """Offer an async function to the model as a tool (``@router.tool`` or
        ``@router.tool(idempotent=True, name=..., timeout=...)``); its schema comes from
        the signature and docstring, a ``ctx: Context`` parameter gets the context.
        ``idempotent`` promises that running it again after a crash is harmless; a call
        still running after ``timeout`` seconds (None: no limit of its own) is cancelled
        and the model told it may or may not have happened; ``approval=True`` makes
        each call wait for a person's approval (agent.tools.approvals): see docs/tools.md."""
        from tether.gateway.handler.python_tool import python_tool

        def decorator(function: ToolFunction) -> ToolFunction:
            tool = python_tool(
                function, name=name, idempotent=idempotent, timeout=timeout, approval=approval
            )
            self._tools.append(tool)
            return function

        return decorator(fn) if fn is not None else decorator

    def tools(self) -> list[Tool]:
        """Every tool of this router and its children, in registration order."""
        return [*self._tools, *(tool for child in self._children for tool in child.tools())]

    def include(self, router: Router) -> Router:
        self._children.append(router)
        return router

    def _register(
        self, matches: Filter, name: str, *, admin: bool = False, description: str | None = None
    ) -> Callable[[Handler], Handler]:
        def decorator(handler: Handler) -> Handler:
            about = description if description is not None else _first_line(handler.__doc__)
            route = Route(handler, matches, f"{name}->{handler.__qualname__}", admin, about)
            self._routes.append(route)
            return handler

        return decorator

    def commands(self, agent: str | None = None) -> list[tuple[str, Route]]:
        """Every ``/name`` this router (and its children) answers, in resolution order,
        each with its route: what ``/help`` and the command menus list (a shadowed name
        is listed once). ``agent``: that agent's, where agents have routers of their own."""
        found: dict[str, Route] = {}
        for route in self._routes:
            if route.name.startswith("command:"):
                for name in route.name[len("command:") :].split("->")[0].split(","):
                    found.setdefault(name, route)
        for child in self._children:
            for name, route in child.commands(agent):
                found.setdefault(name, route)
        return list(found.items())

    # -- resolution ---------------------------------------------------------------

    def resolve(self, event: Event) -> tuple[Route, list[Middleware]] | None:
        """The route for ``event`` and the middlewares to run around it, outermost first.

        Every route of the whole tree is tried before any fallback: a fallback takes what
        no route of any router matched. So a plugin's fallback (included first) does not
        swallow ``/help``, ``/link`` or the other built-in commands included after it;
        among fallbacks, the first included wins, as routes do (a plugin's, then the
        built-in agent's). A plugin replaces a built-in command by registering it."""
        return self._route_for(event) or self._fallback_for(event)

    def _route_for(self, event: Event) -> tuple[Route, list[Middleware]] | None:
        for route in self._routes:
            if route.matches(event):
                return route, list(self._middlewares)
        for child in self._children:
            found = child._route_for(event)
            if found:
                route, inner = found
                return route, [*self._middlewares, *inner]
        return None

    def _fallback_for(self, event: Event) -> tuple[Route, list[Middleware]] | None:
        if event.kind not in _TEXT_KINDS:
            return None
        for child in self._children:
            found = child._fallback_for(event)
            if found:
                route, inner = found
                return route, [*self._middlewares, *inner]
        if self._fallback:
            fallback = Route(
                self._fallback, lambda _e: True, f"fallback->{self._fallback.__qualname__}"
            )
            return fallback, list(self._middlewares)
        return None


def _first_line(doc: str | None) -> str:
    lines = (doc or "").strip().splitlines()
    return lines[0].strip() if lines else ""


async def call(route: Route, middlewares: list[Middleware], ctx: Context) -> Any:
    """Run ``route`` through ``middlewares`` (outermost first); ``data`` carries the
    handler's ``ctx`` and the resolved ``route``."""

    async def innermost(_event: Event, data: dict[str, Any]) -> Any:
        return await route.handler(data["ctx"])

    handler: NextHandler = innermost
    for middleware in reversed(middlewares):
        handler = _bind(middleware, handler)
    return await handler(ctx.event, {"ctx": ctx, "route": route})


def _bind(middleware: Middleware, inner: NextHandler) -> NextHandler:
    async def bound(event: Event, data: dict[str, Any]) -> Any:
        return await middleware(inner, event, data)

    return bound
