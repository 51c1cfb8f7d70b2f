"""Compaction: fold the oldest unsummarized history into the running summary.

When the unsummarized history of the current context no longer fits
``tether.memory.history_tokens``, its oldest part (everything but the newest half-budget, at
most one budget's worth per pass) is summarized together with the previous summary by
an LLM call the caller supplies (a memoized step). The new summary and the covered rows'
``summarized`` marks are committed with the event's checkpoint: the rows stay in the
archive, nothing is deleted.

Keeping the newest half unsummarized means the prompt always has recent turns verbatim
and compaction runs once per half-budget of new history rather than on every turn.
If the summary call fails for any reason, nothing changes: the rows stay unsummarized,
the failure is logged (``tether.memory.summary_failed``), and the next turn tries again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tether.memory import tokens
from tether.memory.conversation import ConversationMemory
from tether.memory.records import Turn, Window

Message = dict[str, str]
Summarize = Callable[[list[Message], int], Awaitable[str]]

SUMMARY_INSTRUCTIONS = (
    "You maintain the running summary of a conversation between a user and an assistant."
    " Merge the new messages into the existing summary. Keep names, facts, preferences,"
    " decisions, open questions and promises; drop greetings and small talk. Write in the"
    " language of the conversation, as plain prose or a short list, at most {limit} tokens."
    " Answer with the summary only."
)


def summary_limit(history_tokens: int) -> int:
    """How long a summary may get: a quarter of the history budget, within 64..1024."""
    return max(64, min(history_tokens // 4, 1024))


def summary_request(summary: str, turns: list[Turn], limit: int, per_turn: int) -> list[Message]:
    lines = [f"{turn.role}: {tokens.truncate(turn.text, per_turn)}" for turn in turns]
    return [
        {"role": "system", "content": SUMMARY_INSTRUCTIONS.format(limit=limit)},
        {
            "role": "user",
            "content": f"Existing summary:\n{summary or '(none yet)'}\n\nNew messages:\n"
            + "\n".join(lines),
        },
    ]


async def compact(
    memory: ConversationMemory,
    window: Window,
    *,
    history_tokens: int,
    summarize: Summarize,
    log: Any,
) -> bool:
    """Summarize the oldest part if the history outgrew ``window``; True if it did."""
    if not window.more:
        return False
    state = await memory.state()
    keep_budget, kept = history_tokens // 2, 0
    before_id: int | None = None
    for turn in reversed(window.turns):
        assert turn.tokens is not None
        if kept + turn.tokens > keep_budget:
            break
        kept += turn.tokens
        before_id = turn.id
    chunk = await memory.store.oldest_unsummarized(
        memory.conversation, history_tokens, after_id=state.context_from, before_id=before_id
    )
    if not chunk:
        return False
    limit = summary_limit(history_tokens)
    request = summary_request(state.summary, chunk, limit, per_turn=history_tokens)
    try:
        summary = (await summarize(request, limit)).strip()
        if not summary:
            raise ValueError("the model returned an empty summary")
    except Exception as exc:  # keep everything; the next turn tries again
        log.warning(
            "memory.summary_failed",
            error=f"{type(exc).__name__}: {exc}",
            turns=len(chunk),
            first_id=chunk[0].id,
            last_id=chunk[-1].id,
        )
        return False
    await memory.set_summary(summary, chunk)
    log.info(
        "memory.compacted",
        turns=len(chunk),
        first_id=chunk[0].id,
        last_id=chunk[-1].id,
        summary_tokens=tokens.count(summary),
    )
    return True
