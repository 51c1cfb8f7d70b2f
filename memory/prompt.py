"""Context assembly: persona + facts + running summary + the newest history that fits.

Every part is bounded: facts by ``tether.memory.facts_tokens``, the summary by its own cap
(set when it is written), history by ``tether.memory.history_tokens``. The history is read
newest-first from stored per-row token counts and stops at the budget, so assembling a
context costs the same for a conversation of 100 messages as for one of 100,000.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.memory import tokens
from tether.memory.conversation import ConversationMemory
from tether.memory.records import ConversationState, Fact, Turn, Window

Message = dict[str, str]
_ROLES = frozenset({"user", "assistant", "system"})


@dataclass(slots=True)
class Prompt:
    messages: list[Message]
    #: Prompt tokens as counted here (the API's own count comes back in its usage).
    tokens: int
    state: ConversationState
    facts: list[Fact]
    history: Window


def system_text(persona: str, facts: list[Fact], summary: str) -> str:
    """The system message: who the agent is, what it must remember, what came before."""
    parts = [persona.strip()]
    chat = [fact for fact in facts if fact.owner is None]
    person = [fact for fact in facts if fact.owner is not None]
    if chat:
        listed = "\n".join(f"- {fact.text}" for fact in chat)
        parts.append(f"Facts to remember in this conversation:\n{listed}")
    if person:  # only ever the writer's own (ConversationMemory.facts), so "you" is right
        listed = "\n".join(f"- {fact.text}" for fact in person)
        parts.append(f"What the person writing to you now told you about themselves:\n{listed}")
    if summary:
        parts.append(f"Summary of the earlier conversation:\n{summary.strip()}")
    return "\n\n".join(part for part in parts if part)


def turn_message(turn: Turn) -> Message:
    return {"role": turn.role if turn.role in _ROLES else "user", "content": turn.text}


async def assemble(
    memory: ConversationMemory,
    *,
    persona: str,
    history_tokens: int,
    facts_tokens: int,
    message: str | None = None,
) -> Prompt:
    """The chat prompt for the next call; ``message`` (the new user text) goes last.

    ``persona`` is the default (``agent.persona``); a conversation's ``/persona`` wins.
    """
    state = await memory.state()
    facts = await memory.facts(facts_tokens) if facts_tokens > 0 else []
    window = await memory.window(history_tokens)
    system = system_text(state.persona or persona, facts, state.summary)
    messages: list[Message] = [{"role": "system", "content": system}]
    messages += [turn_message(turn) for turn in window.turns]
    counted = tokens.count_message(system) + window.tokens + 3
    if message is not None:
        messages.append({"role": "user", "content": message})
        counted += tokens.count_message(message)
    return Prompt(messages, counted, state, facts, window)
