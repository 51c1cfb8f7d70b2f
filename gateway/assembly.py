"""What a config assembles: the parts one configuration decides, built in one place.

:func:`assemble` makes the :class:`Parts` an event picks up when it starts (access
lists, the router with its plugins and the cron router, the jobs, the model client,
the flood limit) from a config; :func:`build_adapters` the platform adapters it
enables. The gateway calls both when it is built, and a reload calls the same two for
the new file and swaps what they made in through the gateway's own methods
(``Gateway.apply``, ``Gateway.replace_adapter``), so start and reload can never build
the object graph two ways.

Kept apart from :mod:`tether.gateway.app` so the run order there stays readable, and so
the CLI's inspection commands can build a router without a gateway.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from tether.adapters.base import Adapter
from tether.config.schema import Settings
from tether.errors import GatewayError
from tether.extras import require
from tether.gateway.agent.cron import with_jobs
from tether.gateway.builtin.access import Access, access_router
from tether.gateway.builtin.commands import commands_router
from tether.gateway.builtin.echo import echo_router
from tether.gateway.builtin.export import export_router
from tether.gateway.builtin.people import people_router
from tether.gateway.builtin.presses import unhandled_presses
from tether.gateway.builtin.stop import stop_router
from tether.gateway.core.stop import Turns
from tether.gateway.core.throttle import Throttle
from tether.gateway.handler.plugins import check_job_handlers, import_router
from tether.gateway.handler.routing import Router
from tether.gateway.llm.client import LLM
from tether.gateway.ops.alerts import Accept, Alerts, Reading
from tether.gateway.ops.watchdog import Watchdog
from tether.gateway.tasks.commands import task_commands
from tether.gateway.tasks.run import task_router
from tether.gateway.tools import approvals
from tether.memory.store import Store
from tether.scheduler.jobs import Job, check_targets, load_jobs


@dataclass(frozen=True, slots=True)
class Parts:
    """What one configuration decides that an event picks up when it starts."""

    settings: Settings
    access: Access
    #: The whole router: access first, then /stop, cron fires, plugins, the agent.
    router: Router
    jobs: list[Job]
    llm: LLM | None
    throttle: Throttle


def assemble(
    settings: Settings,
    store: Store,
    turns: Turns,
    *,
    router: Router | None = None,
    plugins: Sequence[Router] = (),
    platforms: Collection[str] | None = None,
) -> Parts:
    """The parts ``settings`` make, or the error that names what is wrong.

    ``router`` replaces the plugins and the built-in agent (an embedder's own); the
    access middleware, ``/stop`` and the cron router still go around it. ``plugins``
    are routers included like the config's, after them and before the built-in
    commands and agent (a test's handlers, ``tether.testing.Bot``). ``platforms``
    are the enabled ones every job's ``deliver`` must name (None: not checked, for a
    gateway without a scheduler). Raises ``GatewayError`` for a plugin and ``JobError``
    for a job; a model client is made, not yet prepared (that may wait on the network).
    """
    access = Access(settings.access, store)
    routes = _guarded(router or load_router(settings, access, plugins), access, turns)
    check_job_handlers(settings)
    jobs = load_jobs(settings)
    if platforms is not None:
        check_targets(jobs, platforms)
        approvals.check_target(settings, platforms)
    return Parts(
        settings=settings,
        access=access,
        router=with_jobs(routes, store),  # cron fires: text, handler, prompt, reminders
        jobs=jobs,
        llm=LLM(settings) if settings.llm else None,
        throttle=Throttle(settings.access.rate_limit),
    )


def load_router(
    settings: Settings, access: Access | None = None, plugins: Sequence[Router] = ()
) -> Router:
    """Plugins in config order (then ``plugins`` given in code), then the commands every
    agent has, then the built-in agent; ``access`` tells ``/help`` who is an admin. With
    ``agents:``, each agent's own (:class:`~tether.gateway.agent.accounts.AgentsRouter`)."""
    if settings.agents:
        from tether.gateway.agent.accounts import AgentsRouter

        return AgentsRouter(settings, lambda agent: load_router(agent, access, plugins))
    root = Router("root")
    for index, spec in enumerate(settings.plugins):
        root.include(import_router(f"plugins[{index}]", spec))
    for router in plugins:
        root.include(router)
    root.include(commands_router(settings, root, access.is_admin if access else None))
    root.include(people_router())  # /link, /unlink
    root.include(export_router())  # /export
    root.include(task_commands())  # /tasks, /cancel ID
    root.include(task_router())  # task events: the agent at work (gateway/tasks/run.py)
    if settings.agent.handler == "llm":
        # The agent's prompt, tool loop, streaming and vision are imported for it only.
        from tether.gateway.agent.chat import llm_router

        root.include(llm_router(settings))
    else:
        root.include(echo_router(settings.agent))
    root.include(unhandled_presses())  # a button press nothing above took: logged
    return root


def connected(adapter: Adapter) -> Callable[[], float]:
    """``tether_platform_connected{platform}``'s reading of one adapter."""
    return lambda: float(adapter.connected)


def _guarded(router: Router, access: Access, turns: Turns) -> Router:
    """The access middleware around everything, with the built-in access commands first."""
    root = Router("gateway")
    root.middleware(access)
    root.include(access_router(access))
    root.include(stop_router(turns))  # /stop: never shadowed, never queued (core/stop.py)
    root.include(router)
    return root


def require_extras(settings: Settings) -> None:
    """Every extra the config turns on is installed, or a ``GatewayError`` names the key
    and the ``pip install`` (:mod:`tether.extras`): before anything is built, so ``tether
    check``, ``run`` and ``chat`` say it in one line."""
    needed: list[tuple[str, str]] = []
    every: list[tuple[str, object]] = [("platforms", settings.platforms)]
    every += [(f"agents[{i}].platforms", a.platforms) for i, a in enumerate(settings.agents)]
    for where, platforms in every:
        for name in ("telegram", "discord", "feishu", "slack"):
            if getattr(platforms, name, None):
                needed.append((name, f"{where}.{name}"))
    if settings.memory.store.startswith(("postgresql://", "postgres://")):
        needed.append(("postgres", "memory.store"))
    if settings.llm is not None:
        needed.append(("llm", "llm"))
    if settings.memory.embeddings is not None:
        needed.append(("llm", "memory.embeddings"))
    if settings.mcp.servers:
        needed.append(("mcp", "mcp.servers"))
    if settings.http.enabled and (settings.http.ui.enabled or settings.platforms.web.enabled):
        needed.append(("console", "http.ui" if settings.http.ui.enabled else "platforms.web"))
    for extra, key in needed:
        require(extra, key)


def build_adapters(settings: Settings, *, console: bool | None = None) -> dict[str, Adapter]:
    """The adapters the config enables (``console`` overrides ``platforms.console.enabled``),
    after :func:`require_extras`."""
    require_extras(settings)
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
    if settings.platforms.slack:
        from tether.adapters.slack.adapter import SlackAdapter  # slack-sdk only when enabled

        adapters["slack"] = SlackAdapter(settings.platforms.slack)
    if settings.platforms.web.enabled:
        from tether.adapters.web import WebAdapter, check_web

        check_web(settings)
        adapters["web"] = WebAdapter()
    if settings.agents:  # an adapter per agent account, named like ``telegram@alice``
        from tether.gateway.agent.accounts import build_agent_adapters

        adapters.update(build_agent_adapters(settings))
    return adapters


def build_watchdog(
    settings: Settings,
    store: Store,
    adapters: Callable[[], Mapping[str, Adapter]],
    accept: Accept,
    running: Callable[[], Mapping[str, tuple[str, float]]],
    *,
    check_target: bool,
    readings: Callable[[], Iterable[Reading]] = tuple,
) -> Watchdog | None:
    """The gateway watching itself (``ops.watchdog``), telling ``ops.alerts.deliver``;
    ``readings`` are the checks of parts above the watchdog's floor (the model's keys)."""
    ops = settings.ops
    target = ops.alerts.target
    if check_target and target and target.platform not in adapters():
        raise GatewayError(f"ops.alerts.deliver: platform {target.platform!r} is not enabled")
    if not ops.watchdog.enabled:
        return None
    alerts = Alerts(ops.alerts, store, accept)
    return Watchdog(
        ops.watchdog,
        store,
        adapters,
        alerts,
        running,
        settings.pipeline.handler_timeout,
        readings=readings,
    )


async def readiness(
    store: Store, adapters: Mapping[str, Adapter], watchdog: Watchdog | None
) -> list[str]:
    """What keeps a gateway from serving (``/readyz``): a store that does not answer, a
    platform not connected, a tripped watchdog check; empty when it is ready."""
    problems = []
    try:
        await store.ping()
    except Exception as exc:
        problems.append(f"store unreachable: {type(exc).__name__}: {exc}")
    problems += [
        f"{name} not connected" + (f": {a.problem}" if a.problem else "")
        for name, a in adapters.items()
        if not a.connected
    ]
    return problems + (watchdog.problems() if watchdog else [])
