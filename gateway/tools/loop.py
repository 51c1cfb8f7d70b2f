"""The tool loop: ask the model, run the tools it asks for, ask again — until it answers.

Bounded twice. ``agent.max_tool_rounds`` counts the model's answers that asked for tools;
when they are used up the model is asked once more WITHOUT tools, with a note saying so,
so the person still gets an answer built from what the tools returned
(``tool.rounds_exhausted``). And every round is an ordinary ``ctx.llm.chat`` call: one
that would cross the event's token budget is not made, and the person is told
(:class:`~tether.errors.BudgetExceeded`, as for any model call).

Every round is its own memoized step (``llm:reply``, ``llm:reply#2``, …) and every tool
execution too (``tool:{round}:{index}``, :mod:`.execute`), so a re-run after a crash
replays the rounds without paying for them again and runs no finished tool twice.

A call whose arguments are over ``agent.tools.max_argument_bytes`` is refused, and the
next round's transcript carries a short stand-in for them (:func:`.bounds.stand_in`):
sent back whole, they would be sent, billed and counted (on the event loop) again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from tether.gateway.handler.context import turn_of
from tether.gateway.llm.client import Completion, Message
from tether.gateway.tools import bounds
from tether.gateway.tools.execute import execute

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context

#: What the model is told when it may call no more tools in this turn.
ROUNDS_USED = (
    "You have used every tool call this turn allows. Do not ask for more tools: answer"
    " the person now with what the tools returned, and say what is left undone."
)


async def chat_with_tools(
    ctx: Context,
    messages: list[Message],
    *,
    name: str = "reply",
    stream: Callable[[str], None] | None = None,
    allow: Collection[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Completion:
    """The model's final answer to ``messages``, after the tool calls it asked for.

    Without tools (no toolbox, or none offered in this turn) this is one plain
    ``ctx.llm.chat`` call, the same step as before tools existed. ``stream`` is handed
    every round's text as it arrives (the reply's preview); ``allow`` names the only
    tools offered (a background task's own set), and ``progress`` is told, in words,
    each tool the model calls (a task's status message).
    """
    toolbox = turn_of(ctx).tools
    tools = await toolbox.tools(ctx) if toolbox else {}
    if allow is not None:
        tools = {tool_name: tool for tool_name, tool in tools.items() if tool_name in allow}
    if not tools:
        return await ctx.llm.chat(messages, name=name, stream=stream)
    schemas = [tool.schema() for tool in tools.values()]
    limit = ctx.llm.settings.agent.max_tool_rounds
    cap = bounds.limits(ctx).max_argument_bytes
    transcript = list(messages)
    for round_ in range(limit):
        completion = await ctx.llm.chat(transcript, name=name, tools=schemas, stream=stream)
        if not completion.tool_calls:
            return completion
        # A server that sends no call ids (some local ones) gets positional ones.
        calls = [
            {**call, "id": call.get("id") or f"call_{round_}_{index}"}
            for index, call in enumerate(completion.tool_calls)
        ]
        sent = [bounds.stand_in(call, cap) for call in calls]
        transcript.append({"role": "assistant", "content": completion.text, "tool_calls": sent})
        for index, call in enumerate(calls):
            if progress is not None:
                progress(f"step {round_ + 1}: {call.get('function', {}).get('name', 'a tool')}")
            result = await execute(ctx, tools, call, round_, index)
            transcript.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    ctx.log.warning("tool.rounds_exhausted", rounds=limit)
    transcript.append({"role": "system", "content": ROUNDS_USED})
    return await ctx.llm.chat(transcript, name=name, stream=stream)
