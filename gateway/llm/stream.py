"""A model call that streams: the answer's text is handed on as it arrives.

:class:`~tether.gateway.llm.client.LLM` asks for a stream only when the request says
who waits for the text (``Request.on_text``: the ``llm`` agent's reply shown while it is
written, ``gateway/agent/streaming.py``); every other call (summaries, reflection,
structured output) stays one plain request. The request carries it down the call chain
as a value, so what streams is visible in every signature it passes. The streamed call returns the
same ``ChatCompletion`` a plain one does — the text, the tool calls put back together
from their deltas, and the usage (``stream_options.include_usage``) — so routing, key
pools, budgets and the memoized step treat both alike: a re-run gets the stored final
text, not a second stream.

Some OpenAI-compatible servers and proxies ignore ``stream: true`` and answer with one
JSON completion. The SDK would read that body as an event stream with no events (an
empty answer), so a JSON body is read as what it is: the whole answer at once.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion


def creator(
    client: openai.AsyncOpenAI,
    response_format: dict[str, Any] | None,
    listener: Callable[[str], None] | None,
) -> Callable[..., Awaitable[Any]]:
    """``client.chat.completions.create``, streamed when ``listener`` waits for the text
    (structured output is never streamed: its text is JSON, not for a person)."""
    if listener is None or response_format is not None:
        return client.chat.completions.create

    async def create(**kwargs: Any) -> ChatCompletion:
        return await streamed(client, listener, **kwargs)

    return create


async def streamed(
    client: openai.AsyncOpenAI, listener: Callable[[str], None], **kwargs: Any
) -> ChatCompletion:
    """One streamed request, read to its end and returned as one ``ChatCompletion``."""
    from openai.types import CompletionUsage
    from openai.types.chat import ChatCompletion, ChatCompletionMessage
    from openai.types.chat.chat_completion import Choice

    stream = await client.chat.completions.create(
        stream=True, stream_options={"include_usage": True}, **kwargs
    )
    if "json" in stream.response.headers.get("content-type", ""):  # not a stream after all
        body = await stream.response.aread()
        await stream.close()
        return ChatCompletion.model_validate_json(body)
    parts: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    usage: CompletionUsage | None = None
    finish: Any = "stop"
    ident, model = "", str(kwargs.get("model", ""))
    async for chunk in stream:
        ident, model = chunk.id or ident, chunk.model or model
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices[:1]:
            delta = choice.delta
            if delta.content:
                parts.append(delta.content)
                listener("".join(parts))
            for call in delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] = call.id or slot["id"]
                if call.function is not None:
                    slot["name"] += call.function.name or ""
                    slot["arguments"] += call.function.arguments or ""
            if choice.finish_reason:
                finish = choice.finish_reason
    tool_calls = [
        {"id": c["id"], "type": "function",
         "function": {"name": c["name"], "arguments": c["arguments"]}}
        for _, c in sorted(calls.items())
    ]  # fmt: skip
    message = ChatCompletionMessage.model_validate(
        {"role": "assistant", "content": "".join(parts), "tool_calls": tool_calls or None}
    )
    return ChatCompletion(
        id=ident or "streamed",
        object="chat.completion",
        created=int(time.time()),
        model=model,
        choices=[Choice(index=0, message=message, finish_reason=finish)],
        usage=usage,
    )
