"""Context assembly time vs. history length: 100 vs. 100,000 stored messages, same budget.

Assembling a prompt (persona + facts + summary + the newest history that fits
``tether.memory.history_tokens``) reads newest-first from stored per-row token counts and stops
at the budget, so its cost should not depend on how long the conversation is. This
measures it on a SQLite file store for a short and a very long conversation in one run
(interleaved, so drift hits both alike) and prints JSON; the target is a ratio ≤ 1.5.
For scale it also times the naive alternative, reading the whole long history.

    python bench/memory.py [--messages N] [--budget TOKENS] [--repeat N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tether.events import Conversation, Event
from tether.memory import tokens
from tether.memory.conversation import ConversationMemory
from tether.memory.prompt import assemble
from tether.memory.sqlite import SqliteStore
from tether.memory.store import ConversationState, MemoryChanges, Turn

PERSONA = "You are a helpful assistant."
TURNS_PER_EVENT = 1000


def text(i: int) -> str:
    role = "question" if i % 2 == 0 else "answer"
    return f"{role} {i}: a typical chat line about the weather, a recipe, or the news today."


async def seed(store: SqliteStore, conversation: str, count: int) -> None:
    """``count`` messages, written the way the pipeline writes them (checkpoints)."""
    chat = Conversation(platform="bench", chat_id=conversation)
    for start in range(0, count, TURNS_PER_EVENT):
        key = f"{conversation}:{start}"
        event = Event(key=key, platform="bench", conversation=chat)
        await store.accept([(event, conversation)])
        turns = [
            Turn(
                conversation,
                "user" if i % 2 == 0 else "assistant",
                text(i),
                tokens=tokens.count_message(text(i)),
            )
            for i in range(start, min(start + TURNS_PER_EVENT, count))
        ]
        changes = None
        if start == 0:  # a persona override, a summary and facts, as a real chat has
            changes = MemoryChanges(
                conversation,
                state=ConversationState(conversation, persona=PERSONA, summary="Earlier: x."),
                facts=[(f"fact {n}", tokens.count_message(f"fact {n}")) for n in range(10)],
            )
        await store.checkpoint(key, [], turns, changes)


async def assembly_seconds(store: SqliteStore, conversation: str, budget: int) -> float:
    started = time.perf_counter()
    prompt = await assemble(
        ConversationMemory(store, conversation),
        persona=PERSONA,
        history_tokens=budget,
        facts_tokens=1000,
        message="what now?",
    )
    elapsed = time.perf_counter() - started
    assert prompt.history.turns and prompt.history.tokens <= budget
    return elapsed


async def main(messages: int, budget: int, repeat: int) -> dict[str, Any]:
    tokens.encoding()
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(str(Path(tmp) / "bench.db"))
        await store.open()
        try:
            seeding = time.perf_counter()
            await seed(store, "short", 100)
            await seed(store, "long", messages)
            seeded = time.perf_counter() - seeding
            short_window = await store.recent("short", budget)
            long_window = await store.recent("long", budget)
            for _ in range(20):  # warm up caches and the reader connection
                await assembly_seconds(store, "short", budget)
                await assembly_seconds(store, "long", budget)
            short: list[float] = []
            long: list[float] = []
            for _ in range(repeat):
                short.append(await assembly_seconds(store, "short", budget))
                long.append(await assembly_seconds(store, "long", budget))
            naive_started = time.perf_counter()
            everything = await store.history("long", messages)
            naive = time.perf_counter() - naive_started
            assert len(everything) == messages
        finally:
            await store.close()

    def ms(samples: list[float]) -> dict[str, float]:
        ordered = sorted(samples)
        return {
            "median": round(statistics.median(ordered) * 1000, 4),
            "p95": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 4),
        }

    ratio = statistics.median(long) / statistics.median(short)
    return {
        "benchmark": "memory.context_assembly",
        "store": "sqlite file (WAL)",
        "history_tokens": budget,
        "repeat": repeat,
        "seed_seconds": round(seeded, 2),
        "short": {
            "messages": 100,
            "turns_in_prompt": len(short_window.turns),
            "history_tokens_used": short_window.tokens,
            "assembly_ms": ms(short),
        },
        "long": {
            "messages": messages,
            "turns_in_prompt": len(long_window.turns),
            "history_tokens_used": long_window.tokens,
            "assembly_ms": ms(long),
        },
        "ratio_long_vs_short": round(ratio, 3),
        "target_ratio": 1.5,
        "ok": ratio <= 1.5,
        "naive_full_history_read_ms": round(naive * 1000, 2),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.messages, args.budget, args.repeat)), indent=2))
