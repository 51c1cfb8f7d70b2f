"""The model: OpenAI-compatible chat completions, routed over configured providers.

- ``client.py``       :class:`LLM`: routes, fallbacks, budgets' arithmetic, one call
- ``keys.py``         a provider's API keys as a pool, a circuit breaker per model
- ``waits.py``        how long to wait for the model: a provider's Retry-After, bounded
- ``misses.py``       what a call raises when no candidate answered (busy, failed, refused)
- ``stream.py``       a streamed call read to its end, its text handed on as it arrives
- ``tool_tokens.py``  what tool schemas and calls add to a prompt's token count

Below the handler floor: ``ctx.llm`` (:mod:`tether.gateway.handler.task_llm`) is this
client seen by one event, with that event's budget and memoized steps.
"""
