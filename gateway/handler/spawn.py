"""What ``ctx.spawn`` hands the gateway: a request for background work (gateway/tasks/).

The handler floor only names the shape (this request, and the ``Spawner`` protocol
beside ``Context``); the tasks floor above it starts the task (its
bounds, its event, its status message) and is given to each run's
:class:`~tether.gateway.handler.context.Turn` by the gateway. A run without it (a test's
bare context, ``agent.tasks.enabled: false``) refuses to spawn, saying so.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SpawnRequest:
    """One task to start, as its starter asked for it."""

    goal: str
    #: A configured agent (``agents:``) to run it as; None: the starter's.
    agent: str | None = None
    #: A persona of its own, instead of the agent's.
    persona: str | None = None
    #: A configured model (``llm.models`` name); None: ``agent.tasks.model`` or the route.
    model: str | None = None
    #: Its token budget; None: ``agent.tasks.token_budget``.
    token_budget: int | None = None
    #: Seconds it may take; None: ``agent.tasks.deadline``.
    deadline: float | None = None
    #: The only tools it may call (names); None: every tool the agent has.
    tools: tuple[str, ...] | None = None
    #: ``module:function`` to run instead of the agent: called with the task's context,
    #: what it returns (a string) is the result.
    handler: str | None = None
    #: Where in the starting turn it was asked (``tool:R:I`` or ``spawn:N``): with the
    #: event key, the task's id, so a re-run of that turn starts no second task.
    position: str = field(default="spawn:0")
