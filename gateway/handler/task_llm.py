"""``ctx.llm``: the gateway's :class:`~tether.gateway.llm.client.LLM` as one event sees it —
every call a memoized step, within the event's and the conversation's token budgets.

Apart from ``gateway/llm/client.py`` (which talks to providers) because this half talks
to the event: its steps, its memory and its budgets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog

from tether import metrics
from tether.config.schema import Settings
from tether.errors import BudgetExceeded, Fatal
from tether.events import Event
from tether.gateway.llm.client import (
    DEFAULT_MAX_TOKENS,
    LLM,
    MIN_COMPLETION_TOKENS,
    Completion,
    Message,
    Request,
)
from tether.gateway.llm.tool_tokens import extra_tokens
from tether.memory import tokens
from tether.memory.conversation import ConversationMemory
from tether.memory.records import UsageRecord


class EventScope(Protocol):
    """What a :class:`TaskLLM` uses of its handler's ``Context``. Named here, not imported:
    the context makes its ``ctx.llm`` from this module, so importing it back is a cycle."""

    event: Event
    conversation: str
    log: structlog.typing.FilteringBoundLogger
    memory: ConversationMemory

    async def step(self, name: str, fn: Callable[[], Any]) -> Any: ...


class TaskLLM:
    """``ctx.llm``: the LLM as one event sees it, with that event's budget.

    ``spent`` counts the tokens of every call of this event, including answers replayed
    from memoized steps after a retry: they were paid for by this event, and their usage
    is committed with its checkpoint.
    """

    def __init__(self, llm: LLM | None, ctx: EventScope) -> None:
        self._llm = llm
        self._ctx = ctx
        self.spent = 0
        self._names: dict[str, int] = {}
        self._spent_today: int | None = None
        #: A background task's own (gateway/tasks/): its model for calls that name none,
        #: and its token budget in place of ``memory.task_token_budget`` once ``own_budget``.
        self.default_model: str | None = None
        self.own_budget = False
        self.budget: int | None = None

    @property
    def configured(self) -> bool:
        return self._llm is not None

    @property
    def settings(self) -> Settings:
        return self._require().settings

    async def chat(
        self,
        messages: list[Message],
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        name: str = "chat",
        response_format: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        stream: Callable[[str], None] | None = None,
    ) -> Completion:
        """Ask for a completion of ``messages`` (OpenAI chat format).

        ``model`` names a configured model to use instead of the routed one; ``name``
        names the memoized step (``llm:NAME``, numbered when a handler calls it again);
        ``response_format`` is passed to the API as is (e.g. a ``json_schema``), and
        ``tools`` too (the tool loop's schemas: the answer may hold ``tool_calls``);
        ``stream`` is called with the text so far while the answer arrives (a re-run
        that finds the step stored gets the whole text back, and no stream).
        Raises BudgetExceeded before a call that could cross a budget, Retryable when no
        model answered or on 429, Fatal on a request the API refuses.
        """
        llm = self._require()
        model = model if model is not None else self.default_model
        if model is not None and model not in llm.config.models:
            raise Fatal(f"ctx.llm.chat: no model {model!r} in llm.models")
        seen = self._names.get(name, 0) + 1
        self._names[name] = seen
        step = f"llm:{name}" if seen == 1 else f"llm:{name}#{seen}"
        event = self._ctx.event
        candidates = llm.candidates(
            platform=event.platform,
            conversation=self._ctx.conversation,
            command=event.command,
            prompt_tokens=tokens.count_messages(messages),
            model=model,
        )

        async def call() -> dict[str, Any]:
            cap = await self._room(step, candidates[0], messages, max_tokens, tools)
            scope = self._ctx.log.bind(step=step)
            request = Request(messages, cap, response_format, tools, stream)
            return asdict(await llm.answer(candidates, request, scope))

        result = Completion(**await self._ctx.step(step, call))
        self.spent += result.tokens
        self._ctx.memory.record_usage(
            UsageRecord(
                name=step,
                model=result.model,
                day=result.day,
                prompt_tokens=result.prompt_tokens,
                completion_tokens=result.completion_tokens,
                cost=result.cost,
            )
        )
        return result

    async def spent_today(self) -> int:
        """Tokens this conversation spent today (UTC), this event's calls included."""
        if self._spent_today is None:
            today = datetime.now(UTC).date().isoformat()
            rows = await self._ctx.memory.store.usage(self._ctx.conversation, since=today)
            self._spent_today = sum(row.tokens for row in rows if row.day == today)
        return self._spent_today + self.spent

    async def _room(
        self,
        step: str,
        model: str,
        messages: list[Message],
        max_tokens: int | None,
        tools: list[dict[str, Any]] | None = None,
    ) -> int:
        """The completion cap for the next call, or BudgetExceeded if it may not be made."""
        llm = self._require()
        memory = llm.settings.memory
        encoding = llm.encoding(model)
        prompt = tokens.count_messages(messages, encoding)
        prompt += extra_tokens(messages, tools, encoding)  # schemas and calls are billed too
        cap = max_tokens or llm.model(model).max_tokens or DEFAULT_MAX_TOKENS
        limits = []
        task_budget = self.budget if self.own_budget else memory.task_token_budget
        if task_budget is not None:
            limits.append(("task", task_budget, self.spent))
        if memory.daily_token_budget is not None:
            limits.append(("daily", memory.daily_token_budget, await self.spent_today()))
        for budget, limit, spent in limits:
            room = limit - spent - prompt
            if room < MIN_COMPLETION_TOKENS:
                needed = prompt + MIN_COMPLETION_TOKENS
                metrics.BUDGET_EXCEEDED.labels(budget).inc()
                self._ctx.log.warning(
                    "budget.exceeded",
                    budget=budget,
                    limit=limit,
                    spent=spent,
                    needed=needed,
                    step=step,
                )
                raise BudgetExceeded(
                    _budget_reply(budget, limit, spent, needed),
                    budget=budget,
                    limit=limit,
                    spent=spent,
                    needed=needed,
                )
            cap = min(cap, room)
        return cap

    def _require(self) -> LLM:
        if self._llm is None:
            raise Fatal("ctx.llm: no llm section is configured")
        return self._llm


def _budget_reply(budget: str, limit: int, spent: int, needed: int) -> str:
    if budget == "daily":
        return (
            f"This conversation has used its daily token budget ({spent:,} of {limit:,}"
            " tokens today), so I did not call the model. It resets at 00:00 UTC."
        )
    return (
        f"I stopped before the next model call: it needed about {needed:,} tokens and this"
        f" request has {max(limit - spent, 0):,} of its {limit:,}-token budget left."
    )
