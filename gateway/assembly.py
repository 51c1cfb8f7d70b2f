"""What the config assembles before the gateway runs: the handler router (plugins, the
built-in commands, the agent) and the platform adapters it enables.

Kept apart from :mod:`tether.gateway.app` so the run order there stays readable, and so
the CLI's inspection commands can build a router without a gateway.
"""

from __future__ import annotations

from collections.abc import Callable

from tether.adapters.base import Adapter
from tether.config.schema import Settings
from tether.errors import GatewayError
from tether.gateway import plugin_path
from tether.gateway.access import Access, access_router
from tether.gateway.agents import echo_router
from tether.gateway.commands import commands_router
from tether.gateway.presses import unhandled_presses
from tether.gateway.routing import Router
from tether.gateway.stop_command import stop_router


def load_router(settings: Settings, access: Access | None = None) -> Router:
    """Plugins in config order, then the commands every agent has, then the built-in
    agent; ``access`` tells ``/help`` who is an admin. With ``agents:``, each agent's own
    (:class:`~tether.gateway.multiagent.AgentsRouter`)."""
    if settings.agents:
        from tether.gateway.multiagent import AgentsRouter

        return AgentsRouter(settings, lambda agent: load_router(agent, access))
    root = Router("root")
    for index, spec in enumerate(settings.plugins):
        root.include(_import_router(f"plugins[{index}]", spec))
    root.include(commands_router(settings, root, access.is_admin if access else None))
    if settings.agent.handler == "llm":
        # The agent's prompt, tool loop, streaming and vision are imported for it only.
        from tether.gateway.llm_agent import llm_router

        root.include(llm_router(settings))
    else:
        root.include(echo_router(settings.agent))
    root.include(unhandled_presses())  # a button press nothing above took: logged
    return root


def _connected(adapter: Adapter) -> Callable[[], float]:
    return lambda: float(adapter.connected)


def _guarded(router: Router, access: Access) -> Router:
    """The access middleware around everything, with the built-in access commands first."""
    root = Router("gateway")
    root.middleware(access)
    root.include(access_router(access))
    root.include(stop_router())  # /stop: never shadowed, never queued (gateway/stop.py)
    root.include(router)
    return root


def _import_router(key: str, spec: str) -> Router:
    """The router ``spec`` names; any failure is one line naming ``key`` (``plugins[0]``):
    a plugin's own bug at import is the operator's to see, not a traceback through ours."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise GatewayError(f"{key}: {spec!r} should be 'package.module:router'")
    try:
        module = plugin_path.import_module(module_name)
    except ImportError as exc:
        raise GatewayError(f"{key}: cannot import {module_name!r}: {exc}") from None
    except Exception as exc:
        raise GatewayError(
            f"{key}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None
    router = getattr(module, attr, None)
    if not isinstance(router, Router):
        raise GatewayError(f"{key}: {spec!r} is not a gateway.Router")
    return router


def build_adapters(settings: Settings, *, console: bool | None = None) -> dict[str, Adapter]:
    """The adapters the config enables (``console`` overrides ``platforms.console.enabled``)."""
    adapters: dict[str, Adapter] = {}
    use_console = settings.platforms.console.enabled if console is None else console
    if use_console:
        from tether.adapters.console import ConsoleAdapter

        # With agents:, the first agent answers the console (AgentsRouter): its name shows.
        name = settings.agents[0].name if settings.agents else settings.agent.name
        adapters["console"] = ConsoleAdapter(settings.platforms.console.user, name=name)
    if settings.platforms.telegram:
        from tether.adapters.telegram import TelegramAdapter

        adapters["telegram"] = TelegramAdapter(settings.platforms.telegram)
    if settings.platforms.discord:
        from tether.adapters.discord import DiscordAdapter  # imports discord.py only when enabled

        adapters["discord"] = DiscordAdapter(settings.platforms.discord)
    if settings.platforms.feishu:
        from tether.adapters.feishu import FeishuAdapter  # lark-oapi takes ~2 s to import

        adapters["feishu"] = FeishuAdapter(settings.platforms.feishu)
    if settings.platforms.web.enabled:
        from tether.adapters.web import WebAdapter, check_web

        check_web(settings)
        adapters["web"] = WebAdapter()
    if settings.agents:  # an adapter per agent account, named like ``telegram@alice``
        from tether.gateway.multiagent import build_agent_adapters

        adapters.update(build_agent_adapters(settings))
    return adapters
