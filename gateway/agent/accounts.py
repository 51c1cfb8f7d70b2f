"""Several agents in one gateway (``agents:``): an adapter per account, a router per agent.

Each agent's accounts are adapters named ``{platform}@{agent}`` (``telegram@alice``).
What an account receives is stamped with that name as the conversation's platform
(:class:`AccountInbox`), so everything keyed by the conversation is per agent without
the core knowing agents exist: memory and usage (``telegram@alice:-100:u7``), the lane
that orders it, and the adapter its replies leave through (``Target.platform``).
``Event.platform`` stays the plain platform, so ``access:`` patterns
(``telegram:-100``) and model routes by platform read as they always did.

Keys name the receiving account where two of our accounts can receive one platform
message: ``dc:{bot_id}:msg:{id}``, ``dc:{bot_id}:edit:{id}:{ts}``,
``fs:{app_id}:msg:{id}`` (Telegram's ``tg:{bot_id}:{update}`` always did). A store
written by a one-agent Tether holds the older ``dc:msg:{id}``; such a row still makes a
redelivery of that message a duplicate, for every account (:meth:`AccountInbox._legacy`).

:class:`AgentsRouter` resolves an event with its agent's own router (commands, persona,
the ``llm`` or ``echo`` agent), after the agent's own access rule, with the agent's
model routes and budgets (:class:`AgentLLM`) and ``agent`` bound in every log line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog
from prometheus_client import Counter

from tether import metrics
from tether.adapters.base import Adapter
from tether.config.agents import AgentSpec
from tether.config.schema import AgentConfig, Settings
from tether.events import Event
from tether.gateway.core.inbox import Inbox
from tether.gateway.handler.context import turn_of, use_llm
from tether.gateway.handler.routing import Middleware, Route, Router
from tether.gateway.llm.client import LLM, Completion
from tether.keys import is_relay, is_task

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context
    from tether.gateway.handler.tool import Tool

log = structlog.get_logger("tether.agents")

AGENT_EVENTS = Counter(
    "tether_agent_events_total", "Inbound events by receiving agent and source", ["agent", "source"]
)
AGENT_TOKENS = Counter(
    "tether_agent_llm_tokens_total", "LLM tokens (prompt + completion) by agent", ["agent"]
)
#: ``Event.meta`` key: the agent whose account received the event.
AGENT = "agent"
SEPARATOR = "@"


def account(platform: str, agent: str) -> str:
    """The adapter (and conversation platform) name of ``agent``'s account on ``platform``."""
    return f"{platform}{SEPARATOR}{agent}"


def split_account(name: str) -> tuple[str, str | None]:
    """``telegram@alice`` → ``("telegram", "alice")``; ``telegram`` → ``("telegram", None)``."""
    platform, sep, agent = name.partition(SEPARATOR)
    return platform, (agent if sep else None)


def agent_of(event: Event) -> str | None:
    return split_account(event.conversation.platform)[1]


# -- config -----------------------------------------------------------------------------


def agent_settings(settings: Settings, spec: AgentSpec) -> Settings:
    """The settings one agent runs with: its persona and handler as ``agent:``, its
    model routes over ``llm:``'s, its budgets over ``memory:``'s."""
    agent = AgentConfig(
        name=spec.name,
        persona=spec.persona,
        handler=spec.handler,
        group_sessions=spec.group_sessions,
        on_edit=spec.on_edit,
        mcp_tools=spec.mcp_tools,
        tasks=settings.agent.tasks,
    )
    update: dict[str, Any] = {"agent": agent, "agents": []}
    budgets = {
        "history_tokens": spec.history_tokens,
        "task_token_budget": spec.task_token_budget,
        "daily_token_budget": spec.daily_token_budget,
    }
    chosen = {name: value for name, value in budgets.items() if value is not None}
    if chosen:
        update["memory"] = settings.memory.model_copy(update=chosen)
    if settings.llm is not None and (spec.model or spec.routes is not None):
        llm: dict[str, Any] = {"routes": list(spec.routes or [])}
        if spec.model:
            llm["default"] = spec.model
        update["llm"] = settings.llm.model_copy(update=llm)
    return settings.model_copy(update=update)


def build_agent_adapters(settings: Settings) -> dict[str, Adapter]:
    """One adapter per account of every agent, named ``{platform}@{agent}``."""
    adapters: dict[str, Adapter] = {}
    for spec in settings.agents:
        platforms = spec.platforms
        if platforms.telegram:
            from tether.adapters.telegram import TelegramAdapter

            adapters[account("telegram", spec.name)] = TelegramAdapter(platforms.telegram)
        if platforms.discord:
            from tether.adapters.discord import DiscordAdapter

            adapters[account("discord", spec.name)] = DiscordAdapter(platforms.discord)
        if platforms.feishu:
            from tether.adapters.feishu import FeishuAdapter

            adapters[account("feishu", spec.name)] = FeishuAdapter(platforms.feishu)
        if platforms.slack:
            from tether.adapters.slack.adapter import SlackAdapter

            adapters[account("slack", spec.name)] = SlackAdapter(platforms.slack)
    return adapters


# -- ingress ----------------------------------------------------------------------------


class AccountInbox(Inbox):
    """The inbox as one account's adapter sees it: what it accepts is stamped with the
    account (conversation platform, key, ``meta.agent``) on the way in.

    Also drops what the platform delivers from our own agents' accounts (Discord and
    Feishu deliver one bot's message to the others in a channel): rooms relay agent
    messages themselves, so this copy would answer them twice.
    """

    def __init__(
        self,
        inner: Inbox,
        name: str,
        adapter: Adapter,
        ours: Callable[[Event], bool],
    ) -> None:
        # No super().__init__: every accept is the inner inbox's, after the stamping.
        self.store = inner.store
        self.dispatcher = inner.dispatcher
        self.group_sessions = inner.group_sessions
        self.throttle = inner.throttle
        self.inner = inner
        self.name = name
        self.platform, agent = split_account(name)
        self.agent = agent or ""
        self.adapter = adapter
        self.ours = ours

    def stamp(self, event: Event) -> tuple[Event, str | None]:
        """``event`` as this account's, and the pre-agents key it had (or None). The
        adapter knows its platform's keys (:meth:`~tether.adapters.base.Adapter.account_key`)."""
        key, legacy = event.key, None
        scoped = self.adapter.account_key(key)
        if scoped is not None:
            legacy, key = key, scoped
        conversation = event.conversation.model_copy(update={"platform": self.name})
        meta = {**event.meta, AGENT: self.agent}
        return event.model_copy(
            update={"key": key, "conversation": conversation, "meta": meta}
        ), legacy

    async def accept(
        self, events: Sequence[Event], cursors: Mapping[str, str] | None = None
    ) -> list[bool]:
        went: list[bool] = []  # per event: handed to the inner inbox (else dropped here)
        kept: list[Event] = []
        for event in events:
            stamped, legacy = self.stamp(event)
            if self.ours(event):
                log.info("room.own_message_dropped", key=stamped.key, agent=self.agent)
                went.append(False)
            elif legacy is not None and await self._legacy(stamped, legacy):
                went.append(False)
            else:
                kept.append(stamped)
                went.append(True)
        # Cursors move even when every event was dropped: the platform's stream is past them.
        accepted = await self.inner.accept(kept, cursors) if kept or cursors else []
        for new in accepted:
            if new:
                AGENT_EVENTS.labels(self.agent, "platform").inc()
        inner = iter(accepted)
        return [next(inner) if handed else False for handed in went]

    async def _legacy(self, event: Event, legacy: str) -> bool:
        """True when the store already admitted this message under its pre-agents key
        (written by a one-agent Tether before the upgrade): a redelivery, not news."""
        if await self.store.inbox_row(legacy) is None:
            return False
        metrics.DUPLICATES.labels(event.platform).inc()
        log.info("event.duplicate", key=event.key, legacy_key=legacy, agent=self.agent)
        return True


# -- routing ----------------------------------------------------------------------------


class AgentLLM(LLM):
    """The gateway's LLM with one agent's settings (persona, routes, budgets): the
    providers' clients, key pools and breakers are the shared ones."""

    def __init__(self, shared: LLM, settings: Settings) -> None:  # no super().__init__: shares
        assert settings.llm is not None
        self.shared = shared
        self.settings = settings
        self.config = settings.llm
        self._clients = shared._clients
        self.pools = shared.pools
        self.breakers = shared.breakers

    async def answer(self, *args: Any, **kwargs: Any) -> Completion:
        """The shared :meth:`LLM.answer`, its tokens counted for this agent too (a step
        replayed after a retry is not a call, so it is not counted again)."""
        completion = await super().answer(*args, **kwargs)
        AGENT_TOKENS.labels(self.settings.agent.name).inc(completion.tokens)
        return completion

    async def close(self) -> None:
        """The shared LLM closes the clients; an agent's view has nothing of its own."""


class AgentsRouter(Router):
    """Resolves each event with the router of the agent whose account received it."""

    def __init__(self, settings: Settings, build: Callable[[Settings], Router]) -> None:
        """``build`` makes one agent's router from its settings (``load_router``)."""
        super().__init__("agents")
        self.specs = {spec.name: spec for spec in settings.agents}
        self.settings = {name: agent_settings(settings, s) for name, s in self.specs.items()}
        self.routers = {
            name: _agent_router(name, self.specs[name], build(s))
            for name, s in self.settings.items()
        }
        self._llms: dict[str, AgentLLM] = {}

    def _route_for(self, event: Event) -> tuple[Route, list[Middleware]] | None:
        return self._agents(event, fallback=False)

    def _fallback_for(self, event: Event) -> tuple[Route, list[Middleware]] | None:
        return self._agents(event, fallback=True)

    def _agents(self, event: Event, *, fallback: bool) -> tuple[Route, list[Middleware]] | None:
        """The event's agent's router answers both phases of resolution (its routes,
        then its fallbacks: :meth:`Router.resolve`)."""
        agent = agent_of(event)
        if agent not in self.routers:
            # An event of no account (the console, a cron fire): the first agent's.
            agent = next(iter(self.routers), None)
        router = self.routers.get(agent) if agent else None
        if router is None:
            return super()._fallback_for(event) if fallback else super()._route_for(event)
        found = router._fallback_for(event) if fallback else router._route_for(event)
        if found is None:
            return None
        route, inner = found
        return route, [*self._middlewares, self._with_agent(agent or ""), *inner]

    def commands(self, agent: str | None = None) -> list[tuple[str, Route]]:
        """``agent``'s commands (its own account's menu), else the first agent's."""
        chosen = self.routers.get(agent or "") or next(iter(self.routers.values()), None)
        return chosen.commands(agent) if chosen else super().commands(agent)

    def tools(self) -> list[Tool]:
        """The plugins' tools (every agent's router holds the same plugins)."""
        first = next(iter(self.routers.values()), None)
        return first.tools() if first else super().tools()

    def _with_agent(self, agent: str) -> Middleware:
        async def with_agent(handler: Any, event: Event, data: dict[str, Any]) -> Any:
            ctx: Context = data["ctx"]
            shared = turn_of(ctx).llm
            if shared is not None:
                view = self._llms.get(agent)
                if view is None or view.shared is not shared:  # first use, or a reload
                    view = self._llms[agent] = AgentLLM(shared, self.settings[agent])
                use_llm(ctx, view)
            ctx.log = ctx.log.bind(agent=agent)
            source = "room" if is_relay(event.key) else "platform"
            ctx.log.info("agent.handling", source=source)
            with structlog.contextvars.bound_contextvars(agent=agent):
                return await handler(event, data)

        return with_agent


def _agent_router(name: str, spec: AgentSpec, router: Router) -> Router:
    """The agent's router behind its own access rule (``agents[i].access.allow``)."""
    if not spec.access.allow:
        return router
    pattern = re.compile(
        "|".join(
            "(?:" + ".*".join(re.escape(p) for p in pattern.split("*")) + ")$"
            for pattern in spec.access.allow
        )
    )
    guarded = Router(f"agent:{name}")

    async def agent_access(handler: Any, event: Event, data: dict[str, Any]) -> Any:
        places = [f"{event.platform}:{event.conversation.chat_id}"]
        if event.sender:
            places.append(f"{event.platform}:{event.sender.id}")
        if is_relay(event.key) or is_task(event.key) or any(pattern.match(p) for p in places):
            return await handler(event, data)
        data["ctx"].log.info("agent.access_denied", agent=name, places=places)
        return None

    guarded.middleware(agent_access)
    guarded.include(router)
    return guarded


# -- tether status -----------------------------------------------------------------------


def agents_report(
    settings: Settings, spend: Mapping[str, tuple[int, float]] | None = None
) -> list[dict[str, Any]]:
    """Each agent with its accounts (the names ``tether status`` lists activity under) and,
    given the spend by conversation (``store.spend_by_conversation``), what its
    conversations spent: a conversation's platform names the account, and so the agent."""
    spent: dict[str, tuple[int, float]] = {}
    for conversation, (tokens, cost) in (spend or {}).items():
        agent = split_account(conversation.split(":", 1)[0])[1]
        if agent is not None:
            before = spent.get(agent, (0, 0.0))
            spent[agent] = (before[0] + tokens, before[1] + cost)
    report = []
    for spec in settings.agents:
        tokens, cost = spent.get(spec.name, (0, 0.0))
        report.append(
            {
                "name": spec.name,
                "accounts": [account(p, spec.name) for p in spec.platforms.enabled()],
                "handler": spec.handler,
                "respond_to_agents": spec.respond_to_agents,
                "spend": {"tokens": tokens, "cost": round(cost, 6)},
            }
        )
    return report


def agent_lines(report: list[dict[str, Any]]) -> list[str]:
    return [
        f"agent      {a['name']:<16} {' '.join(a['accounts']) or '(no accounts)'}"
        f"  respond_to_agents={a['respond_to_agents']}"
        f"  today {a['spend']['tokens']:,} tokens, ${a['spend']['cost']:.4f}"
        for a in report
    ]
